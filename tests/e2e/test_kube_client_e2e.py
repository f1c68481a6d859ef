"""netattach.kube.client against the real kube-apiserver: both authentications (ServiceAccount
token, client certificate), both CA forms (embedded data, file), and the error paths a
node meets: a rejected token (401), RBAC refusal (403), a closed port and a server
that never answers (status 0 within the timeout). The token never reaches a log."""
from __future__ import annotations

import base64
import json
import logging
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from netattach.kube import client as kube_mod
from netattach.kube.client import Kube, KubeError
from netattach_testbed import cluster as cl
from netattach_testbed import scenario as sc

pytestmark = pytest.mark.e2e

NAD_CONFIG = {"cniVersion": "1.0.0", "name": "blue", "type": "bridge", "bridge": "natk0"}
# The client's time budget where a test is about what is sent and answered, not about the
# budget: a hang guard, so a loaded machine (a slow TLS handshake, an API server busy
# with other tests) makes a test slower, never failed (issue 9, defect 11). The tests of
# the budget itself (a silent server) set their own.
BUDGET = 60.0


@pytest.fixture
def pod_and_nad(admin_api, k8s_namespace) -> str:
    """Pod `web` and NAD `blue` in a fresh namespace; returns the namespace."""
    sc.create_pod(admin_api, sc.pod(k8s_namespace, "web", None))
    sc.apply_nad(admin_api, sc.nad(k8s_namespace, "blue", NAD_CONFIG))
    return k8s_namespace


def token_of(kubeconfig: Path) -> str:
    import yaml
    return yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]


def closed_port() -> int:
    """A loopback port that refuses connections (bound once, then released)."""
    return cl.free_port()


# ---------------------------------------------------------------- the happy paths

def test_token_and_ca_data_get_pod_nad_and_patch_status(plugin_kubeconfig, pod_and_nad, admin_api):
    """The plugin's own kubeconfig (SA token + embedded CA): what ADD does, counted."""
    ns = pod_and_nad
    k = Kube(str(plugin_kubeconfig), timeout=BUDGET)
    before = kube_mod.requests_made()

    pod = k.get_pod(ns, "web")
    assert pod["metadata"]["name"] == "web" and pod["kind"] == "Pod"
    assert k.get_pod(ns, "absent") is None
    nad = k.get_nad(ns, "blue")
    assert json.loads(nad["spec"]["config"]) == NAD_CONFIG
    assert k.get_nad(ns, "absent") is None

    k.patch_pod_annotations(ns, "web", {"example.com/a": "1"})
    k.patch_pod_annotations(ns, "web", {"example.com/b": "2"})  # a merge: a stays
    annotations = sc.read_pod_annotations(admin_api, ns, "web")
    assert annotations["example.com/a"] == "1" and annotations["example.com/b"] == "2"

    assert kube_mod.requests_made() - before == 6


def test_raw_request_returns_status_and_bytes(plugin_kubeconfig):
    k = Kube(str(plugin_kubeconfig), timeout=BUDGET)
    status, data = k.request("GET", "/version")
    assert status == 200 and isinstance(data, bytes)
    assert json.loads(data)["gitVersion"].startswith("v1.")
    status, data = k.request("GET", "/api/v1/namespaces/default/secrets/none")
    assert status == 403 and json.loads(data)["reason"] == "Forbidden"


@pytest.mark.parametrize("embedded", [False, True], ids=["cert-files+ca-file", "cert-data+ca-data"])
def test_client_certificate_auth(cluster, pod_and_nad, tmp_path, embedded):
    """A client-certificate kubeconfig (the admin's), as files or as *-data."""
    crt, key = cluster.pki["admin.crt"], cluster.pki["admin.key"]
    if embedded:
        user = {"client-certificate-data": base64.b64encode(crt.read_bytes()).decode(),
                "client-key-data": base64.b64encode(key.read_bytes()).decode()}
        path = cl.write_kubeconfig(tmp_path / "kc", cluster.server, user=user,
                                   ca_data=cluster.ca_file.read_bytes())
    else:
        user = {"client-certificate": str(crt), "client-key": str(key)}
        path = cl.write_kubeconfig(tmp_path / "kc", cluster.server, user=user,
                                   ca_file=cluster.ca_file)
    assert Kube(str(path), timeout=BUDGET).get_pod(pod_and_nad, "web")["metadata"]["name"] == "web"


PROBE = """
import sys
from netattach.kube.client import Kube
k = Kube({kubeconfig!r}, {budget})
assert "lightkube" not in sys.modules and "httpx2" not in sys.modules
assert k.get_pod({namespace!r}, "web") is not None
print(sorted({{m.split(".")[0] for m in sys.modules}} & {{"lightkube", "httpx2", "kubernetes",
                                                          "http", "ssl"}}))
"""


def api_modules(kubeconfig, namespace) -> list[str]:
    """Which of lightkube, httpx2, kubernetes, http, ssl a first get_pod imported."""
    code = PROBE.format(kubeconfig=str(kubeconfig), budget=BUDGET, namespace=namespace)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.replace("'", '"'))


def test_installer_kubeconfig_goes_through_the_standard_library(plugin_kubeconfig, pod_and_nad,
                                                                tmp_path, cluster):
    """Issue 11: the kubeconfig `netattach install` writes (token + CA file, JSON) and the
    test bed's (token + CA data, YAML) are served by ssl and kube/http11.py (transport.py);
    no API library is imported, not http.client (issue 23), never the `kubernetes` client."""
    assert api_modules(plugin_kubeconfig, pod_and_nad) == ["ssl"]
    token = yaml.safe_load(plugin_kubeconfig.read_text())["users"][0]["user"]["token"]
    installed = tmp_path / "installed.kubeconfig"
    installed.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "n",
        "clusters": [{"name": "local", "cluster": {"server": cluster.server,
                                                   "certificate-authority": str(cluster.ca_file)}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "n", "context": {"cluster": "local", "user": "u"}}]}))
    assert api_modules(installed, pod_and_nad) == ["ssl"]


def test_other_kubeconfigs_go_through_lightkube(cluster, pod_and_nad, tmp_path):
    """A kubeconfig the standard-library transport does not read (here an embedded
    client certificate) is served by lightkube, as before: nothing that worked stops."""
    crt, key = cluster.pki["admin.crt"], cluster.pki["admin.key"]
    path = cl.write_kubeconfig(tmp_path / "kc", cluster.server, user={
        "client-certificate-data": base64.b64encode(crt.read_bytes()).decode(),
        "client-key-data": base64.b64encode(key.read_bytes()).decode()},
        ca_file=cluster.ca_file)
    assert api_modules(path, pod_and_nad) == ["http", "httpx2", "lightkube", "ssl"]


# ---------------------------------------------------------------- errors

def test_rejected_token_is_401_with_the_fix(cluster, pod_and_nad, tmp_path, caplog):
    bad = "not-a-token-" + "x" * 20
    path = cl.write_kubeconfig(tmp_path / "kc", cluster.server, user={"token": bad},
                               ca_data=cluster.ca_file.read_bytes())
    k = Kube(str(path), timeout=BUDGET)
    before = kube_mod.requests_made()
    with caplog.at_level(logging.DEBUG):
        for call in (lambda: k.get_pod(pod_and_nad, "web"), lambda: k.get_nad(pod_and_nad, "blue"),
                     lambda: k.patch_pod_annotations(pod_and_nad, "web", {"a": "b"})):
            with pytest.raises(KubeError) as e:
                call()
            assert e.value.status == 401 and not e.value.unreachable
            assert "HTTP 401" in str(e.value)
            assert "were rejected" in str(e.value) and str(path) in str(e.value)
            assert "fresh token" in str(e.value)
            assert bad not in str(e.value)
    assert kube_mod.requests_made() - before == 3  # no retry of ours, none by the transport
    assert bad not in caplog.text


def test_rbac_refusal_is_403_with_the_fix(cluster, pod_and_nad, tmp_path):
    """A ServiceAccount without the netattach ClusterRole binding."""
    path = cl.plugin_kubeconfig(cluster, namespace=pod_and_nad, sa="unbound",
                                path=tmp_path / "unbound.kubeconfig", expiration_seconds=600)
    k = Kube(str(path), timeout=BUDGET)
    for call in (lambda: k.get_pod(pod_and_nad, "web"), lambda: k.get_nad(pod_and_nad, "blue"),
                 lambda: k.patch_pod_annotations(pod_and_nad, "web", {"a": "b"})):
        with pytest.raises(KubeError) as e:
            call()
        assert e.value.status == 403
        assert "RBAC forbids it" in str(e.value) and "deploy/base/rbac.yaml" in str(e.value)
        assert f"system:serviceaccount:{pod_and_nad}:unbound" in str(e.value)


def test_plugin_token_patches_status_but_not_the_pod(plugin_kubeconfig, pod_and_nad):
    """deploy/base/rbac.yaml grants patch on pods/status only: a raw PATCH of the pod is 403."""
    k = Kube(str(plugin_kubeconfig), timeout=BUDGET)
    status, _ = k.request("PATCH", f"/api/v1/namespaces/{pod_and_nad}/pods/web",
                          body={"metadata": {"annotations": {"a": "b"}}},
                          content_type="application/merge-patch+json")
    assert status == 403


def test_closed_port_is_unreachable_at_once(cluster, tmp_path):
    port = closed_port()
    path = cl.write_kubeconfig(tmp_path / "kc", f"https://127.0.0.1:{port}",
                               user={"token": "t"}, ca_data=cluster.ca_file.read_bytes())
    k = Kube(str(path), timeout=3.0)
    before = kube_mod.requests_made()
    with pytest.raises(KubeError) as e:
        k.get_pod("default", "web")
    # at once: refused, not waited out (the message would say "too slow" then)
    assert e.value.status == 0 and e.value.unreachable
    assert f"127.0.0.1:{port}" in str(e.value) and "unreachable" in str(e.value)
    assert "too slow" not in str(e.value)
    assert kube_mod.requests_made() - before == 1


def test_silent_server_times_out_within_the_bound(cluster, tmp_path):
    """A listener that accepts TCP but never speaks TLS: status 0 after ~timeout."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        path = cl.write_kubeconfig(tmp_path / "kc", f"https://127.0.0.1:{port}",
                                   user={"token": "t"}, ca_data=cluster.ca_file.read_bytes())
        k = Kube(str(path), timeout=1.0)
        start = time.monotonic()
        with pytest.raises(KubeError) as e:
            k.get_nad("default", "blue")
        elapsed = time.monotonic() - start
    assert e.value.status == 0 and e.value.unreachable
    # given up at the deadline (the message says so), not before it; how much later the
    # test sees it depends on the machine's load, which is no property of netattach
    assert "did not answer within 1 s" in str(e.value)
    assert elapsed >= 1.0, elapsed


def test_stopped_apiserver_is_unreachable_then_recovers(cluster, plugin_kubeconfig, pod_and_nad):
    k = Kube(str(plugin_kubeconfig), timeout=BUDGET)
    assert k.get_pod(pod_and_nad, "web") is not None
    cluster.stop_apiserver()
    try:
        with pytest.raises(KubeError) as e:
            k.get_pod(pod_and_nad, "web")
        assert e.value.unreachable
    finally:
        cluster.start_apiserver()
    assert k.get_pod(pod_and_nad, "web") is not None


def test_untrusted_ca_is_refused(cluster, plugin_kubeconfig, tmp_path):
    """The server's certificate is checked against the kubeconfig's CA only."""
    token = token_of(plugin_kubeconfig)
    other_ca = cl.make_pki(tmp_path / "other-pki")["ca.crt"]
    path = cl.write_kubeconfig(tmp_path / "kc", cluster.server, user={"token": token},
                               ca_file=other_ca)
    with pytest.raises(KubeError) as e:
        Kube(str(path), timeout=BUDGET).get_pod("default", "web")
    assert e.value.status == 0 and token not in str(e.value)


def test_token_never_logged(plugin_kubeconfig, pod_and_nad, caplog):
    """Every logger at DEBUG (ours, the transport's): no trace of the bearer token."""
    token = token_of(plugin_kubeconfig)
    k = Kube(str(plugin_kubeconfig), timeout=BUDGET)
    with caplog.at_level(logging.DEBUG):
        k.get_pod(pod_and_nad, "web")
        k.get_nad(pod_and_nad, "absent")
        k.patch_pod_annotations(pod_and_nad, "web", {"example.com/c": "3"})
    assert "GET /api/v1/namespaces" in caplog.text  # the debug log did run
    assert token not in caplog.text
    assert token[-20:] not in caplog.text
