"""What a real runtime sends after a DEL (issue 9, defect 12): containerd re-runs its stop
path at RemovePodSandbox and DELs the sandbox again, with an empty CNI_NETNS and no
prevResult, after the first DEL succeeded; and it DELs a sandbox whose ADD failed.

netattach keeps a tombstone for a container whose last DEL completed (and writes one
when a failed ADD undid everything), so that such a DEL succeeds at once, quietly
(nothing above INFO in the log), with no child run and no API request: whether the API
server is up, the pod deleted, or the API server down. Real plugins, real netns, the
real kube-apiserver, the built executable, in both modes (the `mode` fixture,
tests/e2e/conftest.py): in thick mode the daemon serves these DELs, and its metrics
show that it ran no child and sent no API request for them.
"""
from __future__ import annotations

import re

import pytest
from kubernetes import client as k8s

from netattach_testbed import faults
from netattach_testbed import scenario as sc


def counters(s: sc.Scenario) -> tuple[float, ...]:
    """Thick mode: the daemon's DELs answered 0, seconds in children, API requests of
    its operations (live reads and queued writes); () in thin mode."""
    if s.daemon is None:
        return ()
    m = s.daemon.metric
    return (m("netattach_requests_total", command="DEL", code="0"),
            m("netattach_child_seconds_total"),
            m("netattach_api_requests_total", source="operation"))


def quiet_and_free(s: sc.Scenario, run: sc.PluginRun, since: int,
                   before: tuple[float, ...]) -> None:
    """The DEL succeeded at once: no child, no API request, nothing logged above INFO.
    `before`: counters(s) before it."""
    log = s.log_text()[since:]
    assert run.code == 0 and run.stdout == "", run.stdout + log
    if s.daemon is None:
        timing = re.findall(
            r"timing: DEL took [0-9.]+ s, children ([0-9.]+) s, api_requests (\d+)", log)
        assert timing == [("0.0000", "0")], log
    else:  # the daemon served it (no thin fallback), with no child and no API request
        assert re.findall(r"timing: DEL took [0-9.]+ s \(daemon\), result (\S+)", log) == ["0"]
        assert "api_requests" not in log, log
        dels, children, requests = before
        assert counters(s) == (dels + 1, children, requests)
    assert not re.search(r" (WARNING|ERROR) ", log), log
    sc.assert_clean(s)


@pytest.mark.parametrize("api", ["up", "pod deleted", "down"])
def test_the_runtimes_second_del_succeeds_at_once(make_scenario, admin_api, cluster, api):
    s = make_scenario()
    assert s.run("ADD").code == 0, s.log_text()
    sc.writes_sent(s)  # thick: network-status and events, sent after the answer
    first = s.run("DEL")
    assert first.code == 0, first.stdout + s.log_text()
    sc.assert_clean(s)
    if api == "pod deleted":
        k8s.CoreV1Api(admin_api).delete_namespaced_pod(s.pod_name, s.namespace,
                                                       grace_period_seconds=0)
    since, before = len(s.log_text()), counters(s)
    if api == "down":
        with faults.apiserver_frozen(cluster):
            run = s.run("DEL", env_overrides={"CNI_NETNS": ""})
    else:
        run = s.run("DEL", env_overrides={"CNI_NETNS": ""})
    quiet_and_free(s, run, since, before)


def test_the_cleanup_del_after_a_failed_add_is_quiet(make_scenario, cluster):
    """A pod selecting a missing NAD: the ADD fails naming it and undoes the default
    network; the runtime's cleanup DEL then has nothing to do, even with the API down."""
    s = make_scenario(networks="net-a,missing-net")
    add = s.run("ADD")
    assert add.code == 1 and add.doc["code"] == 7 and "missing-net" in add.doc["msg"], add.stdout
    sc.writes_sent(s)  # thick: the ADD's Warning event, sent after its answer
    since, before = len(s.log_text()), counters(s)
    with faults.apiserver_frozen(cluster):
        run = s.run("DEL")
    quiet_and_free(s, run, since, before)
