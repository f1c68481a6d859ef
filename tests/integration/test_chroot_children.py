"""Children in another root (`netattach daemon --chroot-dir`, invoke.ChrootExecutor), as
the thick daemon runs them in the host's root: a real root directory, a real network
namespace, real processes exec'd through /usr/sbin/chroot.

The root is a temp dir laid out as a merged-/usr host (bin -> usr/bin, var/run ->
../run) with this machine's /usr, /proc, /dev and /run/netns bind-mounted in, and files of
its own: a marker in /etc and the test plugins, which exist nowhere else. The mounts
are made in a mount namespace of the driver process alone (`unshare --mount`, every
mount a slave of this machine's), so they vanish with it and no other test sees them.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from netattach_testbed import netns as tb

pytestmark = pytest.mark.integration

HANG_SECONDS = 300  # how long the hanging plugin's children sleep unless killed

# Runs in the driver's own mount namespace: mount this machine's /usr (read-only),
# /proc, /dev and the netns dir into the root, then run one child through the executor.
DRIVER = """
import json, subprocess, sys
from netattach.cni import invoke
from netattach.cni.errors import CniError
spec = json.loads(sys.argv[1])
root = spec["root"]
for src, dst in (("/usr", "usr"), ("/proc", "proc"), ("/dev", "dev"), ("/run/netns", "run/netns")):
    subprocess.run(["mount", "--rbind", src, f"{root}/{dst}"], check=True)
subprocess.run(["mount", "-o", "remount,bind,ro", f"{root}/usr"], check=True)
ex = invoke.ChrootExecutor(root)
try:
    path = ex.find(spec["type"], spec["dirs"])
    out = ex.run(path, "ADD", spec["config"], invoke.PluginEnv(**spec["env"]), spec["timeout"])
    print(json.dumps({"path": path, "result": out}))
except CniError as e:
    print(json.dumps({"error": {"code": e.code, "msg": e.msg, "details": e.details}}))
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
    left its process group too (chroot(8) execs the plugin: the same process)."""
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
