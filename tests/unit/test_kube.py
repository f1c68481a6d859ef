"""netattach.kube without an API server: kubeconfig errors, the lazy import, and what
goes on the wire (against a loopback HTTP stub that records each request)."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from netattach import kube
from netattach.kube import Kube, KubeError

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
    """Answers each request with the next (status, body) of `answers`; records requests."""

    daemon_threads = True

    def __init__(self, answers: list[tuple[int, dict]]):
        self.answers = list(answers)
        self.seen: list[dict] = []
        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.server.seen.append({"method": self.command, "path": self.path,
                                 "headers": dict(self.headers), "body": self.rfile.read(length)})
        status, doc = self.server.answers.pop(0)
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
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
        threading.Thread(target=s.serve_forever, daemon=True).start()
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
    code = ("import sys; from netattach.kube import Kube, requests_made; "
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
    k = Kube(str(kubeconfig(tmp_path / "kc", s.url + "/prefix")), 2.0)
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


def test_raw_request_passes_status_and_bytes(stub, tmp_path):
    s = stub((500, {"oops": 1}), (201, {"ok": True}))
    k = Kube(str(kubeconfig(tmp_path / "kc", s.url)), 2.0)
    assert k.request("GET", "/x") == (500, b'{"oops": 1}')
    status, data = k.request("POST", "/y", body=b"raw", content_type="text/plain")
    assert (status, json.loads(data)) == (201, {"ok": True})
    assert s.seen[1]["body"] == b"raw" and s.seen[1]["headers"]["Content-Type"] == "text/plain"


@pytest.mark.parametrize("code,phrase", [(401, "were rejected"), (403, "RBAC forbids it")])
def test_401_403_explained_without_retry(stub, tmp_path, code, phrase):
    s = stub(*[(code, status_doc(code, "the server says no"))] * 3)
    path = kubeconfig(tmp_path / "kc", s.url)
    k = Kube(str(path), 2.0)
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


def test_other_status_is_an_error_with_the_server_message(stub, tmp_path):
    s = stub((500, status_doc(500, "etcd is sad")))
    with pytest.raises(KubeError) as e:
        Kube(str(kubeconfig(tmp_path / "kc", s.url)), 2.0).get_pod("ns", "p")
    assert e.value.status == 500 and str(e.value) == "get pod ns/p: HTTP 500: etcd is sad"
