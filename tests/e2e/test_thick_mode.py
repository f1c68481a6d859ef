"""Thick mode's own guarantees (issue 11), on the real API server, real plugins and a
real netns: the runtime execs `netattach-shim`, which asks the test's `netattach
daemon` (the built artifact, testbed/netattach_testbed/daemon.py).

* the daemon killed mid-ADD, or down during DEL: the shim runs the DEL in thin mode
  from the saved state, and everything is freed;
* the daemon restarted with a pod attached: nothing lost, CHECK passes;
* a NetworkAttachmentDefinition created after the daemon started, and one created after
  its watch was broken (API server stopped) and resumed, are served from the cache;
* the daemon SIGKILLed with the network-status PATCH of an ADD it answered still queued
  (the API server frozen): the state holds it as pending, and the restarted daemon
  sends it, unless the pod was re-created in between;
* a GC that releases a container drops the writes still queued for it;
* ADD and STATUS with no daemon; only root may call; health and metrics; the Grafana
  dashboard (deploy/grafana/netattach.json) reads only what the daemon exports, and
  docs/metrics.md lists exactly that.
No assertion is about time: every wait polls for its condition under a hang guard.
"""
from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from netattach import __version__
from netattach_testbed import dashboard, faults
from netattach_testbed import netns as tb
from netattach_testbed import scenario as sc
from tests.e2e.test_faults_children import del_twice, saved_state, with_fault_network

pytestmark = pytest.mark.e2e


@pytest.fixture
def mode() -> str:
    """Every test here is thick (conftest's make_scenario starts the daemon)."""
    return "thick"


def wait_cached(s: sc.Scenario, namespace: str, name: str) -> None:
    """Until the daemon's NAD watch delivered `namespace/name` (its debug line)."""
    line = f"cache NetworkAttachmentDefinition {namespace}/{name} ADDED"
    faults.wait_for(f"the daemon's watch to deliver {namespace}/{name}",
                    lambda: line in s.daemon.log_text(), timeout=120)


def thin_calls(s: sc.Scenario, command: str) -> int:
    """How many `command` calls thin mode (not the daemon) ran: its timing lines."""
    return sum(1 for line in s.log_text().splitlines()
               if f"timing: {command} took" in line and "(daemon)" not in line)


def late_nad(admin_api, s: sc.Scenario, name: str = "net-late") -> None:
    sc.apply_nad(admin_api, sc.nad(s.namespace, name, sc.bridge_conf(
        s.env.bridge_name(), "198.18.6.0/24", s.env.ipam_dir, name=name, version="1.0.0",
        gateway=False)))


def add_with_a_late_nad(admin_api, s: sc.Scenario) -> None:
    """Create NAD net-late, wait until the daemon's watch delivered it, ADD: it is read
    from the cache (no NetworkAttachmentDefinition cache miss)."""
    late_nad(admin_api, s)
    wait_cached(s, s.namespace, "net-late")
    misses = s.daemon.metric("netattach_cache_misses_total", kind="NetworkAttachmentDefinition")
    run = s.run("ADD")
    assert run.code == 0, run.stdout + s.log_text()
    assert sc.pod_links(s) == ["eth0", "lo", "net1", "net2"]
    assert s.daemon.metric("netattach_cache_misses_total",
                           kind="NetworkAttachmentDefinition") == misses


def test_daemon_killed_mid_add_then_del_without_it(admin_api, make_scenario):
    """The second network's child does its real work, then SIGKILLs its parent, the
    daemon: the shim answers code 11 (never a second ADD), and the runtime's DEL, with
    no daemon to answer, runs in thin mode from the state the daemon saved."""
    s = make_scenario(networks="net-fault,net-a")
    plugin = with_fault_network(admin_api, s, "kill-parent",
                                parent_exe=os.path.realpath(sc.netattach_command()))
    run = s.run("ADD")
    assert run.code == 1, run.stdout + s.log_text()
    assert run.doc["code"] == 11 and "ADD interrupted" in run.doc["msg"], run.doc
    assert f"pod {s.namespace}/{s.pod_name}" in run.doc["msg"]
    assert plugin.recorded_pids() == [s.daemon.pid]
    s.daemon.proc.wait(60)
    faults.wait_for("the killing plugin to exit",
                    lambda: not faults.alive(plugin.call_pids()[0]))
    assert sc.pod_links(s) == ["eth0", "lo", "net1"]
    assert [(a["ifname"], a["attempted"]) for a in saved_state(s)["attachments"]] == [
        ("eth0", True), ("net1", True), ("net2", False)]
    del_twice(s)
    assert thin_calls(s, "DEL") == 2
    assert plugin.invocations()[:2] == [("ADD", "net1"), ("DEL", "net1")]


def test_del_with_the_daemon_stopped(admin_api, make_scenario):
    s = make_scenario()
    assert s.run("ADD").code == 0, s.log_text()
    sc.network_status(admin_api, s.namespace, s.pod_name)
    assert len(s.env.ipam_allocations()) == 3
    s.daemon.stop()
    assert not os.path.exists(s.daemon.socket_dir / "netattach.sock")
    run = s.run("DEL")
    assert run.code == 0 and run.stdout == "", run.stdout + s.log_text()
    sc.assert_clean(s)
    assert thin_calls(s, "DEL") == 1


def test_daemon_restarted_with_a_pod_attached(admin_api, make_scenario):
    """Nothing of an attached pod lives only in the daemon: after a restart CHECK passes
    and DEL frees everything, through the new daemon."""
    s = make_scenario()
    assert s.run("ADD").code == 0, s.log_text()
    status = sc.network_status(admin_api, s.namespace, s.pod_name)
    s.daemon.restart()
    run = s.run("CHECK")
    assert run.code == 0 and run.stdout == "", run.stdout + s.log_text()
    assert sc.network_status(admin_api, s.namespace, s.pod_name) == status
    run = s.run("DEL")
    assert run.code == 0 and run.stdout == "", run.stdout + s.log_text()
    sc.assert_clean(s)
    assert thin_calls(s, "DEL") == thin_calls(s, "CHECK") == 0
    assert s.daemon.metric("netattach_requests_total", command="DEL", code="0") == 1


def test_nad_created_after_the_daemon_started(admin_api, make_scenario):
    """The watch delivers it; the next ADD reads it from the cache, not live."""
    s = make_scenario(networks="net-a,net-late")
    add_with_a_late_nad(admin_api, s)
    assert s.run("DEL").code == 0, s.log_text()
    sc.assert_clean(s)


def test_watch_broken_and_resumed(admin_api, cluster, make_scenario):
    """The API server stops: both watches break and the daemon keeps its caches; it
    starts again: the watches resume, and a NAD created then is served from the cache."""
    s = make_scenario(networks="net-a,net-late")
    cluster.stop_apiserver()
    try:
        faults.wait_for("both watches to break", lambda: all(
            s.daemon.metric("netattach_cache_watching", kind=k) == 0
            for k in ("Pod", "NetworkAttachmentDefinition")), timeout=120)
        assert s.daemon.endpoint("/healthz")[0] == 200
    finally:
        cluster.start_apiserver()
    faults.wait_for("both watches to resume", lambda: all(
        s.daemon.metric("netattach_cache_watching", kind=k) == 1
        for k in ("Pod", "NetworkAttachmentDefinition")), timeout=180)
    add_with_a_late_nad(admin_api, s)
    sc.network_status(admin_api, s.namespace, s.pod_name)
    assert s.run("DEL").code == 0, s.log_text()
    sc.assert_clean(s)


def add_with_the_writes_held(cluster, s: sc.Scenario) -> dict:
    """ADD with kube-apiserver SIGSTOPped: the daemon answers from its caches, and the
    PATCH it queued cannot be sent (its TLS handshake gets no answer). Returns the
    state's statusPending, saved before the answer. The server is still frozen after."""
    run = s.run("ADD")
    assert run.code == 0, run.stdout + s.log_text()
    assert sc.pod_links(s) == ["data0", "eth0", "lo", "net1"]
    pending = saved_state(s)["statusPending"]
    assert pending["uid"] == s.pod_uid and list(pending["annotations"]) == [sc.STATUS]
    return pending


def status_annotation(admin_api, s: sc.Scenario) -> str | None:
    return sc.read_pod_annotations(admin_api, s.namespace, s.pod_name).get(sc.STATUS)


def test_daemon_killed_with_the_status_patch_queued(admin_api, cluster, make_scenario):
    """The network-status survives the daemon: SIGKILLed after answering an ADD whose
    PATCH could not be sent yet, it sends it once restarted, exactly as recorded, and
    the state no longer holds it as pending."""
    s = make_scenario()
    with faults.apiserver_frozen(cluster):
        pending = add_with_the_writes_held(cluster, s)
        s.daemon.kill()
    assert status_annotation(admin_api, s) is None  # the killed daemon sent nothing
    s.daemon.launch()
    faults.wait_for("the restarted daemon to send the network-status", lambda: status_annotation(
        admin_api, s) == pending["annotations"][sc.STATUS], timeout=120)
    faults.wait_for("the state to record it sent", lambda: "statusPending" not in saved_state(s))
    status = json.loads(pending["annotations"][sc.STATUS])
    assert [e.get("interface") for e in status] == ["eth0", "net1", "data0"]
    assert [e["ips"] for e in status] == [
        tb.bare([ip["address"] for ip in a["result"]["ips"]])
        for a in saved_state(s)["attachments"]]
    assert "re-sending the network-status" in s.daemon.log_text()
    assert s.run("DEL").code == 0, s.log_text()
    sc.assert_clean(s)


def test_a_status_left_pending_is_not_sent_to_a_recreated_pod(admin_api, cluster,
                                                              make_scenario):
    """The pod deleted and created again under its name while the daemon was down: the
    restarted daemon drops the old sandbox's network-status instead of writing it onto
    the new pod."""
    from kubernetes.client import CoreV1Api
    s = make_scenario()
    with faults.apiserver_frozen(cluster):
        add_with_the_writes_held(cluster, s)
        s.daemon.kill()
    CoreV1Api(admin_api).delete_namespaced_pod(s.pod_name, s.namespace, grace_period_seconds=0)
    new_uid = sc.create_pod(admin_api, sc.pod(s.namespace, s.pod_name, "net-a"))
    assert new_uid != s.pod_uid
    s.daemon.launch()
    faults.wait_for("the daemon to drop the stale network-status",
                    lambda: "statusPending" not in saved_state(s), timeout=120)
    assert f"is dropped: the pod was re-created (UID {new_uid}" in s.daemon.log_text()
    assert status_annotation(admin_api, s) is None
    assert s.run("DEL").code == 0, s.log_text()
    sc.assert_clean(s)


def test_gc_drops_the_queued_writes_of_a_container_it_releases(admin_api, cluster,
                                                              make_scenario):
    """GC (the runtime no longer lists the sandbox) DELs the container while its PATCH
    and Events cannot be sent: they are dropped, as a runtime DEL drops them, and none
    is sent once the API server answers again, but for the first AddedInterface Event,
    queued while the ADD still ran and being sent at the GC: a DEL does not wait for an
    Event in flight (daemon/podapi.py), which the thawed API server may still take. The
    network-status PATCH in flight is waited for, and never lands."""
    s = make_scenario()
    gc = {**s.netconf, "cniVersion": "1.1.0", "cni.dev/valid-attachments": []}
    with faults.apiserver_frozen(cluster):
        add_with_the_writes_held(cluster, s)
        run = s.run("GC", netconf=gc)
        assert run.code == 0 and run.stdout == "", run.stdout + s.log_text()
        sc.assert_clean(s)
    # the Events and the PATCH are two queues: some are being sent, the rest queued
    assert f"container {s.container_id}: DEL: " in s.daemon.log_text()
    faults.wait_for("nothing queued", lambda: s.daemon.metric("netattach_publish_pending") == 0)
    sent = s.daemon.metric("netattach_publish_sent_total")
    assert sent in (0, 1) and s.daemon.metric("netattach_publish_dropped_total") == 4 - sent
    assert status_annotation(admin_api, s) is None
    assert thin_calls(s, "GC") == 0


def test_add_and_status_without_the_daemon(make_scenario):
    """ADD waits for the socket a bounded time, then fails with code 11 naming it;
    nothing is attached. STATUS says the plugin is not available (50)."""
    s = make_scenario()
    s.daemon.stop()
    socket = str(s.daemon.socket_dir / "netattach.sock")
    run = s.run("ADD")
    assert run.code == 1 and run.doc["code"] == 11, run.stdout
    assert socket in run.doc["msg"] and f"pod {s.namespace}/{s.pod_name}" in run.doc["msg"]
    sc.assert_clean(s)
    run = s.run("STATUS")
    assert run.code == 1 and run.doc["code"] == 50 and socket in run.doc["msg"], run.stdout
    assert s.run("DEL").code == 0  # the runtime's DEL after the failed ADD
    sc.assert_clean(s)


def test_only_root_may_call(make_scenario):
    """The socket is 0600 in a 0700 dir; opened up by hand, a non-root peer is still
    refused (SO_PEERCRED) and gets no answer."""
    s = make_scenario()
    sock = s.daemon.socket_dir / "netattach.sock"
    assert os.stat(s.daemon.socket_dir).st_mode & 0o777 == 0o700
    assert os.stat(sock).st_mode & 0o777 == 0o600
    for d in (s.env.root, s.daemon.socket_dir):  # the test's root is 0700 too
        os.chmod(d, 0o755)
    os.chmod(sock, 0o666)
    request = json.dumps({"env": s.cni_env("ADD"), "stdin": json.dumps(s.netconf)})
    probe = ("import socket, sys\ns = socket.socket(socket.AF_UNIX)\ns.connect(sys.argv[1])\n"
             "try:\n  s.sendall(sys.argv[2].encode()); s.shutdown(socket.SHUT_WR)\n"
             "  print(repr(s.recv(65536)))\n"
             "except OSError:\n  print(repr(b''))")
    # closed unread: a reset, or EPIPE when the daemon closed it before the send ended
    p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                        "/usr/bin/python3", "-c", probe, str(sock), request],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "b''", p.stdout + p.stderr
    assert "refused a connection" in s.daemon.log_text() and "uid 65534" in s.daemon.log_text()
    sc.assert_clean(s)


def test_health_and_metrics(admin_api, make_scenario):
    s = make_scenario()
    assert s.daemon.endpoint("/healthz") == (200, "ok\n")
    assert s.daemon.endpoint("/readyz") == (200, "ok\n")
    assert s.run("ADD").code == 0, s.log_text()
    sc.network_status(admin_api, s.namespace, s.pod_name)
    faults.wait_for("the queued writes to be sent",
                    lambda: s.daemon.metric("netattach_publish_pending") == 0)
    m = s.daemon.metric
    assert m("netattach_requests_total", command="ADD", code="0") == 1
    assert m("netattach_request_duration_seconds_count", command="ADD") == 1
    assert m("netattach_attachments_total") == 3
    assert m("netattach_child_seconds_total") > 0
    assert m("netattach_cache_synced", kind="Pod") == 1
    assert m("netattach_cache_objects", kind="Pod") >= 1
    assert m("netattach_cache_objects", kind="NetworkAttachmentDefinition") >= 2
    assert m("netattach_api_requests_total", source="watch") >= 4  # 2 LISTs + 2 WATCHes
    assert m("netattach_publish_sent_total") == 4  # the PATCH and 3 AddedInterface events
    assert m("process_resident_memory_bytes") > 0
    bad = s.run("ADD")  # CNI forbids a second ADD: code 4, counted by its code
    assert bad.code == 1 and bad.doc["code"] == 4
    assert m("netattach_requests_total", command="ADD", code="4") == 1
    assert s.run("DEL").code == 0
    sc.assert_clean(s)


def test_the_dashboard_reads_only_what_the_daemon_exports(make_scenario):
    """A real daemon's /metrics after an ADD and a DEL of scenario 1 (so every histogram
    has series): every query of deploy/grafana/netattach.json names a series it exports
    and only labels that series carries; docs/metrics.md's reference table lists exactly
    its families (DRA's are there only with --dra); each delegate was timed by type,
    command and result; build_info is the artifact's --version."""
    s = make_scenario()
    assert s.run("ADD").code == 0, s.log_text()
    assert s.run("DEL").code == 0, s.log_text()
    status, text = s.daemon.endpoint("/metrics")
    assert status == 200, text
    assert dashboard.problems(dashboard.load(), dashboard.exported(text)) == []
    documented = {name: kind for name, kind in dashboard.documented().items()
                  if not name.startswith("netattach_dra_")}
    assert dashboard.family_names(text) == documented
    # scenario 1's delegates, in each direction: the cluster default network's bridge,
    # net-a's macvlan then tuning, net-b's bridge (host-local is run by macvlan)
    for command in ("ADD", "DEL"):
        for plugin, runs in (("bridge", 2), ("macvlan", 1), ("tuning", 1)):
            assert dashboard.value(text, "netattach_delegate_duration_seconds_count",
                                   plugin_type=plugin, command=command,
                                   result="success") == runs, (plugin, command)
    assert {x["result"] for x in dashboard.samples(
        text, "netattach_delegate_duration_seconds_count")} == {"success"}
    # what the daemon says it is: the artifact's release and commit
    p = subprocess.run([sc.netattach_command(), "--version"], capture_output=True, text=True,
                       timeout=60)
    commit = re.fullmatch(rf"netattach {re.escape(__version__)} \(commit (\S+); CNI .*\)\n",
                          p.stdout)[1]
    [info] = dashboard.samples(text, "netattach_build_info")
    assert info["version"] == __version__ and info["commit"] == commit, (info, p.stdout)
    assert re.fullmatch(r"3\.\d+\.\d+", info["python"]), info
    assert f"netattach daemon {__version__} (commit {commit}), Python {info['python']}" in \
        s.daemon.log_text()
    sc.assert_clean(s)
