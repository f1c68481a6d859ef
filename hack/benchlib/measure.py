"""What the bench measures with: one exec'd command (wall time, and the CPU of its process
tree through wait4), the peak RSS of one (GNU time), a running daemon's CPU and RSS
from /proc, the statistics (median, p90, a least-squares line), and the machine it ran
on (every bench's header)."""
from __future__ import annotations

import datetime as dt
import os
import platform
import signal
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass

EXEC_TIMEOUT = 120.0  # hang guard per exec'd command; never a pass/fail limit
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Exec:
    """One command (or several run one after the other, `Exec.chain`) as a runtime sees
    it: exit code, output, wall time (s), CPU (user + system, s) of its process tree
    (everything it waited for), and when it ran (epoch s)."""
    code: int
    stdout: str
    stderr: str
    wall: float
    cpu: float
    started: float
    ended: float

    @staticmethod
    def chain(runs: list[Exec]) -> Exec:
        """Commands run one after the other, as one: codes (first failure), output
        joined, walls and CPU added."""
        failed = [r for r in runs if r.code != 0]
        return Exec(code=failed[0].code if failed else 0,
                    stdout="".join(r.stdout for r in runs),
                    stderr="".join(r.stderr for r in runs),
                    wall=sum(r.wall for r in runs), cpu=sum(r.cpu for r in runs),
                    started=runs[0].started, ended=runs[-1].ended)


def spawn(argv: list[str], env: dict[str, str], stdin: bytes = b"") -> Exec:
    """Exec `argv` with `env`, `stdin` on its standard input, and wait for it with wait4,
    whose rusage covers the process and every descendant it waited for. The wall time is
    from just before the spawn to the reaping, as a runtime waits for a plugin."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        r, w = os.pipe()
        try:
            os.write(w, stdin)  # a CNI config fits the pipe's buffer
        finally:
            os.close(w)
        try:
            started = time.time()
            t0 = time.monotonic()
            pid = os.posix_spawn(argv[0], argv, env, file_actions=[
                (os.POSIX_SPAWN_DUP2, r, 0), (os.POSIX_SPAWN_DUP2, out.fileno(), 1),
                (os.POSIX_SPAWN_DUP2, err.fileno(), 2)])
        finally:
            os.close(r)
        guard = threading.Timer(EXEC_TIMEOUT, _kill, (pid,))
        guard.start()
        try:
            _, status, usage = os.wait4(pid, 0)
        finally:
            guard.cancel()
        wall = time.monotonic() - t0
        ended = time.time()
        out.seek(0)
        err.seek(0)
        return Exec(code=os.waitstatus_to_exitcode(status),
                    stdout=out.read().decode(errors="replace"),
                    stderr=err.read().decode(errors="replace"), wall=wall,
                    cpu=usage.ru_utime + usage.ru_stime, started=started, ended=ended)


class PeakRss:
    """The peak RSS of exec'd commands, by GNU time: `prefix` goes before a command's argv,
    `kib()` is the largest peak of the commands run so far.

    wait4's ru_maxrss of a process spawned here would not do: a process's peak counts
    the memory of the one that forked it, as it was when the child exec'd (the
    kernel keeps the larger of the two), and the bench's interpreter holds ~90 MiB.
    GNU time is small, so its child starts small."""

    TIME = "/usr/bin/time"

    def __init__(self, path: str):
        self.path = path
        self.prefix = [self.TIME, "--append", "--format=%M", f"--output={path}"]

    def kib(self) -> int:
        return max(int(line) for line in open(self.path).read().split())


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) of a running process and of the children it reaped
    (a daemon's exec'd plugins), from /proc/<pid>/stat."""
    text = open(f"/proc/{pid}/stat").read()
    fields = text[text.rindex(")") + 2:].split()
    # fields[0] is field 3 (state): utime, stime, cutime, cstime are fields 14-17
    return sum(int(f) for f in fields[11:15]) / CLOCK_TICKS


def proc_rss_kib(pid: int) -> int:
    """Resident set size (KiB) of a running process (VmRSS)."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def settled_rss_kib(pid: int, quiet: float = 3.0, limit: float = 60.0) -> int:
    """The RSS of `pid` once it stopped changing by more than 1 % for `quiet` s (a daemon
    done filling its caches), sampled every 0.5 s, at most `limit` s."""
    deadline = time.monotonic() + limit
    last, since = proc_rss_kib(pid), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = proc_rss_kib(pid)
        if abs(now - last) > last / 100:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
    return proc_rss_kib(pid)


def median(values: list[float]) -> float:
    return statistics.median(values)


def p90(values: list[float]) -> float:
    """The 90th percentile, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]


def line_fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares line through (x, y) points: (intercept, slope)."""
    slope, intercept = statistics.linear_regression([x for x, _ in points],
                                                    [y for _, y in points])
    return intercept, slope


def machine() -> dict[str, str]:
    """The machine a bench ran on, for its header and JSON: CPUs it may use (as `nproc`
    counts them), CPU model, memory (GiB), kernel, architecture, Python, the date (UTC)."""
    models = [line.split(":", 1)[1].strip() for line in
              open("/proc/cpuinfo").read().splitlines() if line.startswith("model name")]
    with open("/proc/meminfo") as f:
        mem_gib = int(f.read().split()[1]) // 1024 // 1024
    return {"nproc": str(len(os.sched_getaffinity(0))),
            "cpu": models[0] if models else platform.processor(),
            "mem_gib": str(mem_gib),
            "kernel": f"{platform.system()} {platform.release()}", "arch": platform.machine(),
            "python": platform.python_version(),
            "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")}


def machine_text(m: dict[str, str]) -> str:
    """`machine()` in one line: "2 CPUs (model), 23 GiB, Linux 6.18.44"."""
    return f"{m['nproc']} CPUs ({m['cpu']}), {m['mem_gib']} GiB, {m['kernel']}"
