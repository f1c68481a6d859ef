"""The test control plane itself, and deploy/ against it: the CRD serves NADs, and
the plugin's ServiceAccount can do exactly what the plugin does, nothing more."""
from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from netattach_testbed import cluster as cl

pytestmark = pytest.mark.e2e

NETWORK_STATUS = "k8s.v1.cni.cncf.io/network-status"
PLUGIN_USER = "system:serviceaccount:kube-system:netattach"
CONFIG = json.dumps({"cniVersion": "1.1.0", "name": "blue", "type": "bridge", "bridge": "natb0"})


@pytest.fixture
def plugin_api(plugin_kubeconfig):
    """An ApiClient authenticated only by the plugin ServiceAccount's token."""
    with cl.api_client(plugin_kubeconfig) as api:
        yield api


def make_pod(api: k8s.ApiClient, namespace: str, name: str = "web",
             annotations: dict | None = None) -> k8s.V1Pod:
    """A Pod object (never scheduled: there is no scheduler or kubelet)."""
    return k8s.CoreV1Api(api).create_namespaced_pod(namespace, k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name=name, annotations=annotations),
        spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="app", image="registry.invalid/app:1")])))


def nad_body(name: str, config: str = CONFIG, **extra_spec) -> dict:
    return {"apiVersion": f"{cl.NAD_GROUP}/{cl.NAD_VERSION}", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": name}, "spec": {"config": config, **extra_spec}}


def make_nad(api: k8s.ApiClient, namespace: str, name: str = "blue", **extra_spec) -> dict:
    return k8s.CustomObjectsApi(api).create_namespaced_custom_object(
        cl.NAD_GROUP, cl.NAD_VERSION, namespace, cl.NAD_PLURAL, nad_body(name, **extra_spec))


def assert_forbidden(excinfo: pytest.ExceptionInfo) -> None:
    """The API server's own RBAC refusal, naming the plugin's ServiceAccount."""
    e = excinfo.value
    assert e.status == 403, (e.status, e.body)
    body = json.loads(e.body)
    assert body["reason"] == "Forbidden"
    assert PLUGIN_USER in body["message"]


# ---------------------------------------------------------------- deploy/ as admin

def test_crd_established_with_multus_names(admin_api):
    crd = k8s.ApiextensionsV1Api(admin_api).read_custom_resource_definition(
        "network-attachment-definitions.k8s.cni.cncf.io")
    assert crd.spec.group == "k8s.cni.cncf.io" and crd.spec.scope == "Namespaced"
    n = crd.spec.names
    assert (n.kind, n.plural, n.singular, n.short_names) == (
        "NetworkAttachmentDefinition", "network-attachment-definitions",
        "network-attachment-definition", ["net-attach-def"])
    assert [(v.name, v.served, v.storage) for v in crd.spec.versions] == [("v1", True, True)]
    assert {c.type: c.status for c in crd.status.conditions}["Established"] == "True"


def test_nad_create_and_read_back(admin_api, k8s_namespace):
    make_nad(admin_api, k8s_namespace, "blue", vlan=7)
    got = k8s.CustomObjectsApi(admin_api).get_namespaced_custom_object(
        cl.NAD_GROUP, cl.NAD_VERSION, k8s_namespace, cl.NAD_PLURAL, "blue")
    assert got["kind"] == "NetworkAttachmentDefinition"
    assert json.loads(got["spec"]["config"]) == json.loads(CONFIG)
    # Like Multus's CRD, nothing but `config` survives under spec.
    assert got["spec"] == {"config": CONFIG}


def test_nad_without_config_is_valid(admin_api, k8s_namespace):
    """spec.config is optional (the plugin then looks for an on-disk config by name)."""
    body = nad_body("disk-only")
    del body["spec"]["config"]
    k8s.CustomObjectsApi(admin_api).create_namespaced_custom_object(
        cl.NAD_GROUP, cl.NAD_VERSION, k8s_namespace, cl.NAD_PLURAL, body)


def test_nad_config_must_be_a_string(admin_api, k8s_namespace):
    with pytest.raises(ApiException) as ei:
        k8s.CustomObjectsApi(admin_api).create_namespaced_custom_object(
            cl.NAD_GROUP, cl.NAD_VERSION, k8s_namespace, cl.NAD_PLURAL,
            nad_body("bad", config=json.loads(CONFIG)))
    assert ei.value.status == 422


def test_rbac_applied_as_written(admin_api):
    docs = {d["kind"]: d for d in cl.load_manifests([cl.BASE_DIR / "rbac.yaml"])}
    rbac = k8s.RbacAuthorizationV1Api(admin_api)
    role = rbac.read_cluster_role("netattach")
    assert [{"apiGroups": r.api_groups, "resources": r.resources, "verbs": r.verbs,
             **({"resourceNames": r.resource_names} if r.resource_names else {})}
            for r in role.rules] == docs["ClusterRole"]["rules"]
    binding = rbac.read_cluster_role_binding("netattach")
    assert binding.role_ref.name == "netattach"
    assert [(s.kind, s.namespace, s.name) for s in binding.subjects] == [
        ("ServiceAccount", "kube-system", "netattach")]
    k8s.CoreV1Api(admin_api).read_namespaced_service_account("netattach", "kube-system")


def test_apply_manifests_is_idempotent(admin_api):
    docs = cl.apply_documents(admin_api, cl.kustomize(cl.DEPLOY_DIR))
    assert {d["kind"] for d in docs} == {
        "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
        "Role", "RoleBinding", "DaemonSet"}


# ---------------------------------------------------------------- the plugin's identity

def test_plugin_kubeconfig_holds_only_the_token(plugin_kubeconfig, cluster):
    assert stat.S_IMODE(plugin_kubeconfig.stat().st_mode) == 0o600
    text = plugin_kubeconfig.read_text()
    doc = yaml.safe_load(text)
    assert [c["cluster"]["server"] for c in doc["clusters"]] == [cluster.server]
    assert set(doc["clusters"][0]["cluster"]) == {"server", "certificate-authority-data"}
    assert [set(u["user"]) for u in doc["users"]] == [{"token"}]
    for secret in ("admin.crt", "admin.key", "ca.key", "sa.key"):
        assert secret not in text
    admin_cert = cluster.pki["admin.crt"].read_text().splitlines()[1]
    assert admin_cert not in text


def test_plugin_token_is_the_service_account(plugin_api):
    review = k8s.AuthenticationV1Api(plugin_api).create_self_subject_review(
        k8s.V1SelfSubjectReview())
    assert review.status.user_info.username == PLUGIN_USER


def test_plugin_gets_pod(admin_api, plugin_api, k8s_namespace):
    created = make_pod(admin_api, k8s_namespace, annotations={
        "k8s.v1.cni.cncf.io/networks": "blue"})
    pod = k8s.CoreV1Api(plugin_api).read_namespaced_pod("web", k8s_namespace)
    assert pod.metadata.uid == created.metadata.uid
    assert pod.metadata.annotations["k8s.v1.cni.cncf.io/networks"] == "blue"


def test_plugin_merge_patches_network_status(admin_api, plugin_api, k8s_namespace):
    make_pod(admin_api, k8s_namespace, annotations={"k8s.v1.cni.cncf.io/networks": "blue"})
    status = json.dumps([{"name": f"{k8s_namespace}/blue", "interface": "net1",
                          "ips": ["10.1.0.2"], "mac": "02:00:00:00:00:01"}])
    k8s.CoreV1Api(plugin_api).patch_namespaced_pod_status(
        "web", k8s_namespace, {"metadata": {"annotations": {NETWORK_STATUS: status}}},
        _content_type="application/merge-patch+json")
    pod = k8s.CoreV1Api(admin_api).read_namespaced_pod("web", k8s_namespace)
    assert pod.metadata.annotations[NETWORK_STATUS] == status
    # A merge patch: the other annotations are untouched.
    assert pod.metadata.annotations["k8s.v1.cni.cncf.io/networks"] == "blue"


def test_plugin_gets_nad(admin_api, plugin_api, k8s_namespace):
    make_nad(admin_api, k8s_namespace, "blue")
    got = k8s.CustomObjectsApi(plugin_api).get_namespaced_custom_object(
        cl.NAD_GROUP, cl.NAD_VERSION, k8s_namespace, cl.NAD_PLURAL, "blue")
    assert got["spec"]["config"] == CONFIG


def test_plugin_cannot_list_pods(plugin_api):
    with pytest.raises(ApiException) as ei:
        k8s.CoreV1Api(plugin_api).list_pod_for_all_namespaces()
    assert_forbidden(ei)


def test_plugin_cannot_delete_pod(admin_api, plugin_api, k8s_namespace):
    make_pod(admin_api, k8s_namespace)
    with pytest.raises(ApiException) as ei:
        k8s.CoreV1Api(plugin_api).delete_namespaced_pod("web", k8s_namespace)
    assert_forbidden(ei)
    k8s.CoreV1Api(admin_api).read_namespaced_pod("web", k8s_namespace)


def test_plugin_cannot_patch_pod_itself(admin_api, plugin_api, k8s_namespace):
    make_pod(admin_api, k8s_namespace)
    with pytest.raises(ApiException) as ei:
        k8s.CoreV1Api(plugin_api).patch_namespaced_pod(
            "web", k8s_namespace, {"metadata": {"annotations": {NETWORK_STATUS: "[]"}}},
            _content_type="application/merge-patch+json")
    assert_forbidden(ei)
    pod = k8s.CoreV1Api(admin_api).read_namespaced_pod("web", k8s_namespace)
    assert NETWORK_STATUS not in (pod.metadata.annotations or {})


def test_plugin_cannot_create_nad(admin_api, plugin_api, k8s_namespace):
    with pytest.raises(ApiException) as ei:
        make_nad(plugin_api, k8s_namespace, "rogue")
    assert_forbidden(ei)
    with pytest.raises(ApiException) as ei:
        k8s.CustomObjectsApi(admin_api).get_namespaced_custom_object(
            cl.NAD_GROUP, cl.NAD_VERSION, k8s_namespace, cl.NAD_PLURAL, "rogue")
    assert ei.value.status == 404


# ---------------------------------------------------------------- restarts

def test_apiserver_restart_keeps_data(cluster, admin_api, plugin_api, k8s_namespace):
    pod = make_pod(admin_api, k8s_namespace)
    make_nad(admin_api, k8s_namespace, "blue")
    cluster.stop_apiserver()
    try:
        assert not cluster.apiserver_running
        with cl.api_client(cluster.admin_kubeconfig) as down:
            with pytest.raises(Exception) as ei:
                k8s.CoreV1Api(down).read_namespaced_pod("web", k8s_namespace,
                                                        _request_timeout=2)
            assert getattr(ei.value, "status", 0) in (0, None)  # no HTTP answer at all
    finally:
        if not cluster.apiserver_running:
            cluster.start_apiserver()
    # Same URL, same credentials, same etcd data.
    core = k8s.CoreV1Api(admin_api)
    assert core.read_namespaced_pod("web", k8s_namespace).metadata.uid == pod.metadata.uid
    got = k8s.CustomObjectsApi(admin_api).get_namespaced_custom_object(
        cl.NAD_GROUP, cl.NAD_VERSION, k8s_namespace, cl.NAD_PLURAL, "blue")
    assert got["spec"]["config"] == CONFIG
    # The plugin's token stays valid: the signing key is the same.
    assert k8s.CoreV1Api(plugin_api).read_namespaced_pod("web", k8s_namespace).metadata.uid \
        == pod.metadata.uid


# ---------------------------------------------------------------- failures of the test bed

def _processes_mentioning(text: str) -> list[int]:
    """PIDs whose command line contains `text`."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if text in (proc / "cmdline").read_bytes().decode(errors="replace"):
                    pids.append(int(proc.name))
            except OSError:
                continue
    return pids


def test_missing_binaries_say_make_testbin(tmp_path):
    with pytest.raises(cl.TestbinMissing, match="run `make testbin`") as ei:
        cl.require_k8s_binaries(tmp_path)
    assert "kube-apiserver" in str(ei.value) and "etcd" in str(ei.value)


def test_failed_start_reports_log_and_leaves_nothing_running(tmp_path):
    real_etcd = cl.require_k8s_binaries()[1]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "etcd").symlink_to(real_etcd)
    fake = bin_dir / "kube-apiserver"
    fake.write_text("#!/bin/sh\necho 'E0000 fake apiserver: cannot start' >&2\nexit 3\n")
    fake.chmod(0o755)
    workdir = tmp_path / "work"
    with pytest.raises(cl.ClusterError) as ei:
        # the default timeout (cl.READY_TIMEOUT): etcd must be ready before the fake
        # kube-apiserver is started, which takes longer on a loaded machine; the fake's
        # exit is seen at once whatever the timeout
        cl.Cluster.start(workdir, bin_dir=bin_dir)
    msg = str(ei.value)
    assert "kube-apiserver exited (code 3)" in msg and "fake apiserver: cannot start" in msg
    assert _processes_mentioning(str(workdir)) == []  # etcd was stopped too
