"""What a real runtime sends after a DEL (issue 9, defect 12): containerd re-runs its stop
path at RemovePodSandbox and DELs the sandbox again, with an empty CNI_NETNS and no
prevResult, after the first DEL succeeded; and it DELs a sandbox whose ADD failed.

netattach keeps a tombstone for a container whose last DEL completed (and writes one
when a failed ADD undid everything), so that such a DEL succeeds at once, quietly
(nothing above INFO in the log), with no child run and no API request: whether the API
server is up, the pod deleted, or the API server down. Real plugins, real netns, the
real kube-apiserver, the built executable.
"""
from __future__ import annotations

import re

import pytest
from kubernetes import client as k8s

from tests.testbed import faults
from tests.testbed import scenario as sc


def quiet_and_free(s: sc.Scenario, run: sc.PluginRun, since: int) -> None:
    """The DEL succeeded at once: no child, no API request, nothing logged above INFO."""
    log = s.log_text()[since:]
    assert run.code == 0 and run.stdout == "", run.stdout + log
    timing = re.findall(r"timing: DEL took [0-9.]+ s, children ([0-9.]+) s, api_requests (\d+)",
                        log)
    assert timing == [("0.0000", "0")], log
    assert not re.search(r" (WARNING|ERROR) ", log), log
    sc.assert_clean(s)


@pytest.mark.parametrize("api", ["up", "pod deleted", "down"])
def test_the_runtimes_second_del_succeeds_at_once(scenario, admin_api, cluster, api):
    s = scenario
    assert s.run("ADD").code == 0, s.log_text()
    first = s.run("DEL")
    assert first.code == 0, first.stdout + s.log_text()
    sc.assert_clean(s)
    if api == "pod deleted":
        k8s.CoreV1Api(admin_api).delete_namespaced_pod(s.pod_name, s.namespace,
                                                       grace_period_seconds=0)
    since = len(s.log_text())
    if api == "down":
        with faults.apiserver_frozen(cluster):
            run = s.run("DEL", env_overrides={"CNI_NETNS": ""})
    else:
        run = s.run("DEL", env_overrides={"CNI_NETNS": ""})
    quiet_and_free(s, run, since)


def test_the_cleanup_del_after_a_failed_add_is_quiet(admin_api, plugin_kubeconfig, host_env,
                                                      k8s_namespace, cluster):
    """A pod selecting a missing NAD: the ADD fails naming it and undoes the default
    network; the runtime's cleanup DEL then has nothing to do, even with the API down."""
    s = sc.setup(admin_api, plugin_kubeconfig, host_env, k8s_namespace,
                 networks="net-a,missing-net")
    add = s.run("ADD")
    assert add.code == 1 and add.doc["code"] == 7 and "missing-net" in add.doc["msg"], add.stdout
    since = len(s.log_text())
    with faults.apiserver_frozen(cluster):
        run = s.run("DEL")
    quiet_and_free(s, run, since)
