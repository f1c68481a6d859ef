"""Children in another root (`netattach daemon --chroot-dir`, chroot.ChrootExecutor), as
the thick daemon runs them in the host's root: a real root directory, a real network
namespace, real processes exec'd by the spawner, the helper chrooted into that root
(cni/chroot.py).

The root is a temp dir laid out as a merged-/usr host (bin -> usr/bin, var/run ->
../run) with this machine's /usr, /proc, /dev and /run/netns bind-mounted in, and files of
its own: a marker in /etc and the test plugins, which exist nowhere else. The mounts
are made in a mount namespace of the driver process alone (`unshare --mount`, every
mount a slave of this machine's), so they vanish with it and no other test sees them.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from netattach.cni import chroot, invoke
from netattach.cni.errors import CniError
from netattach_testbed import netns as tb

pytestmark = pytest.mark.integration

HANG_SECONDS = 300  # how long the hanging plugin's children sleep unless killed

# Runs in the driver's own mount namespace: mount this machine's /usr (read-only),
# /proc, /dev and the netns dir into the root, then run one child through the executor.
DRIVER = """
import json, subprocess, sys
from netattach.cni import chroot, invoke
from netattach.cni.errors import CniError
spec = json.loads(sys.argv[1])
root = spec["root"]
for src, dst in (("/usr", "usr"), ("/proc", "proc"), ("/dev", "dev"), ("/run/netns", "run/netns")):
    subprocess.run(["mount", "--rbind", src, f"{root}/{dst}"], check=True)
subprocess.run(["mount", "-o", "remount,bind,ro", f"{root}/usr"], check=True)
ex = chroot.ChrootExecutor(root)
try:
    path = ex.find(spec["type"], spec["dirs"])
    out = ex.run(path, "ADD", spec["config"], invoke.PluginEnv(**spec["env"]), spec["timeout"])
    print(json.dumps({"path": path, "result": out}))
except CniError as e:
    print(json.dumps({"error": {"code": e.code, "msg": e.msg, "details": e.details}}))
ex.close()
"""

# Reads a file only the root has, writes a netns-scoped /proc/sys entry of the pod's
# netns as macvlan writes proxy_arp (needs the host's /proc, writable: the root's).
HOSTCHECK = """#!/bin/sh
marker=$(cat /etc/{marker}) || exit 3
nsenter --net="$CNI_NETNS" sh -c "echo 1 > /proc/sys/net/ipv4/conf/$CNI_IFNAME/proxy_arp" \\
  || exit 4
printf '{{"cniVersion":"1.0.0","marker":"%s","proxyArp":"%s"}}\\n' "$marker" \\
  "$(nsenter --net="$CNI_NETNS" cat /proc/sys/net/ipv4/conf/$CNI_IFNAME/proxy_arp)"
"""

# Hangs with two children, one that left the process group (setsid); records the pids
# in the root's /tmp.
HANG = f"""#!/bin/sh
sleep {HANG_SECONDS} &
echo $! >> /tmp/pids
setsid sh -c 'echo $$ >> /tmp/pids; exec sleep {HANG_SECONDS}' &
echo 'waiting forever' >&2
wait
"""


@pytest.fixture
def root(tmp_path) -> tuple[Path, str]:
    """(the root dir, the name of its marker file in /etc): the dirs the driver mounts
    on, the merged-/usr links, and the test plugins under /libexec/cni, reached from
    /opt/cni/bin by absolute links (resolved inside the root, never on this machine)."""
    r = tmp_path / "root"
    for d in ("usr", "proc", "dev", "run/netns", "etc", "tmp", "opt/cni/bin", "libexec/cni"):
        (r / d).mkdir(parents=True)
    for name in ("bin", "sbin", "lib", "lib64"):
        (r / name).symlink_to(f"usr/{name}")
    (r / "var").mkdir()
    (r / "var/run").symlink_to("../run")
    marker = f"netattach-root-marker-{uuid.uuid4().hex[:8]}"
    (r / "etc" / marker).write_text("inside the root\n")
    for name, text in (("hostcheck", HOSTCHECK.format(marker=marker)), ("hang", HANG)):
        (r / "libexec/cni" / name).write_text(text)
        (r / "libexec/cni" / name).chmod(0o755)
        (r / "opt/cni/bin" / name).symlink_to(f"/libexec/cni/{name}")
    assert not Path("/etc", marker).exists() and not Path("/libexec/cni").exists()
    return r, marker


def drive(root: Path, ptype: str, netns: str, timeout: float = 20.0) -> dict:
    """One ADD of plugin `ptype` (binDir /opt/cni/bin inside the root) through
    ChrootExecutor in a mount namespace of its own; the driver's JSON answer."""
    spec = {"root": str(root), "type": ptype, "dirs": ["/opt/cni/bin"],
            "config": {"cniVersion": "1.0.0", "name": "chroot-test", "type": ptype},
            "env": {"container_id": "c1", "netns": tb.netns_path(netns), "ifname": "lo",
                    "path": "/opt/cni/bin"},
            "timeout": timeout}
    p = subprocess.run(["unshare", "--mount", "--propagation", "slave", sys.executable,
                        "-c", DRIVER, json.dumps(spec)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def proxy_arp(netns: str | None) -> str:
    argv = ["cat", "/proc/sys/net/ipv4/conf/lo/proxy_arp"]
    return tb.run(*(["ip", "netns", "exec", netns] if netns else []), *argv).stdout.strip()


def test_child_runs_in_the_root_with_the_hosts_proc(host_env, root):
    """The child reads the root's file, and writes its netns' proxy_arp through the root's
    /proc (as macvlan does); the path it was exec'd as is the one inside the root."""
    r, marker = root
    netns = host_env.new_netns()
    host_before = proxy_arp(None)
    answer = drive(r, "hostcheck", netns)
    assert answer == {"path": "/opt/cni/bin/hostcheck", "result": {
        "cniVersion": "1.0.0", "marker": "inside the root", "proxyArp": "1"}}, answer
    assert proxy_arp(netns) == "1"
    assert proxy_arp(None) == host_before  # the pod's netns only


def _dead(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1].startswith("Z")  # killed, not reaped yet
    except FileNotFoundError:
        return True


def test_hanging_child_in_the_root_is_killed_with_its_tree(host_env, root):
    """The timeout kills the chrooted plugin and every process it started, the one that
    left its process group too (the spawner kills the tree from the root's /proc)."""
    r, _marker = root
    answer = drive(r, "hang", host_env.new_netns(), timeout=1.5)
    err = answer["error"]
    assert err["code"] == 11 and "'hang' timed out after 1.5 seconds" in err["msg"], err
    assert "waiting forever" in err["details"]
    pids = [int(p) for p in (r / "tmp/pids").read_text().split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 60  # a hang guard: they are normally dead already
    while not all(map(_dead, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(map(_dead, pids)), f"children of the plugin survived: {pids}"


def test_plugin_missing_in_the_root_is_not_taken_from_this_machine(host_env, root):
    """`bridge` exists on this machine (/usr/lib/cni) but not under the root's
    /opt/cni/bin: not found, and the error names the root."""
    r, _marker = root
    answer = drive(r, "bridge", host_env.new_netns())
    assert answer["error"]["code"] == 7
    assert f"'bridge' in path [/opt/cni/bin] under the root {r}" in answer["error"]["msg"]


# -- the spawner itself (cni/chroot.py), in the root `/`: its protocol, failures, restart

def _spawner_outcome(spawner, script: str, timeout: float = 20.0, data: bytes = b""):
    return spawner.run(["/bin/sh", "-c", script], {"PATH": "/usr/bin:/bin"}, data, timeout)


def test_spawner_answers_the_childs_output_status_and_stdin():
    spawner = chroot.Spawner("/")
    try:
        out = _spawner_outcome(spawner, "cat; echo oops >&2; exit 3", data=b'{"a":1}')
        assert (out.returncode, out.stdout, out.stderr) == (3, b'{"a":1}', b"oops\n")
        assert spawner.started == 1
    finally:
        spawner.close()


def test_spawner_timeout_and_exec_failure_are_the_process_executors():
    """Past its timeout a child is killed and reported as such (returncode None, which
    exec_plugin makes TryAgain); an executable that is not there is IOFailure (5)."""
    spawner = chroot.Spawner("/")
    try:
        out = _spawner_outcome(spawner, "echo started >&2; exec sleep 60", timeout=0.5)
        assert out.returncode is None and out.stderr == b"started\n"
        with pytest.raises(CniError) as e:
            spawner.run(["/nonexistent/plugin"], {}, b"", 5.0)
        assert e.value.code == 5 and "'plugin'" in e.value.msg, e.value.msg
    finally:
        spawner.close()


def test_spawner_gone_is_started_again_and_its_running_child_fails():
    """The helper killed while a child runs: that child's call fails (999, naming the
    plugin); the next child starts a new helper."""
    spawner = chroot.Spawner("/")
    try:
        spawner.start()
        first = spawner.pid
        failed: list[BaseException] = []

        def call():
            try:
                _spawner_outcome(spawner, "exec sleep 2")
            except BaseException as e:  # noqa: BLE001 (handed to the test)
                failed.append(e)
        t = threading.Thread(target=call)
        t.start()
        deadline = time.monotonic() + 60
        while not invoke._descendants(first) and time.monotonic() < deadline:
            time.sleep(0.02)  # until the helper runs the child
        os.kill(first, signal.SIGKILL)
        t.join(30)
        assert len(failed) == 1 and isinstance(failed[0], CniError), failed
        assert failed[0].code == 999 and "'sh'" in failed[0].msg and "ended" in failed[0].msg
        out = _spawner_outcome(spawner, "echo again")
        assert out.returncode == 0 and out.stdout == b"again\n"
        assert spawner.started == 2 and spawner.pid != first
    finally:
        spawner.close()


def test_spawner_ends_when_the_daemon_closes_it():
    """And no child runs through it after (a worker still busy when the daemon stops)."""
    spawner = chroot.Spawner("/")
    spawner.start()
    pid = spawner.pid
    spawner.close()
    assert _dead(pid)
    with pytest.raises(CniError) as e:
        _spawner_outcome(spawner, "echo late")
    assert e.value.code == 5 and "stopping" in e.value.msg, e.value.msg
    assert spawner.started == 1


def test_spawner_ends_when_closed_after_serving_children(tmp_path):
    """Its worker threads wait for the next child once theirs is done (chroot._Workers):
    the daemon's close ends the waiting ones, and a child still running is answered
    before the helper ends."""
    from concurrent.futures import ThreadPoolExecutor
    spawner = chroot.Spawner("/")
    marker = tmp_path / "running"
    with ThreadPoolExecutor(3) as pool:
        try:
            for _ in range(3):  # one after another: one worker, waiting after each
                assert _spawner_outcome(spawner, "echo one").stdout == b"one\n"
            outs = list(pool.map(lambda _: _spawner_outcome(spawner, "sleep 0.2; echo many"),
                                 range(3)))  # at once: more workers, all waiting after
            assert [o.stdout for o in outs] == [b"many\n"] * 3
            last = pool.submit(_spawner_outcome, spawner, f"touch {marker}; sleep 1; echo last")
            deadline = time.monotonic() + 30
            while not marker.exists():  # hang guard only: the child is running once it exists
                assert time.monotonic() < deadline and not last.done(), "the child never ran"
                time.sleep(0.01)
            pid = spawner.pid
        finally:
            spawner.close()
        assert last.result(30).stdout == b"last\n"
    assert _dead(pid)
    assert spawner.started == 1


def test_spawner_refuses_a_root_without_its_proc(tmp_path):
    """A root whose /proc is not the daemon's (here: none) would leave a timed-out tree
    unkillable: the helper says so and exits, the daemon's start fails with that reason,
    and so does each child's call (IOFailure 5)."""
    empty = tmp_path / "empty"
    empty.mkdir()
    spawner = chroot.Spawner(str(empty))
    try:
        with pytest.raises(OSError) as e:
            spawner.start()
        assert "proc is not the /proc of the daemon's PID namespace" in str(e.value)
        with pytest.raises(CniError) as c:
            spawner.run(["/opt/cni/bin/bridge"], {}, b"{}", 5.0)
        assert c.value.code == 5 and "hostPID" in c.value.msg, c.value.msg
        assert spawner.started == 0
    finally:
        spawner.close()


# In a mount namespace of its own: a root holding nothing but this machine's /proc.
EMPTY_ROOT_DRIVER = """
import json, subprocess, sys
from netattach.cni import chroot
from netattach.cni.errors import CniError
root = sys.argv[1]
subprocess.run(["mount", "--rbind", "/proc", f"{root}/proc"], check=True)
spawner = chroot.Spawner(root)
answers = []
for _ in range(2):  # the second on a helper that has served one already
    try:
        spawner.run(["/opt/cni/bin/bridge"], {}, b"{}", 5.0)
        answers.append(None)
    except CniError as e:
        answers.append({"code": e.code, "msg": e.msg})
answers.append(spawner.started)
spawner.close()
print(json.dumps(answers))
"""


def test_spawner_needs_nothing_of_the_root_but_its_proc_and_the_child(tmp_path):
    """The helper imports all it runs before it chroots: in a root holding only /proc it
    still receives the request, tries the exec and answers why it failed (IOFailure 5,
    the exec's own error), rather than failing on a module it cannot load there."""
    root = tmp_path / "bare"
    (root / "proc").mkdir(parents=True)
    p = subprocess.run(["unshare", "--mount", "--propagation", "slave", sys.executable,
                        "-c", EMPTY_ROOT_DRIVER, str(root)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    *errors, started = json.loads(p.stdout)
    for err in errors:
        assert err["code"] == 5, err
        assert err["msg"].startswith("cannot execute plugin 'bridge'") and \
            "No such file" in err["msg"], err
    assert started == 1


# A helper that answers every child with a header promising more stdout than follows:
# what a helper killed in the middle of its answer leaves.
CUT_SHORT_HELPER = """
import json, socket, struct, sys
control = socket.socket(fileno=int(sys.argv[sys.argv.index("--fd") + 1]))
control.sendall(b"ready\\n")
while True:
    msg, fds, _, _ = socket.recv_fds(control, 1, 4)
    if not msg:
        break
    for fd in fds:
        with socket.socket(fileno=fd) as conn:
            while conn.recv(65536):
                pass
            head = json.dumps({"returncode": 0, "elapsed": 0.1, "stdout": 10,
                               "stderr": 0}).encode()
            conn.sendall(struct.pack(">I", len(head)) + head + b"{}")
"""


def test_an_answer_cut_short_is_not_taken_for_the_childs_output():
    spawner = chroot.Spawner("/", helper_argv=[sys.executable, "-c", CUT_SHORT_HELPER])
    try:
        with pytest.raises(CniError) as e:
            _spawner_outcome(spawner, "true")
        assert e.value.code == 999 and "outcome is unknown" in e.value.msg, e.value.msg
    finally:
        spawner.close()
