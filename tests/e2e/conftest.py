"""Fixtures shared by the end-to-end modules."""
import pytest

from tests.testbed import scenario as sc


@pytest.fixture
def scenario(admin_api, plugin_kubeconfig, host_env, k8s_namespace):
    """Scenario 1 (net-a,other/net-b@data0) built on the real API server."""
    return sc.setup(admin_api, plugin_kubeconfig, host_env, k8s_namespace)
