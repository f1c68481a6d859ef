"""The real node tier (testbed/netattach_testbed/node.py): one single-node cluster per session,
started on first use; its tests install netattach on it as admins do.

The node runs the main tools module's Kubernetes (hack/testbin/k8s); the tests of
test_node_versions.py parametrize `real_node` with OLDEST to run on the oldest minor
still supported upstream (hack/testbin/k8s-oldest; README, "Tested with"). Only one real
node runs on a machine at a time (its addresses are fixed: node.py's NODE_LOCK), and
pytest stops a session fixture's value when a test asks for another parameter of it;
so those items run after every other test of the node: the main node is stopped once,
then the oldest is started once.
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from netattach_testbed import cluster as cl
from netattach_testbed import node as nd

# The Kubernetes the node runs: the main tools module's (hack/testbin/k8s), which every
# test gets without asking, and with the parameter OLDEST the oldest minor still supported
# upstream (hack/testbin/k8s-oldest): README's "Tested with" matrix.
OLDEST = "oldest"
K8S = {None: (cl.k8s_bin_dir, cl.K8S_GOMOD), OLDEST: (cl.k8s_oldest_bin_dir, cl.K8S_OLDEST_GOMOD)}


def _on_oldest(item) -> bool:
    callspec = getattr(item, "callspec", None)
    return callspec is not None and callspec.params.get("real_node") == OLDEST


@pytest.hookimpl(trylast=True)  # after pytest's own grouping by fixture parameters
def pytest_collection_modifyitems(items):
    """The items on the oldest Kubernetes right after the last other item that uses the
    real node: one node at a time, each started once."""
    oldest = [i for i in items if _on_oldest(i)]
    if not oldest:
        return
    rest = [i for i in items if not _on_oldest(i)]
    last = max((n for n, i in enumerate(rest) if "real_node" in i.fixturenames), default=-1)
    items[:] = rest[:last + 1] + oldest + rest[last + 1:]


@pytest.fixture(scope="session")
def real_node(request):
    """A running RealNode, Ready: on the main Kubernetes, or on the oldest where a test
    parametrizes it with OLDEST (tests/node/test_node_versions.py). Its kube-apiserver,
    kubelet and kubectl report the version their tools module pins. Its workdir is
    removed at the end of the session unless NETATTACH_KEEP_NODE=1 (to read the
    components' logs afterwards)."""
    bin_dir, gomod = K8S[getattr(request, "param", None)]
    version = cl.gomod_version(gomod, "k8s.io/kubernetes")
    with cl.workdir("netattach-node-", "NETATTACH_KEEP_NODE", "real node") as workdir:
        try:
            node = nd.RealNode.start(workdir, k8s_bin=bin_dir())
        except cl.TestbinMissing as e:
            pytest.fail(str(e), pytrace=False)
        with node:
            running = node.versions()
            assert {k: running[k] for k in ("kube-apiserver", "kubelet", "kubectl")} == {
                "kube-apiserver": version, "kubelet": version, "kubectl": version}, running
            yield node


@pytest.fixture(scope="session")
def node_image(real_node) -> str:
    """netattach's image (`make image`, $NETATTACH_IMAGE) imported into the node's
    containerd under the reference deploy/ names; returns that reference."""
    try:
        archive = nd.image_archive()
    except cl.ClusterError as e:
        pytest.fail(str(e), pytrace=False)
    real_node.import_image(archive)
    return nd.image_ref()


@pytest.fixture(scope="module", params=["thin", "thick"])
def installed(request, real_node, node_image, tmp_path_factory):
    """netattach installed in the param's mode for the module's tests (thick: with
    hot-plug on), then uninstalled."""
    mode = request.param
    if mode == "thin":
        nd.install(real_node, mode)
    else:
        # as an admin turns hot-plug on: an overlay of deploy/thick/ adding the flag
        overlay = nd.admin_overlay(tmp_path_factory.mktemp("overlay"), "thick", patches=[
            nd.container_args_patch(real_node, "thick", "install", "--hotplug")])
        nd.install(real_node, mode, overlay)
    try:
        yield mode
    finally:
        nd.uninstall(real_node, mode)


@dataclass
class NodeScenario:
    """Scenario 1's NADs on the real node: `net-a` in `namespace` (macvlan on `master`),
    `net-b` in `other` (bridge `net_b_bridge`)."""
    namespace: str
    master: str
    net_b_bridge: str


@pytest.fixture
def node_scenario(real_node, host_env) -> NodeScenario:
    """A fresh namespace with scenario 1's NADs (the README's), on links `host_env` owns
    (the NAD CRD applied first); the namespace is deleted afterwards."""
    namespace = nd.unique_name("nat")
    master, bridge = host_env.master_link(), host_env.bridge_name()
    nd.apply_scenario(real_node, namespace, master, bridge)
    try:
        yield NodeScenario(namespace, master, bridge)
    finally:
        # not waited for: the tests delete their pods (each DEL checked) before this, and
        # the namespace controller takes seconds to empty a namespace of the rest
        real_node.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
