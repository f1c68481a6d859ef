"""The DaemonSet's job end to end: the built artifact runs `netattach install` with a
ServiceAccount volume holding a real token of kube-system/netattach (bound to a pod,
as kubelet's are); the runtime then execs what the installer put in the bin dir with
the conflist it wrote, and the pod gets its networks through the real API server
with nothing but deploy/base/rbac.yaml's permissions. When the token is revoked and
kubelet rotates it, the installer's new kubeconfig keeps the plugin working. Its stop,
with the DaemonSet there, leaves everything (uninstalls: test_uninstall_e2e.py).
"""
from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import uuid
from pathlib import Path

import yaml
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from netattach.install.kubeconfig import KUBECONFIG_SUBDIR
from netattach.install.primary import CONF_NAME
from netattach_testbed import cluster as cl
from netattach_testbed import scenario as sc
from netattach_testbed.scenario import netattach_command
from netattach_testbed.serviceaccount import wait_for, write_sa

SA_NS, SA_NAME = "kube-system", "netattach"


def _bound_token(api, pod_name: str) -> str:
    """A token of kube-system/netattach bound to pod `pod_name` (created here): valid
    until that pod is deleted, like the projected token kubelet mounts."""
    core = k8s.CoreV1Api(api)
    pod = core.create_namespaced_pod(SA_NS, {
        "metadata": {"name": pod_name},
        "spec": {"serviceAccountName": SA_NAME, "automountServiceAccountToken": False,
                 "containers": [{"name": "install", "image": "registry.invalid/netattach:0"}]}})
    req = k8s.AuthenticationV1TokenRequest(spec=k8s.V1TokenRequestSpec(
        audiences=[], expiration_seconds=3600, bound_object_ref=k8s.V1BoundObjectReference(
            api_version="v1", kind="Pod", name=pod_name, uid=pod.metadata.uid)))
    return core.create_namespaced_service_account_token(SA_NAME, SA_NS, req).status.token


def _delete_pod(api, name: str) -> None:
    try:
        k8s.CoreV1Api(api).delete_namespaced_pod(name, SA_NS, grace_period_seconds=0)
    except ApiException as e:
        if e.status != 404:
            raise


def _token_rejected(kubeconfig: Path) -> bool:
    """True once the API server answers 401 to the kubeconfig's credentials (it caches
    a token's successful authentication for a few seconds)."""
    with cl.api_client(kubeconfig) as api:
        try:
            k8s.CoreV1Api(api).read_namespaced_service_account(SA_NAME, SA_NS)
        except ApiException as e:
            return e.status == 401
    return False


def _kubeconfig_token(path: Path) -> str | None:
    if not path.exists():
        return None
    return yaml.safe_load(path.read_text())["users"][0]["user"]["token"]


def _runtime_netconf(conflist_path: Path) -> dict:
    """What a runtime passes on stdin for the conflist's one plugin: the plugin's
    config with the list's name and cniVersion injected (CNI SPEC.md, libcni)."""
    conflist = json.loads(conflist_path.read_text())
    [plugin] = conflist["plugins"]
    return {**plugin, "name": conflist["name"], "cniVersion": conflist["cniVersion"]}


def test_installer_configures_the_node_and_follows_token_rotation(
        cluster, admin_api, plugin_kubeconfig, host_env, k8s_namespace, tmp_path):
    s = sc.setup(admin_api, plugin_kubeconfig, host_env, k8s_namespace)
    host_bin = host_env.root / "host-bin"
    sa_dir = tmp_path / "serviceaccount"
    holders = [f"netattach-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    write_sa(sa_dir, _bound_token(admin_api, holders[0]), 1, ca=cluster.ca_file.read_bytes())
    log = tmp_path / "installer.log"
    kubeconfig = host_env.conf_dir / KUBECONFIG_SUBDIR / "netattach.kubeconfig"
    conflist = host_env.conf_dir / CONF_NAME
    argv = [netattach_command(), "install", f"--bin-dir={host_bin}",
            f"--conf-dir={host_env.conf_dir}", f"--host-conf-dir={host_env.conf_dir}",
            f"--host-bin-dir={host_bin}", f"--cni-dir={host_env.state_dir}",
            f"--state-dir={host_env.state_dir}",
            f"--service-account-dir={sa_dir}", f"--api-server={cluster.server}",
            "--poll-interval=0.1", "--log-level=debug", f"--run-dir={tmp_path / 'run'}",
            f"--log-file={host_env.log_dir / 'netattach.log'}"]
    host_bin.mkdir()
    with log.open("wb") as log_out:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log_out)
        try:
            wait_for(lambda: conflist.exists() and (host_bin / "netattach").exists(),
                     "00-netattach.conflist and the installed binary", timeout=30)
            check = subprocess.run(argv + ["--check"], capture_output=True, text=True)
            assert check.returncode == 0, check.stderr

            # The runtime execs the installed copy with the installer's conflist.
            netconf = _runtime_netconf(conflist)
            assert netconf["clusterNetwork"] == str(host_env.conf_dir / "10-cluster.conf")
            assert netconf["kubeconfig"] == str(kubeconfig)
            installed = dataclasses.replace(s, bin_dir=host_bin, netconf=netconf)
            run = installed.run("ADD")
            assert run.code == 0, run.stdout + run.stderr + s.log_text()
            status = json.loads(sc.read_pod_annotations(admin_api, s.namespace, s.pod_name)[sc.STATUS])
            assert [e["interface"] for e in status] == ["eth0", "net1", "data0"]
            run = installed.run("DEL")
            assert run.code == 0, run.stdout + run.stderr + s.log_text()

            # Revoke the token (its pod is gone): the plugin is refused...
            _delete_pod(admin_api, holders[0])
            wait_for(lambda: _token_rejected(kubeconfig), "the revoked token to be refused",
                     timeout=60)
            second = dataclasses.replace(installed, container_id=uuid.uuid4().hex,
                                         netns=host_env.new_netns())
            run = second.run("ADD")
            assert run.code == 1 and "401" in run.doc["msg"] + run.doc.get("details", ""), run.stdout
            # ...until kubelet rotates it and the installer rewrites the kubeconfig.
            token = _bound_token(admin_api, holders[1])
            write_sa(sa_dir, token, 2, ca=cluster.ca_file.read_bytes())
            wait_for(lambda: _kubeconfig_token(kubeconfig) == token, "the rotated kubeconfig")
            run = second.run("ADD")
            assert run.code == 0, run.stdout + run.stderr + s.log_text()
            run = second.run("DEL")
            assert run.code == 0, run.stdout + run.stderr + s.log_text()
        finally:
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=30)
            for name in holders[1:]:
                _delete_pod(admin_api, name)
    assert proc.returncode == 0, log.read_text()
    assert out == b""                              # nothing ever on stdout
    # The test bed applies deploy/ (DaemonSet kube-system/netattach included, without a
    # controller to run it): the stop is a restart (install/uninstall.py), read with
    # deploy/base/rbac.yaml's Role, and everything stays for the next installer pod.
    assert ("netattach stays installed on this node: DaemonSet kube-system/netattach is "
            "there") in log.read_text()
    assert conflist.exists() and (host_bin / "netattach").exists() and kubeconfig.exists()
    assert token not in log.read_text()            # tokens are never logged
