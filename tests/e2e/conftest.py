"""Fixtures shared by the end-to-end modules."""
from pathlib import Path

import pytest

from netattach_testbed import scenario as sc
from netattach_testbed.artifact import required_artifact
from netattach_testbed.daemon import NodeDaemon


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


@pytest.fixture(params=["thin", "thick"])
def mode(request) -> str:
    """The CNI mode a parametrized test runs in: "thin" (the runtime execs `netattach`)
    or "thick" (it execs `netattach-shim`, which asks `netattach daemon`)."""
    return request.param


@pytest.fixture
def make_scenario(admin_api, plugin_kubeconfig, daemon_kubeconfig, host_env, k8s_namespace,
                  mode):
    """make_scenario(**setup options) -> scenario 1 (scenario.setup) in the test's mode.
    In thick mode the first call starts the test's daemon (after the NADs exist, so its
    first LIST holds them); it is stopped at teardown. Later calls (more pods) share it.
    `daemon_kubeconfig_path=PATH` (thick, first call): the daemon's kubeconfig instead of its
    ServiceAccount's direct one (e.g. through testbed/netattach_testbed/apiproxy.py); `daemon_flags`
    (thick, first call): its flags instead of NodeDaemon's."""
    daemons: list[NodeDaemon] = []

    def make(daemon_kubeconfig_path: Path | None = None,
             daemon_flags: tuple[str, ...] | None = None, **kw) -> sc.Scenario:
        s = sc.setup(admin_api, plugin_kubeconfig, host_env, k8s_namespace, **kw)
        if mode == "thin":
            return s
        if not daemons:
            daemons.append(NodeDaemon.start(sc.netattach_command(), host_env,
                                            daemon_kubeconfig_path or daemon_kubeconfig,
                                            daemon_flags))
        return s.thick(daemons[0])

    try:
        yield make
    finally:
        for d in daemons:
            d.stop()
