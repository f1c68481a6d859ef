"""The node daemon starts the same way every time (issue 21).

`netattach daemon --dra` once exited at start: its threads imported asyncio at the
same moment, and CPython handed one of them a partially initialized module
(daemon._import_before_threads). Whether that happens depends on how the threads
interleave, so one clean start proves little. Here:

* the built artifact starts 20 times in a row with every feature on (`--dra` with its
  kubelet plugin and ResourceSlice, `--chroot-dir`, metrics, hot-plug), while
  busy-loop processes keep every CPU busy so the threads are preempted at random
  points. Each start must come up, and each of its servers must answer its first
  callers at once: /readyz, the kubelet's plugin registration (GetInfo, then
  NotifyRegistrationStatus), NodePrepareResources on the DRA socket, /metrics, and a
  CNI STATUS through the shim on netattach.sock. SIGTERM must then end it with exit
  status 0 and its sockets removed;
* one start under an import tracer (the virtualenv's interpreter runs the same code
  as the frozen executable, whose imports cannot be watched) must show that no
  thread but the main one loads a module that is not netattach's own. A concurrent
  import can only yield a partially initialized module through an import cycle, and
  netattach's own modules have none (tests/unit/test_import_check.py).

No assertion is about time: every wait has a hang guard only.
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import uuid
from pathlib import Path

import grpc
import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from netattach.daemon import dra
from netattach.daemon.draplugin import dra_v1_pb2, dra_v1_pb2_grpc
from netattach_testbed import netns as tb
from netattach_testbed import scenario as sc
from netattach_testbed.daemon import NodeDaemon
from tests.e2e.test_dra_node import CALL_TIMEOUT, SLICE, host_veth, register, wait_socket

pytestmark = pytest.mark.e2e

STARTS = 20

TRACER = '''
import sys, threading
out = sys.argv.pop(1)
main, seen = threading.main_thread(), []

class Tracer:
    """Records each module's first import: "<thread name> <module>"."""
    def find_spec(self, name, path=None, target=None):
        thread = threading.current_thread()
        seen.append(f"{'MainThread' if thread is main else thread.name} {name}")
        return None

sys.meta_path.insert(0, Tracer())
from netattach.cli import main as netattach
sys.argv[0] = "netattach"
try:
    netattach()
finally:
    with open(out, "w") as f:
        f.write("".join(line + "\\n" for line in seen))
'''


@pytest.fixture
def cpu_load():
    """A busy-loop process per CPU this test may run on, for the test's duration."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
               for _ in range(len(os.sched_getaffinity(0)))]
    try:
        yield len(burners)
    finally:
        for p in burners:
            p.kill()
            p.wait()


@pytest.fixture
def node(admin_api, plugin_kubeconfig, host_env, k8s_namespace):
    """(scenario 1 with `hotplug` on, the daemon's flags with every feature, the kubelet's
    registry dir, the DRA socket's dir). The node's ResourceSlice, which outlives the
    daemon on purpose, is deleted after the test."""
    link = host_veth(host_env, tb.unique("d"))
    registry = host_env.root / "plugins_registry"
    plugin = host_env.root / "plugins" / dra.DRIVER_NAME
    flags = ("--log-level", "debug", "--max-parallel", "4",
             "--dra", "--dra-registry-dir", str(registry), "--dra-plugin-dir", str(plugin),
             "--dra-interfaces", link, "--dra-devices-per-interface", "2",
             "--dra-generic-devices", "2",
             "--chroot-dir", "/",  # children run by the spawner in the host's root
             "--hotplug-interval", "0.5")
    s = sc.setup(admin_api, plugin_kubeconfig, host_env, k8s_namespace)
    s = dataclasses.replace(s, netconf={**s.netconf, "hotplug": True})
    try:
        yield s, flags, registry, plugin
    finally:
        try:
            k8s.CustomObjectsApi(admin_api).delete_cluster_custom_object(
                "resource.k8s.io", "v1", "resourceslices", SLICE)
        except ApiException as e:
            if e.status != 404:
                raise


def first_callers(d: NodeDaemon, s: sc.Scenario, registry: Path, namespace: str) -> None:
    """What reaches a daemon right after it starts, each answered: the kubelet's plugin
    registration, NodePrepareResources of a claim the API server does not have, a
    /metrics scrape, a CNI STATUS through the shim."""
    wait_socket(registry / dra.REGISTRATION_SOCKET)
    info = register(registry)
    assert (info.type, info.name) == (dra.PLUGIN_TYPE, dra.DRIVER_NAME)
    uid = str(uuid.uuid4())
    with grpc.insecure_channel(f"unix:{info.endpoint}") as ch:
        answer = dra_v1_pb2_grpc.DRAPluginStub(ch).NodePrepareResources(
            dra_v1_pb2.NodePrepareResourcesRequest(claims=[
                dra_v1_pb2.Claim(namespace=namespace, name="nosuchclaim", uid=uid)]),
            timeout=CALL_TIMEOUT).claims
    assert answer[uid].error == (f"ResourceClaim {namespace}/nosuchclaim (UID {uid}) not "
                                 "found in the API server")
    status, metrics = d.endpoint("/metrics")
    assert status == 200 and "\nnetattach_dra_registered 1" in metrics, metrics[-2000:]
    run = s.thick(d).run("STATUS")
    assert run.code == 0 and run.stdout == "", run.stdout + run.stderr + d.log_text()[-3000:]


def stop_cleanly(d: NodeDaemon, registry: Path, plugin: Path) -> None:
    """SIGTERM: exit status 0, its three sockets removed."""
    d.stop()  # hang guard: STOP_TIMEOUT, then SIGKILL and a failure
    assert d.proc is not None and d.proc.returncode == 0, d.stderr_file.read_text()[-3000:]
    for sock in (d.socket_dir / "netattach.sock", registry / dra.REGISTRATION_SOCKET,
                 plugin / dra.DRA_SOCKET):
        assert not sock.exists(), sock


def test_the_daemon_starts_every_time_with_every_feature_under_cpu_load(
        node, daemon_kubeconfig, host_env, k8s_namespace, cpu_load):
    s, flags, registry, plugin = node
    artifact = sc.netattach_command()
    for start in range(1, STARTS + 1):
        try:
            d = NodeDaemon.start(artifact, host_env, daemon_kubeconfig, flags)  # /readyz 200
        except RuntimeError as e:  # it exited, or never became ready (hang guard)
            raise AssertionError(f"start {start} of {STARTS} ({cpu_load} CPUs busy): {e}") \
                from None
        try:
            first_callers(d, s, registry, k8s_namespace)
        finally:
            stop_cleanly(d, registry, plugin)
    log = d.log_text()
    assert log.count("children run in the root / (--chroot-dir)") == STARTS
    assert log.count("the kubelet registered DRA driver") == STARTS
    assert len([line for line in log.splitlines() if line.endswith(" stopped")]) == STARTS
    stderr = d.stderr_file.read_text()  # the log, and what the interpreter would print
    assert "Traceback" not in stderr and " ERROR " not in stderr, stderr[-3000:]


def test_no_thread_but_the_main_one_imports_a_library_at_start(
        node, daemon_kubeconfig, host_env, k8s_namespace, tmp_path):
    """The same start and first callers, then a pod's ADD and DEL, the daemon's code run
    by the virtualenv's interpreter under a tracer of first imports: every module a
    thread of the daemon loads that is not netattach's own was loaded by the main
    thread before it started any (_import_before_threads)."""
    s, flags, registry, plugin = node
    script = tmp_path / "tracer.py"
    script.write_text(TRACER)
    seen = tmp_path / "imports"
    command = tmp_path / "netattach-traced"
    command.write_text(f"#!/bin/sh\nexec {sys.executable} {script} {seen} \"$@\"\n")
    command.chmod(0o755)
    d = NodeDaemon.start(str(command), host_env, daemon_kubeconfig, flags)
    try:
        first_callers(d, s, registry, k8s_namespace)
        pod = s.thick(d)  # and the first ADD and DEL (their netns thread too)
        run = pod.run("ADD")
        assert run.code == 0, run.stdout + d.log_text()[-3000:]
        assert pod.run("DEL").code == 0
        sc.assert_clean(pod)
    finally:
        stop_cleanly(d, registry, plugin)
    imports = [(line.rpartition(" ")[0], line.rpartition(" ")[2])
               for line in seen.read_text().splitlines()]
    assert ("MainThread", "grpc") in imports  # the tracer saw the daemon's imports
    libraries = [(thread, module) for thread, module in imports
                 if thread != "MainThread" and not module.startswith("netattach")]
    assert libraries == [], libraries
