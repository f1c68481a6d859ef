"""Tenants must not cost the node daemon unbounded work or memory (issue 21), on the real
API server, real plugins and a real netns, against the built artifact's `netattach
daemon` (testbed/netattach_testbed/daemon.py):

* a hot-plug element that keeps failing, with its pod's annotation edited 20 times in
  a row: its ADD is tried far fewer than 20 times (its backoff), every edit is looked
  at, the queue never holds more than the pod, and the failure is one Warning Event
  whose count is the number of tries;
* 100 NetworkAttachmentDefinitions of 1 MiB each, listed at the daemon's start and 20
  of them replaced while it watches: the daemon's peak RSS (VmHWM) stays under the
  memory limit deploy/thick gives it; each gets a Warning ConfigTooLarge Event, and a
  pod selecting one fails with code 7 naming the NAD and the bound;
* 200 connections opened to the metrics port and left idle: no thread for each (the
  daemon's threads are counted in /proc/<pid>/task), at most --metrics-max-connections
  kept open, /metrics and /readyz still answer, the idle ones are closed; the port
  binds an IPv6 address too.
No assertion is about time: every wait polls for its condition under a hang guard, and
the backoff's bound on tries is computed from the time the edits really took.
"""
from __future__ import annotations

import json
import os
import socket
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from netattach_testbed import cluster as cl
from netattach_testbed import faults
from netattach_testbed import scenario as sc
from netattach_testbed.daemon import NodeDaemon
from tests.e2e.test_faults_children import del_twice, with_fault_network
from tests.e2e.test_hotplug_e2e import FULL, add, hotplug, select, wait_event

pytestmark = pytest.mark.e2e

WAIT = 180  # hang guard of each wait
TEST_FLAGS = ("--log-level", "debug", "--max-parallel", "4")


@pytest.fixture
def scenario_with_daemon(admin_api, plugin_kubeconfig, daemon_kubeconfig, host_env,
                         k8s_namespace):
    """scenario_with_daemon(*flags, **setup options) -> scenario 1 in thick mode, run by a
    daemon started with the test bed's flags and `flags`; stopped at teardown."""
    daemons: list[NodeDaemon] = []

    def make(*flags: str, **kw) -> sc.Scenario:
        s = sc.setup(admin_api, plugin_kubeconfig, host_env, k8s_namespace, **kw)
        daemons.append(NodeDaemon.start(sc.netattach_command(), host_env, daemon_kubeconfig,
                                        flags=TEST_FLAGS + flags))
        return s.thick(daemons[-1])

    try:
        yield make
    finally:
        for d in daemons:
            d.stop()


def proc_status(pid: int) -> dict[str, str]:
    return dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text()
                .splitlines() if ":" in line)


def kib(value: str) -> int:
    number, unit = value.split()
    assert unit == "kB", value
    return int(number)


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def sockets(pid: int) -> int:
    """The process's open sockets (its fds that are sockets)."""
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            n += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return n


def daemon_memory_limit() -> int:
    """Bytes: the memory limit of the daemon container in deploy/thick."""
    doc = yaml.safe_load((cl.THICK_DIR / "daemonset-thick.yaml").read_text())
    container = next(c for c in doc["spec"]["template"]["spec"]["containers"]
                     if c["name"] == "daemon")
    limit = container["resources"]["limits"]["memory"]
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}
    return int(limit[:-2]) * units[limit[-2:]]


def events_of(admin_api, namespace: str, kind: str, name: str, reason: str) -> list:
    """The Event objects on object `kind` namespace/name with `reason`."""
    from kubernetes.client import CoreV1Api
    return [e for e in CoreV1Api(admin_api).list_namespaced_event(
        namespace, field_selector=f"involvedObject.kind={kind},involvedObject.name={name}"
    ).items if e.reason == reason]


# ---------------------------------------------------------------- hot-plug backoff

def tries_allowed(elapsed: float, initial: float) -> int:
    """The tries a backoff of `initial` s, doubling, allows in `elapsed` s: the first,
    then one at each end (initial, 3 x initial, 7 x initial, ... after the first)."""
    tries, end, wait = 1, initial, initial
    while end <= elapsed:
        tries += 1
        wait *= 2
        end += wait
    return tries


def test_twenty_edits_on_a_standing_failure_cost_far_fewer_than_twenty_tries(
        admin_api, scenario_with_daemon):
    """net-fault's child always fails. Once it is added to the running pod, the pod's
    annotation is edited 20 times in a row (only its spacing changes: the selection
    stays) and the test waits until the daemon looked at each edit. The child ran no
    more often than its backoff allows in the time the edits took, far fewer than 20
    times; every other look deferred it; the queue never held more than this pod; the
    failure is one ErrorAddingNetwork Event whose count is the number of tries."""
    initial = 60.0
    s = hotplug(scenario_with_daemon("--hotplug-interval", "0.2", "--hotplug-backoff-initial",
                                     str(initial), "--hotplug-backoff-max", "600"))
    plugin = with_fault_network(admin_api, s, "fail", message="injected: always fails")
    add(admin_api, s, FULL)
    started = time.monotonic()  # before the first try: its backoff starts after it
    select(admin_api, s, "net-a,other/net-b@data0,net-fault")
    message = wait_event(admin_api, s, "Warning", "ErrorAddingNetwork",
                         f"{s.namespace}/net-fault", "injected: always fails")
    queued = []
    for i in range(1, 21):
        rv = select(admin_api, s, "net-a,other/net-b@data0," + " " * i + "net-fault")
        line = f"hot-plug: pod {s.namespace}/{s.pod_name} (resourceVersion {rv}): looking at"
        faults.wait_for(f"the daemon to look at edit {i}",
                        lambda line=line: line in s.daemon.log_text(), timeout=WAIT)
        queued.append(s.daemon.metric("netattach_hotplug_queued"))
    elapsed = time.monotonic() - started
    adds = [c for c, _ in plugin.invocations() if c == "ADD"]
    assert 1 <= len(adds) <= tries_allowed(elapsed, initial), (len(adds), elapsed)
    assert len(adds) <= 5  # 20 edits would have to take 15 minutes for more
    deferred = s.daemon.metric("netattach_hotplug_changes_total", result="deferred")
    assert deferred >= 20 - (len(adds) - 1)
    assert max(queued) <= 1
    s.daemon.wait_writes_sent()
    events = events_of(admin_api, s.namespace, "Pod", s.pod_name, "ErrorAddingNetwork")
    assert [e.message for e in events] == [message]
    assert events[0].count == len(adds)
    assert sc.pod_links(s) == ["data0", "eth0", "lo", "net1"]
    del_twice(s)


# ---------------------------------------------------------------- NAD cache memory

MIB = 1 << 20


def big_nad(namespace: str, name: str, fill: str) -> dict:
    """A NAD whose spec.config is a valid CNI config of 1 MiB."""
    config = json.dumps({"cniVersion": "1.0.0", "type": "bridge", "pad": ""})
    pad = MIB - len(config)
    return {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"config": json.dumps({"cniVersion": "1.0.0", "type": "bridge",
                                           "pad": fill * pad})}}


def test_a_hundred_nads_of_a_mebibyte_keep_the_daemon_under_its_memory_limit(
        admin_api, plugin_kubeconfig, daemon_kubeconfig, host_env, k8s_namespace):
    """100 NADs of 1 MiB exist when the daemon starts (its LIST) and 20 are replaced by
    others of 1 MiB while it watches. Its peak RSS (VmHWM in /proc/<pid>/status) stays
    under deploy/thick's memory limit, and below the NADs' own 120 MiB; it keeps every
    NAD (as a refusal: over the 256 KiB bound), each gets one Warning ConfigTooLarge
    Event, and a pod selecting one fails with code 7 naming it and the bound."""
    from kubernetes.client import CustomObjectsApi
    api = CustomObjectsApi(admin_api)
    names = [f"big-{i:03d}" for i in range(100)]
    for name in names:
        api.create_namespaced_custom_object("k8s.cni.cncf.io", "v1", k8s_namespace,
                                            "network-attachment-definitions",
                                            big_nad(k8s_namespace, name, "a"))
    s = sc.setup(admin_api, plugin_kubeconfig, host_env, k8s_namespace,
                 networks=f"net-a,{names[7]}")
    d = NodeDaemon.start(sc.netattach_command(), host_env, daemon_kubeconfig, flags=TEST_FLAGS)
    try:
        s = s.thick(d)
        assert d.metric("netattach_cache_objects", kind="NetworkAttachmentDefinition") >= 101
        for name in names[:20]:
            obj = api.get_namespaced_custom_object("k8s.cni.cncf.io", "v1", k8s_namespace,
                                                   "network-attachment-definitions", name)
            obj["spec"] = big_nad(k8s_namespace, name, "b")["spec"]
            rv = api.replace_namespaced_custom_object(
                "k8s.cni.cncf.io", "v1", k8s_namespace, "network-attachment-definitions", name,
                obj)["metadata"]["resourceVersion"]
            d.wait_cache_event("NetworkAttachmentDefinition", k8s_namespace, name, "MODIFIED",
                               timeout=WAIT, resource_version=rv)
        run = s.run("ADD")
        assert run.code != 0
        error = json.loads(run.stdout)
        assert error["code"] == 7, error
        assert f"NetworkAttachmentDefinition {k8s_namespace}/{names[7]}" in error["msg"]
        assert f"{MIB} bytes" in error["msg"] and "bound of 262144 bytes" in error["msg"]
        d.wait_writes_sent(timeout=WAIT)
        status = proc_status(d.pid)
        peak, rss = kib(status["VmHWM"]) * 1024, kib(status["VmRSS"]) * 1024
        limit = daemon_memory_limit()
        assert peak < limit, (peak, limit)
        assert peak < 120 * MIB and rss < 120 * MIB, (peak, rss)
        for name in names:  # one Event each; a replaced one's counts both versions
            events = events_of(admin_api, k8s_namespace, "NetworkAttachmentDefinition", name,
                               "ConfigTooLarge")
            assert len(events) == 1, (name, events)
            assert events[0].type == "Warning" and f"{MIB} bytes" in events[0].message
            assert "bound of 262144 bytes" in events[0].message
            assert events[0].count == (2 if name in names[:20] else 1), name
        assert d.metric("netattach_cache_misses_total", kind="NetworkAttachmentDefinition") == 0
        del_twice(s)
    finally:
        d.stop()


# ---------------------------------------------------------------- metrics endpoint

def test_idle_connections_cost_no_thread_and_the_endpoints_still_answer(scenario_with_daemon):
    """200 sockets opened to the metrics port and left idle: the daemon's threads are as
    many as before (not one per connection), it keeps at most --metrics-max-connections
    of them open (the oldest idle closed first), /metrics and /readyz answer 200 while
    they are open, and each idle one is closed by the daemon once its idle timeout
    passed."""
    s = scenario_with_daemon("--metrics-max-connections", "32", "--metrics-idle-timeout", "3")
    d = s.daemon
    assert d.endpoint("/readyz")[0] == 200
    before_threads, before_sockets = threads(d.pid), sockets(d.pid)
    idle = [socket.create_connection(("127.0.0.1", d.metrics_port), timeout=30)
            for _ in range(200)]
    try:
        faults.wait_for("the daemon to take the 200 connections",
                        lambda: d.metric("netattach_metrics_connections_closed_total",
                                         reason="evicted") >= 200 - 32, timeout=WAIT)
        assert threads(d.pid) <= before_threads + 2, (before_threads, threads(d.pid))
        assert sockets(d.pid) <= before_sockets + 32 + 2
        status, text = d.endpoint("/metrics")
        assert status == 200 and "netattach_requests_total" in text
        assert d.endpoint("/readyz") == (200, "ok\n")
        assert d.endpoint("/healthz") == (200, "ok\n")

        left = list(idle)

        def all_closed() -> bool:
            left[:] = [sock for sock in left if not closed_by_peer(sock)]
            return not left
        faults.wait_for("the daemon to close every idle connection", all_closed, timeout=WAIT)
        assert d.metric("netattach_metrics_connections_closed_total", reason="idle") >= 1
        assert d.metric("netattach_metrics_connections") <= 1  # the scrape's own
        assert threads(d.pid) <= before_threads + 2
    finally:
        for sock in idle:
            sock.close()


def closed_by_peer(sock: socket.socket) -> bool:
    """The other end closed the connection (EOF or reset); False while it is open."""
    sock.settimeout(0.01)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionError:
        return True


class Ipv6Daemon(NodeDaemon):
    """A daemon whose endpoints are asked on [::1]."""

    def endpoint(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://[::1]:{self.metrics_port}{path}",
                                        timeout=10) as r:
                return r.status, r.read().decode()
        except OSError as e:
            return 0, str(e)


def test_the_endpoints_bind_an_ipv6_address(host_env, daemon_kubeconfig):
    """--metrics-address ::1 (as status.hostIP is on an IPv6 node): /readyz answers there,
    and nothing listens on 127.0.0.1 at that port."""
    d = Ipv6Daemon.start(sc.netattach_command(), host_env, daemon_kubeconfig,
                         flags=TEST_FLAGS + ("--metrics-address", "::1"))
    try:
        assert d.endpoint("/readyz") == (200, "ok\n")
        assert NodeDaemon.endpoint(d, "/readyz")[0] == 0
    finally:
        d.stop()
