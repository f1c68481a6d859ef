"""Children in another root: the thick daemon's `--chroot-dir` (ChrootExecutor), run by a
helper process already in that root, the spawner (Spawner; `netattach spawner`).

Why a helper. Running each child as `chroot(8) <root> <plugin>` from the daemon held
the daemon's GIL while each child started: CPython before 3.12 (the image's 3.11) holds
it across vfork() until the child execs (cpython gh-104372), and on the loaded real node
that window was 27 % of the daemon's GIL-held time (`_posixsubprocess.fork_exec`),
every other thread (watches, other calls) waiting; an exec stuck on a slow filesystem
would have stopped them all. The helper chroots itself once, when it starts, and execs
each plugin directly; the daemon only moves bytes over a unix socket, its GIL released
while it waits. (The extra exec of chroot(8), about 0.6 ms of CPU a child, is gone, but
the helper's own Python work per child costs about as much: docs/bench-node.md.)

Protocol. The daemon starts the helper (`netattach spawner --root R --fd N`: SUBCOMMAND)
with one end of a unix socket pair, the control socket, and waits for its first line:
READY once it is in the root and the root's /proc is its own (the kill of a timed-out
tree reads it: the daemon needs hostPID), else why not, which the daemon reports (it
does not start; later, the child's call fails with IOFailure 5). For each child it
makes a new socket pair, passes one end over the control socket (SCM_RIGHTS, with one
byte), writes the request on its own end and shuts down its sending side:

    request  = u32 length, JSON {"argv": [...], "env": {...}, "timeout": seconds}, stdin
    answer   = u32 length, JSON {"returncode": int | null (timed out, tree killed),
               "elapsed": seconds, "stdout": length, "stderr": length} or {"error": why
               it cannot be executed, "details": ...}, then stdout, then stderr

(u32: big-endian). The helper serves each connection in a thread of its own with
invoke.run_child (its timeout and kill-the-whole-tree rules), answers and closes it; a
thread that is done waits for the next connection (up to IDLE_WORKERS of them wait)
rather than a new thread being started for each child (_Workers). It ends when the
control socket reaches end of file (the daemon closed it, or died), once its children
are done. When the helper is found gone, or does not take a connection within
SEND_TIMEOUT (then it is killed), the next child starts a new one; a child whose whole
answer did not come (the helper died while it ran) is reported as a ChildError 999.

Imported by the daemon and by the helper only (never on the exec'd CNI path); the helper
imports everything it runs before it chroots, since nothing of the image is visible
after.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import queue
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from .errors import INTERNAL, ChildError, CniError, ConfigError, IOFailure, TryAgain
from .invoke import (
    ChildOutcome,
    PluginEnv,
    check_plugin_type,
    exec_plugin,
    meta_plugin_paths,
    refuse_meta_plugin,
    resolve_in_root,
    run_child,
)

log = logging.getLogger("netattach.spawner")

SUBCOMMAND = "spawner"
"""The CLI subcommand that runs the helper (cli.SUBCOMMANDS)."""
START_TIMEOUT = 60.0
"""Seconds a starting helper has to say it is in the root (READY): the bundle's start,
under load."""
SEND_TIMEOUT = 10.0
"""Seconds the daemon waits to pass a child's connection to the helper: one that does
not read its control socket that long is killed and started again."""
READY = b"ready"
"""The helper's first line on the control socket once it serves; any other line is why
it cannot."""
ANSWER_GRACE = 15.0
"""Seconds the daemon waits for an answer beyond the child's own timeout: the helper's
kill of a timed-out tree and its wait for the pipes (run_child: up to 5 s) come first."""
IDLE_WORKERS = 16
"""Threads of the helper kept waiting for the next child once theirs is done (_Workers):
more than the children of one pod, fewer than the node daemon's calls at once."""
_LENGTH = struct.Struct(">I")


def _read_to_end(conn: socket.socket) -> bytes:
    chunks = []
    while chunk := conn.recv(1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _read_line(conn: socket.socket, limit: int = 4096) -> bytes:
    """One line (without its newline) read from `conn`; what came before end of file."""
    data = b""
    while b"\n" not in data and len(data) < limit:
        chunk = conn.recv(limit)
        if not chunk:
            break
        data += chunk
    return data.split(b"\n", 1)[0]


def _frame(header: dict[str, Any], *parts: bytes) -> bytes:
    head = json.dumps(header, separators=(",", ":")).encode()
    return b"".join((_LENGTH.pack(len(head)), head, *parts))


def _unframe(raw: bytes) -> tuple[dict[str, Any], bytes]:
    """(header, the bytes after it) of a request or an answer; ValueError if cut short."""
    if len(raw) < _LENGTH.size:
        raise ValueError("no header")
    (size,) = _LENGTH.unpack_from(raw)
    end = _LENGTH.size + size
    if len(raw) < end:
        raise ValueError("header cut short")
    header = json.loads(raw[_LENGTH.size:end])
    if not isinstance(header, dict):
        raise ValueError("header is not an object")
    return header, raw[end:]


class Spawner:
    """The daemon's side: starts the helper in `root` and runs children through it
    (`run`, invoke.exec_plugin's runner). Thread-safe. `helper_argv`: how to start the
    helper (default: this executable's `spawner` subcommand, `helper_command`)."""

    def __init__(self, root: str, helper_argv: list[str] | None = None):
        self.root = root
        self.helper_argv = helper_argv or helper_command()
        self.started = 0
        """Helpers started (1, plus one per restart after a helper was found gone)."""
        self._lock = threading.Lock()
        self._control: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._closed = False

    @property
    def pid(self) -> int | None:
        """The helper's process ID (None before it started)."""
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        """Start the helper unless it runs, and wait until it is in the root (READY).
        Raises OSError when it cannot be executed or says why it cannot serve (it
        cannot chroot, or the root's /proc is not its own: `serve`)."""
        with self._lock:
            self._start_locked()

    def _start_locked(self) -> None:
        if self._closed:
            raise OSError("the daemon is stopping: the spawner was closed")
        if self._proc is not None and self._proc.poll() is None and self._control is not None:
            return
        self._close_locked(kill=True)
        mine, theirs = socket.socketpair()
        try:
            proc = subprocess.Popen(
                [*self.helper_argv, "--root", self.root, "--fd", str(theirs.fileno())],
                stdin=subprocess.DEVNULL, pass_fds=(theirs.fileno(),), close_fds=True)
        except OSError:
            mine.close()
            raise
        finally:
            theirs.close()
        try:
            mine.settimeout(START_TIMEOUT)
            said = _read_line(mine)
        except OSError as e:
            said = f"no answer ({e})".encode()
        if said != READY:
            mine.close()
            proc.kill()
            proc.wait()
            raise OSError(f"the spawner in {self.root} did not start: "
                          f"{said.decode('utf-8', 'replace') or 'it exited'}")
        mine.settimeout(SEND_TIMEOUT)
        self._proc, self._control = proc, mine
        self.started += 1
        if self.started > 1:
            log.warning("the spawner (the helper that runs children in %s) was gone; "
                        "started it again (pid %d)", self.root, proc.pid)

    def _close_locked(self, kill: bool) -> None:
        """Drop the helper: close the control socket, and reap it, killed first when
        `kill` and it still runs (it stopped taking children)."""
        if self._control is not None:
            self._control.close()
            self._control = None
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None and kill:
            log.warning("the spawner (pid %d) does not take children any more: killed",
                        proc.pid)
            proc.kill()
            proc.wait()

    def close(self, timeout: float = 10.0) -> None:
        """Close the control socket; the helper ends once its children are done (waited
        for up to `timeout` s, then left). No child runs through this Spawner after."""
        with self._lock:
            self._closed = True
            proc = self._proc
            self._close_locked(kill=False)
        if proc is not None:
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                log.warning("the spawner (pid %d) still runs children %g s after the "
                            "daemon closed it", proc.pid, timeout)

    def _hand_over(self, conn: socket.socket) -> None:
        """Pass `conn` to the helper, starting it (again) when it is gone or does not
        take it within SEND_TIMEOUT."""
        with self._lock:
            for attempt in (1, 2):
                self._start_locked()
                assert self._control is not None
                try:
                    socket.send_fds(self._control, [b"\0"], [conn.fileno()])
                    return
                except OSError:
                    if attempt == 2:
                        raise
                    self._close_locked(kill=True)

    def run(self, argv: list[str], environ: dict[str, str], data: bytes,
            timeout: float) -> ChildOutcome:
        """invoke.run_child's contract, the child run by the helper in the root. Raises
        IOFailure (5) when argv[0] cannot be executed or the helper cannot be started
        (the reason it gave), ChildError 999 when the helper ended while the child ran
        (no whole answer), TryAgain (11) when the helper did not answer within the
        child's timeout and ANSWER_GRACE."""
        name = os.path.basename(argv[0])
        mine, theirs = socket.socketpair()
        with mine:
            try:
                with theirs:
                    self._hand_over(theirs)
            except OSError as e:
                raise IOFailure(f"cannot execute plugin {name!r}: the spawner in {self.root} "
                                f"cannot be started or reached: {e}", " ".join(argv)) from None
            mine.settimeout(timeout + ANSWER_GRACE)
            try:
                mine.sendall(_frame({"argv": argv, "env": environ, "timeout": timeout}, data))
                mine.shutdown(socket.SHUT_WR)
                raw = _read_to_end(mine)
            except TimeoutError:
                raise TryAgain(f"plugin {name!r}: the spawner did not answer within "
                               f"{timeout + ANSWER_GRACE:g} seconds") from None
            except OSError as e:
                raw = b""
                log.warning("plugin %s: the spawner's connection failed: %s", name, e)
        try:
            answer, rest = _unframe(raw)
            if "error" in answer:
                raise IOFailure(str(answer["error"]), str(answer.get("details", "")))
            out, err = int(answer["stdout"]), int(answer["stderr"])
            if len(rest) != out + err:
                raise ValueError("answer cut short")
        except (ValueError, KeyError, TypeError):
            raise ChildError(INTERNAL, f"plugin {name!r}: the spawner (the daemon's helper "
                             f"in {self.root}) ended while it ran; its outcome is unknown",
                             "", plugin=name, stderr="") from None
        return ChildOutcome(answer["returncode"], rest[:out], rest[out:],
                            float(answer["elapsed"]))


class ChrootExecutor:
    """The executor of real plugin executables inside another root directory: the thick
    daemon's with `--chroot-dir` (the host's `/` mounted in its container), so children
    run as the runtime runs them on the host, with the host's files, tools and /proc
    (Multus thick mode's `chrootDir`).

    find: `<dir>/<type>` for each dir (paths as seen inside the root), resolved in the
    root (resolve_in_root: no symlink leads out of it), the first that is a regular
    executable file; returns that path *inside* the root. run: exec_plugin with the
    Spawner as its runner (module doc): the plugin exec'd by the helper already in the
    root, with the same timeout and kill-the-whole-tree rules. `spawner`: the helper's
    client (default: one for `root`, its helper started on the first child or
    `start()`).
    """

    META_PATHS_SECONDS = 1.0
    """How long the meta-plugins' paths resolved in the root for one list of dirs are
    reused (`_meta_paths`). Resolving them walks every component of every
    META_PLUGIN_TYPES name in every dir with lstat, hundreds of calls per pod, for files
    only the node's admin installs; each check still stats the paths it compares."""
    META_PATHS_KEPT = 16
    """Lists of dirs whose meta-plugin paths are kept (the runtime's CNI_PATH and the
    conf's binDir make one or two)."""

    def __init__(self, root: str, clock: Callable[[], float] = time.monotonic,
                 spawner: Spawner | None = None):
        self.root = os.path.abspath(root)
        self.clock = clock
        self.spawner = spawner or Spawner(self.root)
        self._meta: dict[tuple[str, ...], tuple[float, list[str]]] = {}
        self._meta_lock = threading.Lock()

    def problem(self) -> str | None:
        """None when children can run in the root, else why not (it is not a directory)."""
        if not os.path.isdir(self.root):
            return f"the root {self.root} is not a directory"
        return None

    def start(self) -> None:
        """Start the helper now rather than on the first child (Spawner.start)."""
        self.spawner.start()

    def close(self) -> None:
        """Spawner.close: the helper ends once its children are done."""
        self.spawner.close()

    def find(self, plugin_type: str, dirs: Sequence[str]) -> str:
        """find_plugin's contract, inside the root; the error also names the root."""
        check_plugin_type(plugin_type)
        for d in dirs:
            if not d:
                continue
            candidate = os.path.join("/", d, plugin_type)
            inside = resolve_in_root(self.root, candidate)
            if inside is None:
                continue
            here = os.path.join(self.root, inside.lstrip("/"))
            if os.path.isfile(here) and os.access(here, os.X_OK):
                self._refuse_meta_plugin(plugin_type, here, dirs)
                return candidate
        raise ConfigError(f"failed to find plugin {plugin_type!r} in path "
                          f"[{', '.join(d for d in dirs if d)}] under the root {self.root}")

    def _refuse_meta_plugin(self, plugin_type: str, here: str, dirs: Sequence[str]) -> None:
        """refuse_meta_plugin inside the root: the file `here` (a path here) against the
        meta-plugins' paths in `dirs`, each resolved in the root."""
        refuse_meta_plugin(plugin_type, here, self._meta_paths(dirs))

    def _meta_paths(self, dirs: Sequence[str]) -> list[str]:
        """The meta-plugins' paths in `dirs` (meta_plugin_paths) that resolve in the root,
        as paths here; resolved again once META_PATHS_SECONDS have passed since the last
        resolution for the same dirs. Thread-safe."""
        key = tuple(dirs)
        now = self.clock()
        with self._meta_lock:
            hit = self._meta.get(key)
        if hit is not None and now - hit[0] < self.META_PATHS_SECONDS:
            return hit[1]
        inside = (resolve_in_root(self.root, p) for p in meta_plugin_paths(dirs))
        paths = [os.path.join(self.root, p.lstrip("/")) for p in inside if p is not None]
        with self._meta_lock:
            if len(self._meta) >= self.META_PATHS_KEPT:
                self._meta.clear()
            self._meta[key] = (now, paths)
        return paths

    def run(self, path: str, command: str, config: dict[str, Any], env: PluginEnv,
            timeout: float) -> dict[str, Any] | None:
        return exec_plugin(path, command, config, env, timeout, runner=self.spawner.run)


def helper_command() -> list[str]:
    """argv that starts the helper: the built executable's subcommand, else this
    interpreter running netattach's CLI."""
    if getattr(sys, "frozen", False):
        return [sys.executable, SUBCOMMAND]
    return [sys.executable, "-c", "import sys; from netattach.cli import main; "
            "main(sys.argv[1:])", SUBCOMMAND]


def _serve_one(conn: socket.socket) -> None:
    """One child: read its request to the end, run it, answer (helper side)."""
    with conn:
        try:
            request, data = _unframe(_read_to_end(conn))
            outcome = run_child(list(request["argv"]), dict(request["env"]), data,
                                float(request["timeout"]))
            answer = _frame({"returncode": outcome.returncode, "elapsed": outcome.elapsed,
                             "stdout": len(outcome.stdout), "stderr": len(outcome.stderr)},
                            outcome.stdout, outcome.stderr)
        except CniError as e:  # IOFailure: argv[0] cannot be executed
            answer = _frame({"error": e.msg, "details": e.details})
        except Exception as e:  # a bug: answered, so the daemon's call fails now
            answer = _frame({"error": f"the spawner failed: {type(e).__name__}: {e}"})
        try:
            conn.sendall(answer)
        except OSError:
            pass  # the daemon gave up waiting


class _Workers:
    """The helper's threads, each serving one child's connection at a time (_serve_one).
    A connection goes to a thread waiting for one, else to a new thread; a thread that is
    done waits for the next while fewer than `keep` wait, else ends. Starting a thread
    per child cost about a quarter of the helper's CPU per child (0.80-0.82 against
    0.59-0.66 ms; docs/architecture.md).
    `close` ends the waiting threads; the busy ones end when their child is done.
    `serve_one`: what serves a connection (_serve_one; a stand-in in unit tests)."""

    def __init__(self, keep: int = IDLE_WORKERS,
                 serve_one: Callable[[socket.socket], None] | None = None):
        self.keep = keep
        self.serve_one = serve_one or _serve_one
        self.started = 0
        """Threads started so far."""
        self._queue: queue.SimpleQueue[socket.socket | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._closed = False

    def submit(self, conn: socket.socket) -> None:
        with self._lock:
            if self._idle:
                self._idle -= 1
                self._queue.put(conn)
                return
            self.started += 1
        threading.Thread(target=self._work, args=(conn,), name="spawn").start()

    def _work(self, conn: socket.socket | None) -> None:
        while conn is not None:
            self.serve_one(conn)
            with self._lock:
                if self._closed or self._idle >= self.keep:
                    return
                self._idle += 1
            conn = self._queue.get()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, 0
        for _ in range(idle):
            self._queue.put(None)


def serve(control: socket.socket, root: str) -> int:
    """The helper's loop (module doc): chroot to `root`, then serve every connection
    passed over `control` until it reaches end of file. Returns the exit status."""
    try:
        os.chroot(root)
        os.chdir("/")
    except OSError as e:
        return _refuse(control, f"cannot chroot to {root}: {e}")
    try:
        own = os.readlink("/proc/self") == str(os.getpid())
    except OSError:
        own = False
    if not own:  # _kill_tree would find no process, or other processes, by these PIDs
        return _refuse(control, f"{root}/proc is not the /proc of the daemon's PID "
                       "namespace: mount the host's /proc there and run the daemon with "
                       "hostPID, as deploy/thick does")
    control.sendall(READY + b"\n")
    workers = _Workers()
    try:
        while True:
            try:
                msg, fds, _flags, _addr = socket.recv_fds(control, 1, 16)
            except OSError as e:
                print(f"netattach spawner: the control socket failed: {e}", file=sys.stderr)
                return 1
            if not msg and not fds:
                return 0  # the daemon closed it or died: children still running finish
            for fd in fds:
                workers.submit(socket.socket(fileno=fd))
    finally:
        workers.close()


def _refuse(control: socket.socket, why: str) -> int:
    """Tell the daemon why this helper cannot serve (its first line), and on stderr."""
    print(f"netattach spawner: {why}", file=sys.stderr)
    try:
        control.sendall(why.encode() + b"\n")
    except OSError:
        pass
    return 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", required=True, help="the directory to chroot to (the "
                        "daemon's --chroot-dir)")
    parser.add_argument("--fd", type=int, required=True, help="the control socket's file "
                        "descriptor, inherited from the daemon")


def run(args: argparse.Namespace) -> int:
    """`netattach spawner`: started by the thick daemon only (module doc)."""
    return serve(socket.socket(fileno=args.fd), args.root)
