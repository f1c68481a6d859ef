"""The real node tier (testbed/netattach_testbed/node.py): one single-node cluster per session,
started on first use; its tests install netattach on it as admins do."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from netattach_testbed import cluster as cl
from netattach_testbed import node as nd


@pytest.fixture(scope="session")
def real_node():
    """A running RealNode, Ready. Its workdir is removed at the end of the session unless
    NETATTACH_KEEP_NODE=1 (to read the components' logs afterwards)."""
    with cl.workdir("netattach-node-", "NETATTACH_KEEP_NODE", "real node") as workdir:
        try:
            node = nd.RealNode.start(workdir)
        except cl.TestbinMissing as e:
            pytest.fail(str(e), pytrace=False)
        with node:
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
