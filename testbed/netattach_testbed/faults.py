"""Fault-injecting CNI plugins for the failure-mode tests, and the probes those tests need.

A fault plugin is a small POSIX sh script written into a test's bin dir. It runs a
real plugin (the reference `bridge` by default) for every command, so it really
creates an interface and allocates an address from host-local; then, on ADD only, it
misbehaves in one of the ways of FAULTS. Every call is appended to a calls file
(`<pid> <ppid> <command> <ifname>`), and the real plugin's ADD output is kept, so a
test can prove what ran and what was allocated. Nothing in netattach knows about
these scripts: the faults come from outside, as they would on a node.
"""
from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .scenario import DEBIAN_CNI_DIR

HANG_SECONDS = 300  # how long a "hang" fault's processes live unless killed

# What the script does on ADD after the real plugin succeeded; @fields@ are filled in.
FAULTS = {
    # a CNI error object, exit 1: a child that fails after allocating
    "fail": 'printf \'{"cniVersion":"1.0.0","code":110,"msg":"%s"}\\n\' "@message@"\nexit 1',
    # a crash: killed by a signal, no output
    "segv": "ulimit -c 0\nkill -SEGV $$\nexit 99",
    "sigkill": "kill -KILL $$\nexit 99",
    # a hang: two grandchildren, one in our process group and one that left it with
    # setsid, then wait forever; every pid is recorded for the test to check
    "hang": ("echo $$ >> @pids@\n"
             f"sleep {HANG_SECONDS} &\necho $! >> @pids@\n"
             f"setsid sh -c 'echo $$ >> @pids@; exec sleep {HANG_SECONDS}' &\n"
             "wait\nexit 99"),
    # SIGKILL the parent after the real work, refusing if the parent is not netattach
    "kill-parent": ('parent=$(readlink /proc/$PPID/exe)\n'
                    'if [ "$parent" != "@parent_exe@" ]; then\n'
                    '  printf \'{"cniVersion":"1.0.0","code":111,"msg":"parent %s is %s, not '
                    'netattach"}\\n\' "$PPID" "$parent"; exit 1\nfi\n'
                    "echo $PPID >> @pids@\nkill -KILL $PPID\n"
                    'printf \'%s\\n\' "$out"\nexit 0'),
    # SIGSTOP the API server, then return the real result: netattach's next request hangs
    "stop-apiserver": 'kill -STOP @apiserver_pid@\nprintf \'%s\\n\' "$out"\nexit 0',
    # no fault: a recording wrapper only
    "none": 'printf \'%s\\n\' "$out"\nexit 0',
    # held: after the real work, record its pid and return the real result only once the
    # test removed the file @gate@ (at once when there is none): a slow child that the
    # test, not a clock, ends
    "hold": ("echo $$ >> @pids@\n"
             "while [ -e @gate@ ]; do sleep 0.05; done\n"
             'printf \'%s\\n\' "$out"\nexit 0'),
}

SCRIPT = """#!/bin/sh
# netattach test plugin "@name@": runs @real@, then on ADD injects fault "@fault@".
echo "$$ $PPID $CNI_COMMAND ${CNI_IFNAME:--}" >> @calls@
out=$(@real@)
rc=$?
if [ "$CNI_COMMAND" != ADD ] || [ $rc -ne 0 ]; then
  [ -n "$out" ] && printf '%s\\n' "$out"
  exit $rc
fi
printf '%s\\n' "$out" > @result@
@action@
"""


@dataclass
class FaultPlugin:
    """One fault plugin: `name` is its CNI type; `calls`, `result` and `pids` are the
    files it writes (calls made, the real plugin's ADD result, pids of its hang, its
    parent or its held calls); `gate`, the file that holds "hold" while it exists."""
    name: str
    path: Path
    calls: Path
    result: Path
    pids: Path
    gate: Path

    def invocations(self) -> list[tuple[str, str]]:
        """(command, ifname) of every call so far, in order."""
        if not self.calls.exists():
            return []
        return [tuple(line.split()[2:4]) for line in self.calls.read_text().splitlines()]

    def call_pids(self) -> list[int]:
        """The plugin's own pid in each call so far, in order."""
        if not self.calls.exists():
            return []
        return [int(line.split()[0]) for line in self.calls.read_text().splitlines()]

    def recorded_pids(self) -> list[int]:
        """The pids the fault wrote: the hung processes, or the parent it killed."""
        return [int(x) for x in self.pids.read_text().split()] if self.pids.exists() else []


def _fill(template: str, **values: object) -> str:
    for key, value in values.items():
        template = template.replace(f"@{key}@", str(value))
    return template


def install(bin_dir: Path, fault: str, *, name: str | None = None,
            real: str = os.path.join(DEBIAN_CNI_DIR, "bridge"), message: str = "",
            parent_exe: str = "", apiserver_pid: int = 0, gate: Path | None = None
            ) -> FaultPlugin:
    """Write fault plugin `fault` (a key of FAULTS) into `bin_dir` as `name`
    (default "fault-<fault>"); its record files go beside bin_dir in `<name>.d/`.

    message: the error text of "fail"; parent_exe: the executable "kill-parent" insists
    its parent runs; apiserver_pid: the process "stop-apiserver" stops; gate: the file
    whose removal lets "hold" return (default `<name>.d/gate`, FaultPlugin.gate).
    """
    name = name or f"fault-{fault}"
    records = bin_dir.parent / f"{name}.d"
    records.mkdir(exist_ok=True)
    plugin = FaultPlugin(name, bin_dir / name, records / "calls", records / "result.json",
                         records / "pids", gate or records / "gate")
    action = _fill(FAULTS[fault], message=message, pids=plugin.pids, parent_exe=parent_exe,
                   apiserver_pid=apiserver_pid, gate=plugin.gate)
    plugin.path.write_text(_fill(SCRIPT, name=name, real=real, fault=fault, calls=plugin.calls,
                                 result=plugin.result, action=action))
    plugin.path.chmod(0o755)
    return plugin


def process_state(pid: int) -> str | None:
    """The state letter of `pid` from /proc (R, S, T, Z...), None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text[text.rindex(")") + 2:].split()[0]


def alive(pid: int) -> bool:
    """True unless `pid` is gone or a zombie (dead, not yet reaped by its new parent)."""
    return process_state(pid) not in (None, "Z")


def wait_for(what: str, predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    """Poll `predicate` every 20 ms; AssertionError naming `what` after `timeout` s.

    The timeout is a hang guard, not a claim about speed: it ends a test whose awaited
    event never comes, and must not end one whose event comes late because the machine
    is loaded (issue 9, defect 11). A wait returns as soon as the predicate holds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.02)


def tcp_peers(pid: int) -> set[int]:
    """Remote ports of the established IPv4/IPv6 TCP connections that `pid` holds."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "01" and fields[9] in inodes:  # 01: ESTABLISHED
                ports.add(int(fields[2].rsplit(":", 1)[1], 16))
    return ports


def apiserver_pid(cluster) -> int:
    """The pid of the test cluster's kube-apiserver (testbed/netattach_testbed/cluster.py starts it
    through `setpriv`, which execs, so the Popen pid is the server's)."""
    proc = cluster._apiserver.popen
    assert proc is not None and proc.poll() is None, "kube-apiserver is not running"
    exe = os.readlink(f"/proc/{proc.pid}/exe")
    assert os.path.basename(exe) == "kube-apiserver", f"pid {proc.pid} runs {exe}"
    return proc.pid


@contextmanager
def apiserver_frozen(cluster, *, stop: bool = True) -> Iterator[int]:
    """Run the block with kube-apiserver SIGSTOPped: the kernel still accepts
    connections, no request is answered. `stop=False` when something in the block
    (a "stop-apiserver" plugin) stops it. SIGCONT on the way out, whatever happened.
    Yields the server's pid."""
    pid = apiserver_pid(cluster)
    try:
        if stop:
            os.kill(pid, signal.SIGSTOP)
        yield pid
    finally:
        os.kill(pid, signal.SIGCONT)
