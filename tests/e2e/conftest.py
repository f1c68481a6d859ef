"""Fixtures shared by the end-to-end modules."""
import pytest

from tests.testbed import scenario as sc
from tests.testbed.artifact import required_artifact


@pytest.fixture(scope="session", autouse=True)
def built_artifact():
    """Every e2e test execs the built artifact ($NETATTACH_EXE, `make build`), and only
    a current one: fails the session's e2e tests otherwise, so no one tests an old
    binary or the virtualenv's script by accident."""
    try:
        return required_artifact("e2e tests")
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture
def scenario(admin_api, plugin_kubeconfig, host_env, k8s_namespace):
    """Scenario 1 (net-a,other/net-b@data0) built on the real API server."""
    return sc.setup(admin_api, plugin_kubeconfig, host_env, k8s_namespace)
