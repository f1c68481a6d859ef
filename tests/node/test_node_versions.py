"""The oldest Kubernetes of README's "Tested with" matrix: the minor still supported
upstream that is oldest (hack/testbin/k8s-oldest/go.mod), its kube-apiserver,
kube-controller-manager, kube-scheduler, kubelet and kubectl (one minor from the API
server at most: the version-skew policy's bound for kubectl, so not the main one's).

A focused subset runs here, the tests themselves being the main node's: netattach
installed in both modes with that kubectl's `apply -k`, a pod of scenario 1 Running with
its three networks and network-status, its deletion (every DEL done, every IP and state
file freed), the uninstall (every file of netattach gone); and docs/dra.md's example
(resource.k8s.io/v1, the kubelet's DRA plugin API v1). These items run after every other
test of the real node (tests/node/conftest.py: one node at a time on a machine).
"""
from __future__ import annotations

import pytest

from netattach_testbed import cluster as cl
from tests.node import test_node_dra as dra
from tests.node import test_node_install as install
from tests.node.conftest import OLDEST

OLDEST_VERSION = cl.gomod_version(cl.K8S_OLDEST_GOMOD, "k8s.io/kubernetes")

pytestmark = pytest.mark.parametrize(
    "real_node", [pytest.param(OLDEST, id=f"k8s-{OLDEST_VERSION}")], indirect=True)


# first: it installs netattach itself, so it runs before `installed` has (the pytest
# order of a module's tests without a module-scoped parameter)
def test_the_docs_dra_example_on_the_oldest_kubernetes(real_node, node_image, host_env,
                                                       tmp_path):
    dra.test_the_docs_dra_example_runs_as_written(real_node, node_image, host_env, tmp_path)


def test_scenario_pod_on_the_oldest_kubernetes(real_node, installed, node_scenario):
    install.test_scenario_pod_gets_three_interfaces_and_delete_frees_everything(
        real_node, installed, node_scenario)
