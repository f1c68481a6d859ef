"""netattach.kube.client without an API server: kubeconfig errors, the lazy import, and what
goes on the wire (against a loopback HTTP stub that records each request)."""
from __future__ import annotations

import email.utils
import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from netattach.cni.errors import as_cni_error
from netattach.kube import session as kube  # the budget, the retries, the count
from netattach.kube.client import Kube, KubeError

TOKEN = "unit-test-token-0123456789abcdef"


def kubeconfig(path: Path, server: str, user: dict | None = None, **cluster) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server, **cluster}}],
        "users": [{"name": "u", "user": user if user is not None else {"token": TOKEN}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x"}))
    return path


class Stub(ThreadingHTTPServer):
    """Answers each request with the next (status, body[, headers]) of `answers`, the
    last one again once they run out; records requests. body: a dict, sent as JSON,
    or bytes, sent as they are; headers: extra response headers (Retry-After,
    Content-Type)."""

    daemon_threads = True

    def __init__(self, answers: list[tuple]):
        self.answers = list(answers)
        self.seen: list[dict] = []
        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def next_answer(self) -> tuple:
        """The answer to the request just recorded in `seen`."""
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


class Handler(BaseHTTPRequestHandler):
    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.server.seen.append({"method": self.command, "path": self.path,
                                 "headers": dict(self.headers), "body": self.rfile.read(length)})
        status, doc, *extra = self.server.next_answer()
        headers = {"Content-Type": "application/json", **(extra[0] if extra else {})}
        data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_PATCH = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def stub():
    servers = []

    def start(*answers):
        s = Stub(list(answers))
        threading.Thread(target=s.serve_forever, args=(0.02,), daemon=True).start()
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def status_doc(code: int, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": code}


# ---------------------------------------------------------------- kubeconfig

def test_constructing_imports_nothing_and_sends_nothing():
    code = ("import sys; from netattach.kube.client import Kube, requests_made; "
            "k = Kube('/nonexistent', 1.0); "
            "assert 'lightkube' not in sys.modules and 'httpx2' not in sys.modules; "
            "assert not [m for m in sys.modules if m.split('.')[0] == 'kubernetes']; "
            "assert requests_made() == 0")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr


def test_missing_kubeconfig(tmp_path):
    before = kube.requests_made()
    k = Kube(str(tmp_path / "absent"), 1.0)
    with pytest.raises(KubeError) as e:
        k.get_pod("ns", "p")
    assert e.value.status == 0
    assert str(e.value).startswith(f"cannot load kubeconfig {tmp_path / 'absent'}")
    assert kube.requests_made() == before


@pytest.mark.parametrize("text", [
    "just a string\n",
    "clusters: []\ncontexts: []\n",  # no current-context
    "clusters: []\ncontexts: [{name: x, context: {cluster: gone}}]\ncurrent-context: x\n",
    "clusters: [{name: c, cluster: {server: 7}}]\n",
    ": : :\n",
], ids=["not-a-mapping", "no-context", "unknown-cluster", "wrong-type", "bad-yaml"])
def test_broken_kubeconfig(tmp_path, text):
    path = tmp_path / "kc"
    path.write_text(text)
    with pytest.raises(KubeError) as e:
        Kube(str(path), 1.0).get_nad("ns", "n")
    assert e.value.status == 0 and str(e.value).startswith(f"cannot load kubeconfig {path}: ")


def test_unreadable_ca_file(tmp_path):
    path = kubeconfig(tmp_path / "kc", "https://127.0.0.1:1", **{"certificate-authority": str(tmp_path / "no-ca")})
    with pytest.raises(KubeError) as e:
        Kube(str(path), 1.0).get_pod("ns", "p")
    assert e.value.status == 0 and "cannot load kubeconfig" in str(e.value)


# ---------------------------------------------------------------- the wire

def test_requests_on_the_wire(stub, tmp_path):
    s = stub((200, {"kind": "Pod", "metadata": {"name": "p"}}), (404, status_doc(404, "nope")),
             (200, {"kind": "NetworkAttachmentDefinition"}), (200, {"kind": "Pod"}))
    k = Kube(str(kubeconfig(tmp_path / "kc", s.url + "/prefix")), 60.0)
    before = kube.requests_made()
    assert k.get_pod("ns", "p") == {"kind": "Pod", "metadata": {"name": "p"}}
    assert k.get_pod("ns", "q") is None
    assert k.get_nad("ns", "n") == {"kind": "NetworkAttachmentDefinition"}
    k.patch_pod_annotations("ns", "p", {"a/b": "c"})
    assert [(r["method"], r["path"]) for r in s.seen] == [
        ("GET", "/prefix/api/v1/namespaces/ns/pods/p"),
        ("GET", "/prefix/api/v1/namespaces/ns/pods/q"),
        ("GET", "/prefix/apis/k8s.cni.cncf.io/v1/namespaces/ns/network-attachment-definitions/n"),
        ("PATCH", "/prefix/api/v1/namespaces/ns/pods/p/status"),
    ]
    assert all(r["headers"]["Authorization"] == f"Bearer {TOKEN}" for r in s.seen)
    assert all(r["headers"]["Accept"] == "application/json" for r in s.seen)
    patch = s.seen[-1]
    assert patch["headers"]["Content-Type"] == "application/merge-patch+json"
    assert json.loads(patch["body"]) == {"metadata": {"annotations": {"a/b": "c"}}}
    assert kube.requests_made() - before == 4


def test_list_pages_follows_continue(stub, tmp_path):
    """A LIST in pages (the migration pre-flight's): `limit`, then the answer's continue
    token, quoted, until an answer has none; a 404 (a CRD not installed) and a 410 (the
    token expired) are errors naming the list."""
    s = stub((200, {"items": [{"n": 1}, {"n": 2}], "metadata": {"continue": "a/b=="}}),
             (200, {"items": [{"n": 3}, "junk"], "metadata": {}}),
             (404, status_doc(404, "no such resource")),
             (410, status_doc(410, "The provided continue parameter is too old")))
    k = Kube(str(kubeconfig(tmp_path / "kc", s.url)), 60.0)
    assert list(k.list_pages("/api/v1/pods", "pods in all namespaces", "pods", 2)) == [
        [{"n": 1}, {"n": 2}], [{"n": 3}]]
    with pytest.raises(KubeError) as e:
        list(k.list_pages("/apis/x/v1/ys", "ys in all namespaces", "ys.x"))
    assert e.value.status == 404 and str(e.value).startswith(
        "list ys in all namespaces: HTTP 404: the API server does not serve ys.x")
    with pytest.raises(KubeError) as e:
        list(k.list_pages("/api/v1/pods", "pods in all namespaces", "pods"))
    assert e.value.status == 410 and "list pods in all namespaces: HTTP 410" in str(e.value)
    assert [r["path"] for r in s.seen] == [
        "/api/v1/pods?limit=2", "/api/v1/pods?limit=2&continue=a%2Fb%3D%3D",
        "/apis/x/v1/ys?limit=500", "/api/v1/pods?limit=500"]


def test_raw_request_passes_status_and_bytes(stub, tmp_path):
    s = stub((500, {"oops": 1}), (201, {"ok": True}))
    k = Kube(str(kubeconfig(tmp_path / "kc", s.url)), 60.0)
    assert k.request("GET", "/x") == (500, b'{"oops": 1}')
    status, data = k.request("POST", "/y", body=b"raw", content_type="text/plain")
    assert (status, json.loads(data)) == (201, {"ok": True})
    assert s.seen[1]["body"] == b"raw" and s.seen[1]["headers"]["Content-Type"] == "text/plain"


@pytest.mark.parametrize("code,phrase", [(401, "were rejected"), (403, "RBAC forbids it")])
def test_401_403_explained_without_retry(stub, tmp_path, code, phrase):
    s = stub(*[(code, status_doc(code, "the server says no"))] * 3)
    path = kubeconfig(tmp_path / "kc", s.url)
    k = Kube(str(path), 60.0)
    before = kube.requests_made()
    for call in (lambda: k.get_pod("ns", "p"), lambda: k.get_nad("ns", "n"),
                 lambda: k.patch_pod_annotations("ns", "p", {"a": "b"})):
        with pytest.raises(KubeError) as e:
            call()
        assert e.value.status == code and phrase in str(e.value)
        assert str(e.value).endswith(": the server says no")
        assert TOKEN not in str(e.value)
    assert str(path) in str(e.value) or code == 403
    assert len(s.seen) == 3 and kube.requests_made() - before == 3  # one request per call: no retry


def test_a_403_names_the_rbac_manifest_of_the_client(stub, tmp_path):
    """The plugin's requests are granted by deploy/base/rbac.yaml, the node daemon's by
    deploy/thick/rbac.yaml: a 403 names the one to fix."""
    s = stub(*[(403, status_doc(403, "no"))] * 2)
    path = str(kubeconfig(tmp_path / "kc", s.url))
    for rbac in ("deploy/base/rbac.yaml", "deploy/thick/rbac.yaml"):
        with pytest.raises(KubeError) as e:
            Kube(path, 60.0, rbac=rbac).get_pod("ns", "p")
        assert f"bind the ClusterRole from {rbac}," in str(e.value)


@pytest.mark.parametrize("code,phrase", [(401, "log in again or refresh them"),
                                         (403, "the kubeconfig's user may not get pods")])
def test_an_operators_401_403_name_no_manifest_of_netattach(stub, tmp_path, code, phrase):
    """The operator tools' client (rbac=None) runs with a person's credentials: its 401
    and 403 say what is missing, not to bind netattach's ClusterRole or rewrite a
    ServiceAccount token."""
    s = stub((code, status_doc(code, "no")))
    with pytest.raises(KubeError) as e:
        Kube(str(kubeconfig(tmp_path / "kc", s.url)), 60.0, rbac=None).get_pod("ns", "p")
    assert phrase in str(e.value)
    assert "rbac.yaml" not in str(e.value) and "ServiceAccount" not in str(e.value)


def test_a_status_devices_write_refused_per_driver_says_what_to_fix(stub, tmp_path):
    """Kubernetes >= 1.36 answers a status.devices write without the per-driver permission
    with 422 (Invalid), not 403 (pkg/registry/resource/utils.go AuthorizedForDeviceStatus)."""
    msg = ('ResourceClaim.resource.k8s.io "c" is invalid: status.devices: Forbidden: changing '
           'status.devices requires resource="resourceclaims/driver", verb="[associated-node:'
           'patch arbitrary-node:patch]" permission: ...')
    s = stub((422, status_doc(422, msg)))
    with pytest.raises(KubeError) as e:
        Kube(str(kubeconfig(tmp_path / "kc", s.url)), 60.0, rbac="deploy/thick/rbac.yaml"
             ).apply_claim_devices("ns", "c", [])
    assert e.value.status == 422 and str(e.value).endswith(msg)
    assert "bind the ClusterRole from deploy/thick/rbac.yaml, whose resourceclaims/driver rule" \
        in str(e.value) and "bound to a pod on the claim's node" in str(e.value)


def test_other_status_is_an_error_with_the_server_message(stub, tmp_path):
    s = stub((400, status_doc(400, "the request is malformed")))
    with pytest.raises(KubeError) as e:
        Kube(str(kubeconfig(tmp_path / "kc", s.url)), 60.0).get_pod("ns", "p")
    assert e.value.status == 400
    assert str(e.value) == "get pod ns/p: HTTP 400: the request is malformed"


# ---------------------------------------------------------------- answers that are not objects

HTML = (b"<!DOCTYPE html>\n<html><head><title>Sign in</title></head>\n<body>\x00\x1b[31m"
        + b"<p>Welcome to the network</p>" * 5000 + b"</body></html>")


@pytest.mark.parametrize("body,problem", [
    (HTML, "is not JSON"),
    (b'{"kind": "Pod", "metadata": {"na', "is not JSON"),  # truncated
    (b"[]", "is JSON an array, not an object"),
    (b'"Pod"', "is JSON a string, not an object"),
    (b"", "is empty"),
    (b"\xff\xfe{}", "is not JSON"),  # not UTF-8
    (b"[" * 100_000, "is not JSON"),  # too deep for json's recursion
], ids=["html", "truncated", "array", "string", "empty", "not-utf8", "too-deep"])
@pytest.mark.parametrize("call", ["pod", "nad"])
def test_200_that_is_not_a_json_object_is_code_11_naming_server_and_request(
        stub, tmp_path, body, problem, call):
    """Defect 2: json.loads of such a body escaped as an internal error (999)."""
    s = stub((200, body, {"Content-Type": "text/html"}))
    k = Kube(str(kubeconfig(tmp_path / "kc", s.url)), 60.0)
    with pytest.raises(KubeError) as e:
        k.get_pod("ns", "p") if call == "pod" else k.get_nad("ns", "n")
    msg = str(e.value)
    path = ("/api/v1/namespaces/ns/pods/p" if call == "pod" else
            "/apis/k8s.cni.cncf.io/v1/namespaces/ns/network-attachment-definitions/n")
    assert e.value.code == 11 and as_cni_error(e.value).code == 11
    assert e.value.status == 200
    assert s.url in msg and f"GET {path}" in msg and problem in msg, msg
    assert "Content-Type text/html" in msg and f"{len(body)} bytes" in msg
    assert len(msg) < 600 and "\n" not in msg and "\x00" not in msg and "\x1b" not in msg
    assert len(s.seen) == 1  # a 200 is an answer: not retried


def test_html_page_is_quoted_by_its_start(stub, tmp_path):
    s = stub((200, HTML, {"Content-Type": "text/html"}))
    with pytest.raises(KubeError) as e:
        Kube(str(kubeconfig(tmp_path / "kc", s.url)), 60.0).get_pod("ns", "p")
    assert '"<!DOCTYPE html> <html><head><title>Sign in</title></head> <body>' in str(e.value)
    assert "...\")" in str(e.value)


def test_error_status_with_a_huge_html_body_is_quoted_short(stub, tmp_path):
    s = stub((403, HTML, {"Content-Type": "text/html"}))
    with pytest.raises(KubeError) as e:
        Kube(str(kubeconfig(tmp_path / "kc", s.url)), 60.0).get_pod("ns", "p")
    assert e.value.status == 403 and len(str(e.value)) < 1000
    assert "\n" not in str(e.value) and "\x00" not in str(e.value)


# ---------------------------------------------------------------- retries of 429 and 5xx

@pytest.fixture
def sleeps(monkeypatch) -> list[float]:
    """The pauses Kube.pause takes, recorded instead of slept: the tests check the
    budget's accounting and the requests sent, never the wall clock."""
    taken: list[float] = []
    monkeypatch.setattr(kube.time, "sleep", taken.append)
    return taken


def retry_after(seconds) -> dict:
    return {"Retry-After": str(seconds)}


POD = {"kind": "Pod", "metadata": {"name": "p"}}


def test_429_with_retry_after_then_200_succeeds_after_one_retry(stub, tmp_path, sleeps, caplog):
    s = stub((429, status_doc(429, "Too many requests, please try again later."),
              retry_after(1)), (200, POD))
    k = Kube(str(kubeconfig(tmp_path / "kc", s.url)), 60.0)
    before = kube.requests_made()
    assert k.get_pod("ns", "p") == POD
    assert sleeps == [1.0]
    assert k.spent >= 1.0  # the pause is counted like a request
    assert kube.requests_made() - before == 2 and len(s.seen) == 2
    assert s.seen[0]["path"] == s.seen[1]["path"] == "/api/v1/namespaces/ns/pods/p"
    assert "answered HTTP 429; trying again after a pause of 1 s (its Retry-After)" in caplog.text


def test_503_twice_then_200_backs_off_without_retry_after(stub, tmp_path, sleeps):
    s = stub((503, status_doc(503, "unavailable")), (503, b"Service Unavailable",
                                                      {"Content-Type": "text/plain"}),
             (200, POD))
    k = Kube(str(kubeconfig(tmp_path / "kc", s.url)), 60.0)
    assert k.get_pod("ns", "p") == POD
    assert len(sleeps) == 2 and len(s.seen) == 3
    for taken, base in zip(sleeps, kube.RETRY_BACKOFF):
        assert base <= taken <= base * 1.1  # plus jitter
    assert k.spent >= sum(sleeps)


def test_retry_after_as_an_http_date(stub, tmp_path, sleeps):
    s = stub((503, status_doc(503, "shutting down"),
              {"Retry-After": email.utils.formatdate(time.time() + 30, usegmt=True)}),
             (200, POD))
    assert Kube(str(kubeconfig(tmp_path / "kc", s.url)), 60.0).get_pod("ns", "p") == POD
    [taken] = sleeps
    assert 25 < taken <= 31  # about 30 s from the date's second; no wall clock is read


@pytest.mark.parametrize("header", ["30", "date"])
def test_retry_after_longer_than_the_budget_left_fails_at_once(stub, tmp_path, sleeps, header):
    value = "30" if header == "30" else email.utils.formatdate(time.time() + 32, usegmt=True)
    s = stub((429, status_doc(429, "Too many requests, please try again later."),
              {"Retry-After": value}), (200, POD))
    k = Kube(str(kubeconfig(tmp_path / "kc", s.url)), 5.0, "apiTimeout")
    before = kube.requests_made()
    with pytest.raises(KubeError) as e:
        k.get_pod("ns", "p")
    msg = str(e.value)
    assert sleeps == [] and len(s.seen) == 1 and kube.requests_made() - before == 1
    assert k.spent < 5.0  # nothing was slept out of the budget
    assert e.value.status == 429 and e.value.code == 11
    assert msg.startswith("get pod ns/p: HTTP 429 (the API server asked to retry after ")
    assert "(Retry-After), more than the " in msg and " s left; limit: 5 s" in msg
    assert "apiTimeout" in msg and msg.endswith(": Too many requests, please try again later.")


def test_500_until_the_budget_runs_out_fails_with_the_last_status(stub, tmp_path, sleeps,
                                                                  monkeypatch):
    """Pauses of 10 s (+ up to 10 % jitter) in a 25 s budget: two fit, a third never
    does, whatever the requests take short of 3 s, so the count is exact even on a
    loaded machine; the pauses are recorded, not slept."""
    monkeypatch.setattr(kube, "RETRY_BACKOFF", (10.0,))
    s = stub((503, status_doc(503, "unavailable")), (500, status_doc(500, "etcd is sad")))
    k = Kube(str(kubeconfig(tmp_path / "kc", s.url)), 25.0, "apiTimeout")
    before = kube.requests_made()
    with pytest.raises(KubeError) as e:
        k.get_pod("ns", "p")
    msg = str(e.value)
    assert e.value.status == 500 and e.value.code == 11
    assert len(s.seen) == 3 == kube.requests_made() - before
    assert len(sleeps) == 2 and all(10.0 <= x <= 11.0 for x in sleeps)
    assert sum(sleeps) <= k.spent < 25.0
    assert msg == ("get pod ns/p: HTTP 500 (3 tries answered HTTP 503/500, no time left for "
                   "another; limit: 25 s for all API requests of this operation, apiTimeout): "
                   "etcd is sad")


def test_retries_stop_at_max_retries(stub, tmp_path, sleeps):
    s = stub((503, status_doc(503, "shutting down"), retry_after(0)))
    with pytest.raises(KubeError) as e:
        Kube(str(kubeconfig(tmp_path / "kc", s.url)), 60.0).get_nad("ns", "n")
    assert len(s.seen) == kube.MAX_RETRIES + 1 and sleeps == [0.0] * kube.MAX_RETRIES
    assert e.value.status == 503
    assert f"({kube.MAX_RETRIES + 1} tries answered HTTP 503, the most netattach makes)" \
        in str(e.value)


def test_a_retry_that_cannot_connect_names_the_answers_before(stub, tmp_path, monkeypatch):
    s = stub((503, status_doc(503, "shutting down"), retry_after(1)))

    def server_goes_away(seconds: float) -> None:
        s.shutdown()
        s.server_close()

    monkeypatch.setattr(kube.time, "sleep", server_goes_away)
    with pytest.raises(KubeError) as e:
        Kube(str(kubeconfig(tmp_path / "kc", s.url)), 60.0).get_pod("ns", "p")
    assert e.value.status == 0 and e.value.code == 11
    assert str(e.value).startswith(f"API server {s.url} unreachable")
    assert str(e.value).endswith("(after 1 try answered HTTP 503)")


@pytest.mark.parametrize("code", [400, 401, 403, 404, 409, 422])
def test_other_4xx_are_not_retried(stub, tmp_path, sleeps, code):
    s = stub((code, status_doc(code, "no")), (200, POD))
    k = Kube(str(kubeconfig(tmp_path / "kc", s.url)), 60.0)
    if code == 404:
        assert k.get_pod("ns", "p") is None
    else:
        with pytest.raises(KubeError) as e:
            k.get_pod("ns", "p")
        assert e.value.status == code
    assert len(s.seen) == 1 and sleeps == []


def test_patch_is_retried_with_the_same_body(stub, tmp_path, sleeps):
    s = stub((429, status_doc(429, "slow down"), retry_after(1)), (200, POD))
    Kube(str(kubeconfig(tmp_path / "kc", s.url)), 60.0).patch_pod_annotations(
        "ns", "p", {"a/b": "c"}, uid="u1")
    assert [r["method"] for r in s.seen] == ["PATCH", "PATCH"] and sleeps == [1.0]
    assert s.seen[0]["body"] == s.seen[1]["body"]
    assert json.loads(s.seen[1]["body"]) == {"metadata": {"annotations": {"a/b": "c"},
                                                          "uid": "u1"}}


POD_REF = {"namespace": "ns", "name": "p", "uid": "u1"}


@pytest.mark.parametrize("second", [201, 409], ids=["created", "stored-by-the-first-try"])
def test_event_post_is_retried_under_one_name(stub, tmp_path, sleeps, second):
    """A 409 AlreadyExists on the retry means the first try's Event was stored."""
    s = stub((504, status_doc(504, "timeout")), (second, status_doc(second, "x")))
    Kube(str(kubeconfig(tmp_path / "kc", s.url)), 60.0).create_event(
        POD_REF, "Normal", "AddedInterface", "hello")
    assert [r["method"] for r in s.seen] == ["POST", "POST"] and len(sleeps) == 1
    first, retry = (json.loads(r["body"]) for r in s.seen)
    assert first == retry and first["metadata"]["name"].startswith("p.")


def test_event_409_on_the_first_try_is_an_error(stub, tmp_path, sleeps):
    s = stub((409, status_doc(409, "already exists")))
    with pytest.raises(KubeError) as e:
        Kube(str(kubeconfig(tmp_path / "kc", s.url)), 60.0).create_event(
            POD_REF, "Normal", "AddedInterface", "hello")
    assert e.value.status == 409 and len(s.seen) == 1


def test_bare_request_is_never_retried(stub, tmp_path, sleeps):
    s = stub((503, status_doc(503, "x"), retry_after(1)), (200, POD))
    k = Kube(str(kubeconfig(tmp_path / "kc", s.url)), 60.0)
    assert k.request("GET", "/x")[0] == 503 and len(s.seen) == 1 and sleeps == []


@pytest.mark.parametrize("value,seconds", [
    ("1", 1.0), (" 5 ", 5.0), ("0", 0.0),
    ("Sun, 06 Nov 1994 08:49:37 GMT", 3.0),
    ("Sun, 06 Nov 1994 08:49:30 GMT", 0.0),  # past: at once
    (None, None), ("", None), ("-1", None), ("1.5", None), ("soon", None), ("\u0661", None),
])
def test_retry_after_header_forms(value, seconds):
    """RFC 9110 §10.2.3: delay-seconds or an HTTP-date; anything else is no header."""
    now = 784111777.0 - 3  # 1994-11-06 08:49:34 UTC
    assert kube.retry_after(value, now) == seconds
