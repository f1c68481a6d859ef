"""Bounded work per pod in thick mode (issue 21): one pod must not be able to exhaust the
node daemon. The built artifact's `netattach daemon` (testbed/netattach_testbed/daemon.py) serves
shims exec'd as a runtime execs them, with real plugins in real netns and the real API
server; a child that the test holds (testbed/netattach_testbed/faults.py "hold": the real bridge,
then a wait until the test removes a file) stands for a slow or hung plugin.

* the runtime killing the shim mid-ADD: once the held child returns, the daemon runs
  no further attachment, rolls back what it attached (no link, no address, no state),
  and the runtime's DEL is quiet;
* one sandbox's calls flooding the daemon: they wait without taking a worker, those
  past the bound are refused with code 11 naming the pod, and another pod's ADD is
  served while the first sandbox's call is still held;
* /readyz: 503 once the pool has stayed saturated past --saturation-timeout, 200 again
  once it drains;
* a daemon that does not answer (SIGSTOPped): the shim gives up after its answer
  timeout (code 11 for ADD, thin mode for DEL), and the daemon, resumed, abandons the
  ADD whose shim is gone before it attaches anything.
No assertion is about time: every wait polls for its condition under a hang guard, and
"served while held" is an order of events (the held child is still alive after the
other pod's ADD answered).
"""
from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import uuid

import pytest

from netattach_testbed import faults
from netattach_testbed import scenario as sc
from tests.e2e.test_faults_children import sigkill, start_add, with_fault_network
from tests.e2e.test_thick_mode import thin_calls

pytestmark = pytest.mark.e2e

WORKERS = 2
"""The test daemon's --max-parallel: few, so that one sandbox could take them all."""
PER_SANDBOX = 4
"""daemon/admission.py MAX_WAITING_PER_SANDBOX: calls of one sandbox that may wait."""
HOLD_DELEGATE_TIMEOUT = 600
"""delegateTimeout of the pods whose child is held: the daemon must not kill the held
child, nor the shims give up (their answer timeout grows with it), before the test
releases it; the test's own hang guards end a test whose event never comes."""


@pytest.fixture
def mode() -> str:
    return "thick"


@pytest.fixture
def node(make_scenario):
    """node(**setup options) -> scenario 1 (scenario.setup) in thick mode, served by one
    daemon with WORKERS workers and a --saturation-timeout of 1 s, started by the first
    call and stopped at teardown (conftest's make_scenario)."""
    def make(**kw) -> sc.Scenario:
        return make_scenario(daemon_flags=("--log-level", "debug", "--max-parallel",
                                           str(WORKERS), "--saturation-timeout", "1"), **kw)
    return make


def another_pod(admin_api, host_env, s: sc.Scenario, name: str, networks: str) -> sc.Scenario:
    """A second pod on `s`'s node and networks, with its own sandbox and netns."""
    uid = sc.create_pod(admin_api, sc.pod(s.namespace, name, networks))
    return dataclasses.replace(s, pod_name=name, pod_uid=uid, netns=host_env.new_netns(),
                               container_id=uuid.uuid4().hex + uuid.uuid4().hex,
                               netconf=dict(s.netconf))


def held(s: sc.Scenario) -> sc.Scenario:
    """`s` with a delegateTimeout that outlasts any hold (HOLD_DELEGATE_TIMEOUT)."""
    return dataclasses.replace(s, netconf={**s.netconf, "delegateTimeout":
                                           HOLD_DELEGATE_TIMEOUT})


def finished(proc: subprocess.Popen, timeout: float = 120) -> sc.PluginRun:
    """The exit status and output of a shim start_add exec'd (`timeout` is a hang guard;
    its output is one small document, which the pipe holds until read)."""
    proc.wait(timeout)
    out, err = proc.stdout.read(), proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    return sc.PluginRun(proc.returncode, out.decode(), err.decode())


def readyz(s: sc.Scenario) -> tuple[int, str]:
    return s.daemon.endpoint("/readyz")


def test_the_runtime_killing_the_shim_mid_add_makes_the_daemon_roll_it_back(admin_api, node):
    """The first selected network's child is held; the runtime gives up (the shim is
    SIGKILLed). The daemon cannot stop a child half-run: once it returns, the daemon
    starts no further network, DELs the held one and eth0, and writes the tombstone;
    the pod gets a Warning event saying why, and the runtime's DEL is quiet."""
    s = held(node(networks="net-fault,net-a"))
    plugin = with_fault_network(admin_api, s, "hold")
    plugin.gate.touch()
    try:
        proc = start_add(s)
        faults.wait_for("the held child to run", lambda: plugin.recorded_pids(), timeout=120)
        sigkill(proc)
        [child] = plugin.recorded_pids()
        assert faults.alive(child)  # held still: the daemon never kills it for this
    finally:
        plugin.gate.unlink(missing_ok=True)
    faults.wait_for("the daemon to finish the abandoned ADD", lambda: s.daemon.metric(
        "netattach_requests_total", command="ADD", code="11") == 1, timeout=120)
    assert s.daemon.metric("netattach_adds_abandoned_total") == 1
    sc.assert_clean(s)
    assert plugin.invocations() == [("ADD", "net1"), ("DEL", "net1")]
    log = s.daemon.log_text()
    why = (f"pod {s.namespace}/{s.pod_name}: ADD abandoned before network "
           f"{s.namespace}/net-a (interface net2): the runtime stopped waiting for its answer")
    assert why in log and "rolling back 2 attempted attachment(s)" in log
    assert f"attached network {s.namespace}/net-a" not in log
    faults.wait_for("the Warning event", lambda: any(
        reason == "ErrorAddingNetwork" and why in message
        for _, reason, message in sc.pod_events(admin_api, s.namespace, s.pod_name)))
    run = s.run("DEL")
    assert run.code == 0 and run.stdout == "", run.stdout + s.log_text()
    sc.assert_clean(s)
    assert thin_calls(s, "DEL") == 0


def test_one_sandbox_flooding_the_daemon_does_not_starve_another_pod(admin_api, host_env,
                                                                    node):
    """Pod A's ADD is held; the runtime sends A's sandbox more calls than may wait. They
    wait without a worker (at most PER_SANDBOX; the rest are refused at once with code
    11 naming the pod and the bound), so pod B's ADD takes the other worker and
    completes while A's child is still held. Released, A's first ADD succeeds and its
    waiting calls run one by one (second ADDs: code 4)."""
    a = held(node(networks="net-fault"))
    plugin = with_fault_network(admin_api, a, "hold")
    b = another_pod(admin_api, host_env, a, "pod-b", "net-a")
    extra = PER_SANDBOX + 3
    plugin.gate.touch()
    try:
        first = start_add(a)
        faults.wait_for("A's held child to run", lambda: plugin.recorded_pids(), timeout=120)
        flood = [start_add(a) for _ in range(extra)]
        faults.wait_for("the flood to be queued or refused", lambda: a.daemon.metric(
            "netattach_requests_refused_total", bound="sandbox") == extra - PER_SANDBOX,
            timeout=120)
        assert a.daemon.metric("netattach_waiting_requests") == PER_SANDBOX
        faults.wait_for("the refused shims to exit", lambda: sum(
            p.poll() is not None for p in flood) == extra - PER_SANDBOX, timeout=120)
        refused = [finished(p) for p in flood if p.poll() is not None]
        for run in refused:
            assert run.code == 1 and run.doc["code"] == 11, run.stdout
            assert run.doc["msg"] == (
                f"pod {a.namespace}/{a.pod_name}: ADD of sandbox {a.container_id[:12]} not "
                f"run by the node daemon: {PER_SANDBOX} calls of this sandbox already wait "
                f"for the one running (at most {PER_SANDBOX})"), run.doc
        run = b.run("ADD")  # under the old pool: blocked behind A's calls until released
        assert run.code == 0, run.stdout + b.log_text()
        assert sc.pod_links(b) == ["eth0", "lo", "net1"]
        [child] = plugin.recorded_pids()
        assert faults.alive(child) and first.poll() is None  # A is still held
    finally:
        plugin.gate.unlink(missing_ok=True)
    run = finished(first)
    assert run.code == 0, run.stdout + a.log_text()
    waited = [finished(p) for p in flood if p.returncode is None]
    assert len(waited) == PER_SANDBOX
    assert all(r.code == 1 and r.doc["code"] == 4 and "already attached" in r.doc["msg"]
               for r in waited), [r.stdout for r in waited]
    assert sc.pod_links(a) == ["eth0", "lo", "net1"]
    for s in (a, b):
        run = s.run("DEL")
        assert run.code == 0 and run.stdout == "", run.stdout + s.log_text()
        assert sc.pod_links(s) == ["lo"]
    assert host_env.ipam_allocations() == [] and host_env.state_files() == []


def test_readyz_is_false_while_the_pool_stays_saturated_and_true_once_it_drains(
        admin_api, host_env, node):
    """Both workers held by two pods' children, a third pod's ADD waiting for one: past
    --saturation-timeout (1 s) /readyz answers 503 saying why; released, the queue
    drains, /readyz answers 200 again and every ADD succeeded."""
    a = held(node(networks="net-fault"))
    plugin = with_fault_network(admin_api, a, "hold")
    b = another_pod(admin_api, host_env, a, "pod-b", "net-fault")
    c = another_pod(admin_api, host_env, a, "pod-c", "net-a")
    assert readyz(a) == (200, "ok\n")
    plugin.gate.touch()
    try:
        adds = [start_add(a), start_add(b)]
        faults.wait_for("both workers held", lambda: len(plugin.recorded_pids()) == WORKERS,
                        timeout=120)
        adds.append(start_add(c))
        faults.wait_for("/readyz to turn false", lambda: readyz(a)[0] == 503, timeout=120)
        status, body = readyz(a)
        assert body.startswith(f"not ready: every worker (--max-parallel {WORKERS}) has been "
                               "busy with calls waiting for one for "), body
        assert "--saturation-timeout 1 s); 1 call(s) waiting" in body, body
        assert a.daemon.endpoint("/healthz")[0] == 200
        assert a.daemon.metric("netattach_pool_saturated_seconds") > 0
    finally:
        plugin.gate.unlink(missing_ok=True)
    runs = [finished(p) for p in adds]
    assert [r.code for r in runs] == [0, 0, 0], [r.stdout for r in runs]
    faults.wait_for("/readyz to turn true again", lambda: readyz(a) == (200, "ok\n"),
                    timeout=120)
    assert a.daemon.metric("netattach_pool_saturated_seconds") == 0
    for s in (a, b, c):
        assert s.run("DEL").code == 0, s.log_text()
        assert sc.pod_links(s) == ["lo"]
    assert host_env.ipam_allocations() == [] and host_env.state_files() == []


def test_a_daemon_that_does_not_answer_is_given_up_on_and_abandons_the_add(node):
    """The daemon SIGSTOPped: the kernel still accepts the shim's connection, nothing
    answers. With apiTimeout 1 and delegateTimeout 1 the shim's answer timeout is 13 s
    (1 + 2 x 1 + 10): the ADD fails with code 11 naming the pod and the timeout. The
    daemon resumed reads that request, finds its shim gone and abandons the ADD before
    anything is attached (a tombstone, no link, no address). A DEL that gets no answer
    either runs in thin mode from the saved state, as when the daemon is down."""
    s = node()
    s = dataclasses.replace(s, netconf={**s.netconf, "apiTimeout": 1, "delegateTimeout": 1})
    os.kill(s.daemon.pid, signal.SIGSTOP)
    try:
        run = s.run("ADD")
    finally:
        os.kill(s.daemon.pid, signal.SIGCONT)
    assert run.code == 1 and run.doc["code"] == 11, run.stdout
    assert run.doc["msg"].startswith(f"pod {s.namespace}/{s.pod_name}: ADD interrupted: "
                                     f"netattach daemon at {s.daemon.socket_dir}"), run.doc
    assert "no answer within 13 s" in run.doc["msg"], run.doc
    assert "abandons the ADD" in run.doc["details"], run.doc
    faults.wait_for("the resumed daemon to abandon the ADD", lambda: s.daemon.metric(
        "netattach_adds_abandoned_total") == 1, timeout=120)
    assert (f"pod {s.namespace}/{s.pod_name}: ADD abandoned before its plan was made"
            in s.daemon.log_text())
    sc.assert_clean(s)
    assert (s.env.state_dir / f"{s.container_id}.deleted").exists()
    os.kill(s.daemon.pid, signal.SIGSTOP)
    try:
        run = s.run("DEL")
    finally:
        os.kill(s.daemon.pid, signal.SIGCONT)
    assert run.code == 0 and run.stdout == "", run.stdout + s.log_text()
    assert thin_calls(s, "DEL") == 1
    # the resumed daemon then reads the DEL the shim left in its socket's queue and runs
    # it too (a DEL is safe twice: the tombstone answers it), holding the container's
    # lock file while it does: clean once it has answered
    faults.wait_for("the resumed daemon to run the DEL it was sent", lambda: s.daemon.metric(
        "netattach_requests_total", command="DEL", code="0") == 1, timeout=120)
    sc.assert_clean(s)
