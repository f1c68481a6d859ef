"""The oldest Kubernetes of README's "Tested with" matrix: the minor still supported
upstream that is oldest (hack/testbin/k8s-oldest/go.mod), its kube-apiserver,
kube-controller-manager, kube-scheduler, kubelet and kubectl (one minor from the API
server at most: the version-skew policy's bound for kubectl, so not the main one's).

A focused subset runs here, the tests themselves being the main node's: netattach
installed in both modes with that kubectl's `apply -k`, a pod of scenario 1 Running with
its three networks and network-status, its deletion (every DEL done, every IP and state
file freed), the uninstall (every file of netattach gone); docs/dra.md's example
(resource.k8s.io/v1, the kubelet's DRA plugin API v1); deploy/policies/ accepted by its
API server. These items run after every other test of the real node
(tests/node/conftest.py: one node at a time on a machine).
"""
from __future__ import annotations

import pytest

from netattach_testbed import cluster as cl
from netattach_testbed import node as nd
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


def test_the_admission_policies_are_accepted_by_the_oldest_api_server(real_node):
    """deploy/policies/ (CEL in ValidatingAdmissionPolicies, compiled by the API server
    at admission of each policy: an expression of a newer CEL library than the server's
    would be refused) applied as an admin would, server-side dry run; what
    tests/e2e/test_policies.py applies to the newest API server."""
    objects = [o for o in nd.rendered(real_node, "deploy/policies/") if o]
    out = real_node.kubectl("apply", "-k", "deploy/policies/", "--dry-run=server").stdout
    assert out.count("(server dry run)") == len(objects) > 0, out
