"""The test control plane (etcd + kube-apiserver, see testbed/netattach_testbed/cluster.py) as fixtures.

One cluster per session, started on first use (so unit-only runs never start it),
with deploy/ applied as `kubectl apply -k deploy/` applies it (thin mode: the CRD,
the plugin's RBAC, the DaemonSet, which stays without pods: no controller-manager). Missing binaries fail the
test (never skip): run `make testbin`, or the tests through `make test`.
"""
from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from netattach_testbed import cluster as cl
from netattach_testbed.daemon import NODE_NAME


@pytest.fixture(scope="session")
def cluster():
    """A running testbed Cluster with deploy/ (thin mode) applied.

    Its workdir (certs, etcd data, logs) is a fresh temp dir, removed at the end of
    the session unless NETATTACH_KEEP_CLUSTER=1 (to read the logs afterwards).
    """
    try:
        cl.require_k8s_binaries()
    except cl.TestbinMissing as e:
        pytest.fail(str(e), pytrace=False)
    with cl.workdir("netattach-cluster-", "NETATTACH_KEEP_CLUSTER", "test cluster") as d, \
            cl.Cluster.start(d) as c:
        with c.admin_api() as api:
            cl.apply_documents(api, cl.kustomize(cl.DEPLOY_DIR))
        yield c


@pytest.fixture(scope="session")
def admin_api(cluster):
    """A kubernetes ApiClient with cluster-admin rights (system:masters client cert)."""
    with cluster.admin_api() as api:
        yield api


@pytest.fixture(scope="session")
def plugin_kubeconfig(cluster) -> Path:
    """Path of a kubeconfig holding only the kube-system/netattach ServiceAccount's
    bearer token (24 h, bound to a pod on the test bed's node "test-node", as the
    installer's projected token is bound to its pod) + CA + server: what the plugin
    gets on a node."""
    return cl.plugin_kubeconfig(cluster, node=NODE_NAME)


@pytest.fixture
def k8s_namespace(admin_api) -> str:
    """The name of a fresh namespace ("nat-<10 hex>"), deleted after the test.

    Without a controller-manager nothing empties a deleted namespace, so teardown
    deletes its pods and NetworkAttachmentDefinitions, then finalizes it itself.
    """
    core = k8s.CoreV1Api(admin_api)
    name = f"nat-{uuid.uuid4().hex[:10]}"
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        _delete_namespace(admin_api, name)


def _delete_namespace(api: k8s.ApiClient, name: str, timeout: float = 60.0) -> None:
    """Delete namespace `name` and wait until it is gone; `timeout` is a hang guard."""
    core = k8s.CoreV1Api(api)
    core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    k8s.CustomObjectsApi(api).delete_collection_namespaced_custom_object(
        cl.NAD_GROUP, cl.NAD_VERSION, name, cl.NAD_PLURAL)
    core.delete_namespace(name)
    # What the namespace controller does once the namespace is empty.
    core.replace_namespace_finalize(name, k8s.V1Namespace(
        metadata=k8s.V1ObjectMeta(name=name), spec=k8s.V1NamespaceSpec(finalizers=[])))
    deadline = time.monotonic() + timeout
    while True:
        try:
            core.read_namespace(name)
        except ApiException as e:
            if e.status == 404:
                return
            raise
        if time.monotonic() > deadline:
            raise AssertionError(f"namespace {name} still exists {timeout:.0f}s after deletion")
        time.sleep(0.1)


@pytest.fixture(scope="session")
def daemon_kubeconfig(cluster, admin_api) -> Path:
    """A kubeconfig of the thick-mode daemon's ServiceAccount, kube-system/netattach-daemon,
    with deploy/thick/rbac.yaml applied (list and watch pods and NADs, which the thin
    plugin's ServiceAccount may not); its token is bound to a pod on "test-node", as
    the DaemonSet pod's projected token is bound to its pod."""
    cl.apply_manifests(admin_api, [cl.THICK_DIR / "rbac.yaml"])
    return cl.plugin_kubeconfig(cluster, sa="netattach-daemon", node=NODE_NAME)
