"""Failure modes of issue 5 around the children and the node (faults 3, 4 and 6).

Each test runs scenario 1's real plugins in a real netns against the real
kube-apiserver, plus a fault plugin (testbed/netattach_testbed/faults.py) that really runs the
reference `bridge` and then misbehaves. Each proves that nothing is left: no
interface in the netns but lo, no host-local allocation, no state or lock file
once the runtime's DEL ran, and that the error or log says what happened.

The child faults, the unwritable state dir and the kill before the status PATCH run in
both modes (the `mode` fixture, tests/e2e/conftest.py): in thick mode the children are
the daemon's, which must roll back, kill a hung child's descendants and answer through
the shim exactly as thin mode does. The kills of netattach mid-ADD are thin mode's own
process; thick mode's (the daemon killed mid-ADD) is tests/e2e/test_thick_mode.py.
"""
from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from netattach_testbed import faults
from netattach_testbed import netns as tb
from netattach_testbed import scenario as sc

pytestmark = pytest.mark.e2e

FAULT_SUBNET = "198.18.5.0/24"


def with_fault_network(admin_api, s: sc.Scenario, fault: str, **kw) -> faults.FaultPlugin:
    """NAD `net-fault` in the pod's namespace: a bridge + host-local conf run by fault
    plugin `fault` (which execs the real bridge)."""
    plugin = faults.install(s.bin_dir, fault, **kw)
    conf = sc.bridge_conf(s.env.bridge_name(), FAULT_SUBNET, s.env.ipam_dir, name="net-fault",
                          version="1.0.0", gateway=False)
    sc.apply_nad(admin_api, sc.nad(s.namespace, "net-fault", {**conf, "type": plugin.name}))
    return plugin


def fault_scenario(make_scenario, admin_api, networks: str, fault: str, **kw):
    """Scenario 1 selecting `networks` in the test's mode, with NAD net-fault."""
    s = make_scenario(networks=networks)
    return s, with_fault_network(admin_api, s, fault, **kw)


def del_twice(s: sc.Scenario) -> None:
    """The runtime's DEL cleans everything; its retry (runtimes retry DEL) succeeds too."""
    for attempt in ("DEL", "DEL again"):
        run = s.run("DEL")
        assert run.code == 0 and run.stdout == "", f"{attempt}: {run.stdout}{s.log_text()}"
        sc.assert_clean(s)


def start_add(s: sc.Scenario, netconf: dict | None = None) -> subprocess.Popen:
    """ADD as a runtime execs it, without waiting: the test holds the process."""
    proc = subprocess.Popen([str(s.bin_dir / s.plugin)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=s.cni_env("ADD"))
    proc.stdin.write(json.dumps(netconf or s.netconf).encode())
    proc.stdin.close()
    return proc


def sigkill(proc: subprocess.Popen) -> None:
    """What the OOM killer or `kill -9` does to netattach; reaped, pipes closed."""
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    for pipe in (proc.stdout, proc.stderr):
        pipe.close()


def saved_state(s: sc.Scenario) -> dict:
    """The pod's state file as DEL reads it (StateStore.load: an ADD's plan with the
    progress records appended after it, state.py "Progress", taken as those records
    say), in the keys of the file. Fails when there is no state file."""
    from netattach.node.statestore import StateStore
    state = StateStore(str(s.env.state_dir)).load(s.container_id)
    assert state is not None, f"no state file for {s.container_id}"
    return state.to_dict()


# ---------------------------------------------------------------- 3: a child fails, hangs, crashes

# delegateTimeout of the "hang" case. The hung child must have done its real bridge ADD
# before netattach's clock runs out, also on a loaded machine (issue 9, defect 11: at
# 1 s the timeout could fall inside the bridge ADD, before the fault); the other
# faults run with the default (60 s), which only has to outlast the bridge.
HANG_TIMEOUT = 5


@pytest.mark.parametrize("fault, code, text", [
    ("fail", 110, "injected: failed after the real bridge ADD"),
    ("segv", 999, "was killed by SIGSEGV (11)"),
    ("sigkill", 999, "was killed by SIGKILL (9)"),
    ("hang", 11, f"timed out after {HANG_TIMEOUT} seconds (ADD)"),
])
def test_child_fault_after_its_real_add_rolls_back_everything(
        admin_api, make_scenario, k8s_namespace, fault, code, text):
    """The second selected network's child really attaches (bridge + host-local), then
    fails / crashes / hangs past delegateTimeout. netattach kills a hung child with all
    its descendants, DELs every attempted attachment, that one included, and never
    starts the third network."""
    s, plugin = fault_scenario(make_scenario, admin_api, "net-a,net-fault,other/net-b@data0",
                               fault,
                               message="injected: failed after the real bridge ADD")
    if fault == "hang":
        s.netconf["delegateTimeout"] = HANG_TIMEOUT
    start = time.monotonic()
    run = s.run("ADD")
    took = time.monotonic() - start

    assert run.code == 1, run.stdout + s.log_text()
    err = run.doc
    assert err["code"] == code and text in err["msg"], err
    assert (f"pod {k8s_namespace}/{s.pod_name}: network {k8s_namespace}/net-fault "
            f"(interface net2): plugin type='{plugin.name}'") in err["msg"]
    # the faulty child had really attached: an address from its own subnet ...
    added = json.loads(plugin.result.read_text())
    assert ipaddress.ip_interface(added["ips"][0]["address"]) in ipaddress.ip_network(FAULT_SUBNET)
    # ... and the rollback DEL released it, with everything else attempted
    assert plugin.invocations() == [("ADD", "net2"), ("DEL", "net2")]
    assert f"ADD of network {k8s_namespace}/net-fault (net2) failed" in s.log_text()
    sc.assert_clean(s)
    assert s.bridges["net-b"] not in {l["ifname"] for l in tb.links()}  # never started
    if fault == "hang":
        pids = plugin.recorded_pids()
        assert len(pids) == 3  # the plugin, its child, its grandchild in its own session
        # killed, not waited for: they would live faults.HANG_SECONDS; the wait is a hang guard
        faults.wait_for("the hung plugin and its descendants to die",
                        lambda: not any(faults.alive(p) for p in pids))
        # abandoned at the deadline (the message says so), not before it, and not when
        # the hung processes end: how long after the deadline depends on the load
        assert HANG_TIMEOUT <= took < faults.HANG_SECONDS / 5, took
    del_twice(s)


# ---------------------------------------------------------------- 4: netattach SIGKILLed mid-ADD

# Thin-only: the process killed is the one the runtime exec'd, and in thick mode the pod
# comes from the daemon's cache, not a GET that hangs (the daemon killed: test_thick_mode).
def test_netattach_killed_before_the_state_write(scenario, cluster):
    """(a) killed while GET pod hangs on a stopped API server: nothing attached; the
    marker saved before that request and the lock file of the dead holder are left; the
    runtime's DEL needs no API request for it (issue 9, defect 8) and cleans.

    The ADD's apiTimeout is raised so that netattach is still waiting for the GET when
    the test gets to kill it, however slowly the test runs (with the default 5 s, a
    test descheduled that long would find it exited with code 11)."""
    s = scenario
    with faults.apiserver_frozen(cluster):
        proc = start_add(s, {**s.netconf, "apiTimeout": 3600})
        try:
            faults.wait_for("netattach's GET pod on the stopped API server",
                            lambda: cluster.apiserver_port in faults.tcp_peers(proc.pid))
        finally:
            sigkill(proc)
    assert proc.returncode == -signal.SIGKILL
    assert s.env.state_files() == [f"{s.container_id}.json",
                                                   f"{s.container_id}.lock"]
    assert saved_state(s)["attachments"] == []  # the marker: nothing attached yet
    assert sc.pod_links(s) == ["lo"] and s.env.ipam_allocations() == []
    with faults.apiserver_frozen(cluster):  # the API server cannot be asked: not needed
        run = s.run("DEL")
    assert run.code == 0 and run.stdout == "", run.stdout + s.log_text()
    del_twice(s)


# Thin-only: thick mode's twin, the daemon killed by the child, is test_thick_mode's
# test_daemon_killed_mid_add_then_del_without_it.
def test_netattach_killed_between_children(admin_api, plugin_kubeconfig, host_env,
                                           k8s_namespace):
    """(b) the first selected network's child does its real work, then SIGKILLs its
    parent, netattach itself (the plugin checks /proc/$PPID/exe): eth0 is up with its
    result saved, net1 is up but marked attempted without a result, net-a never ran.
    The runtime's DEL undoes both from the state file."""
    s = sc.setup(admin_api, plugin_kubeconfig, host_env, k8s_namespace,
                 networks="net-fault,net-a")
    plugin = with_fault_network(admin_api, s, "kill-parent",
                                parent_exe=os.path.realpath(sc.netattach_command()))
    proc = start_add(s)
    try:
        proc.wait(60)
    finally:
        if proc.returncode is None:
            sigkill(proc)
    err = proc.stdout.read().decode()
    assert proc.returncode == -signal.SIGKILL, err + s.log_text()
    # the process the runtime exec'd is the one the child killed: no bootloader in between
    assert plugin.recorded_pids() == [proc.pid]
    faults.wait_for("the killing plugin to exit",
                    lambda: not faults.alive(plugin.call_pids()[0]))

    assert sc.pod_links(s) == ["eth0", "lo", "net1"]
    atts = saved_state(s)["attachments"]
    assert [(a["ifname"], a["attempted"], a["result"] is not None) for a in atts] == [
        ("eth0", True, True), ("net1", True, False), ("net2", False, False)]
    assert s.env.state_files() == [f"{s.container_id}.json",
                                                   f"{s.container_id}.lock"]
    del_twice(s)
    assert plugin.invocations()[:2] == [("ADD", "net1"), ("DEL", "net1")]


def test_netattach_killed_before_the_status_patch(admin_api, make_scenario, mode, cluster):
    """(c) the last child stops the API server before it returns, so the status PATCH
    cannot complete; netattach is killed there. Every result is saved and the runtime's
    DEL cleans all three attachments.

    What network-status shows is not the product's to decide: a PATCH whose bytes
    reached the stopped API server before the kill is applied when it resumes (issue 9,
    defect 11: asserting "absent" failed on a loaded machine). The guarantee is that
    it is absent or whole, never a partial list. apiTimeout is raised so that netattach
    is still waiting for the PATCH however slowly the test runs.

    Thick mode: the daemon queues the PATCH and answers the ADD without waiting for it,
    so the ADD succeeds with the API server stopped; the daemon is then SIGKILLed with
    the write unsent, and the runtime's DEL, with no daemon to answer, runs in thin
    mode from the saved state. The same guarantees hold for network-status and DEL."""
    s, plugin = fault_scenario(make_scenario, admin_api, "net-a,net-fault", "stop-apiserver",
                               apiserver_pid=faults.apiserver_pid(cluster))
    s.netconf = {**s.netconf, "apiTimeout": 3600}
    with faults.apiserver_frozen(cluster, stop=False) as api_pid:
        if mode == "thick":
            run = s.run("ADD")
            assert run.code == 0, run.stdout + s.log_text()
            assert faults.process_state(api_pid) == "T"  # answered with the API stopped
            s.daemon.kill()
        else:
            proc = start_add(s)
            try:
                faults.wait_for("the last child to stop the API server",
                                lambda: faults.process_state(api_pid) == "T")
                # the results are saved before the PATCH, which cannot be answered: wait
                # for the state file itself (a log line can come before the save)
                faults.wait_for("netattach to save the last result", lambda: [
                    a["ifname"] for a in saved_state(s)["attachments"] if a["result"]] == [
                    "eth0", "net1", "net2"])
                assert proc.poll() is None, s.log_text()  # it cannot finish: no PATCH answer
            finally:
                sigkill(proc)
            assert proc.returncode == -signal.SIGKILL
    status = sc.read_pod_annotations(admin_api, s.namespace, s.pod_name).get(sc.STATUS)
    if status is not None:  # the PATCH had reached the server: then it is whole
        assert [e["interface"] for e in json.loads(status)] == ["eth0", "net1", "net2"]
    assert [a["ifname"] for a in saved_state(s)["attachments"] if a["result"]] == [
        "eth0", "net1", "net2"]
    assert sc.pod_links(s) == ["eth0", "lo", "net1", "net2"]
    assert len(s.env.ipam_allocations()) == 3
    del_twice(s)
    assert plugin.invocations()[:2] == [("ADD", "net2"), ("DEL", "net2")]


# ---------------------------------------------------------------- 6: state dir full or read-only

def mount_tmpfs(path: Path, options: str) -> None:
    tb.run("mount", "-t", "tmpfs", "-o", options, "netattach-test", str(path))


def fill(path: Path) -> None:
    """Write into `path` until the file system is full."""
    with open(path / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as e:
            assert e.errno == 28, e  # ENOSPC


@pytest.mark.parametrize("fault, cause", [
    ("full", "No space left on device"),
    ("read-only", "Read-only file system"),
])
def test_unwritable_state_dir_fails_add_before_any_child(
        admin_api, make_scenario, k8s_namespace, fault, cause):
    """cniDir on a full (or read-only) file system: the ADD fails with code 5 naming
    the state dir and the cause, before any child ran (the recording plugin of net2
    was never called; nothing attached, nothing allocated)."""
    s, plugin = fault_scenario(make_scenario, admin_api, "net-a,net-fault", "none")
    state_dir = s.env.state_dir
    mount_tmpfs(state_dir, "size=16k,mode=0700")
    try:
        if fault == "full":
            fill(state_dir)
        else:
            tb.run("mount", "-o", "remount,ro", str(state_dir))
        run = s.run("ADD")
        assert run.code == 1, run.stdout + s.log_text()
        err = run.doc
        assert err["code"] == 5, err
        assert f"pod {k8s_namespace}/{s.pod_name}: " in err["msg"]
        assert f"{state_dir}/{s.container_id}." in err["msg"] and cause in err["msg"], err
        assert sorted(os.listdir(state_dir)) == (["filler"] if fault == "full" else [])
    finally:
        tb.run("umount", str(state_dir))
    assert plugin.invocations() == []
    sc.assert_clean(s)
    del_twice(s)
