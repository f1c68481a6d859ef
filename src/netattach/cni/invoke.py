"""Finding and running one CNI plugin executable (the libcni pkg/invoke equivalent).

The child gets the network configuration as JSON on stdin and the CNI_* variables
in its environment (CNI SPEC.md, Section 2 "Execution Protocol"); it answers a
result or an error object on stdout. Nothing here writes to our own stdout.
"""
from __future__ import annotations

import errno
import json
import logging
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .errors import DECODE_FAILURE, INTERNAL, ChildError, ConfigError, IOFailure, TryAgain

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)
if TYPE_CHECKING:
    from typing import Any, Protocol
else:
    Protocol = object  # a protocol: read by the type checker only

log = logging.getLogger("netattach.invoke")

CNI_ENV_KEYS = ("CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS",
                "CNI_PATH")
STDERR_TAIL = 4096  # characters of a child's stderr kept in errors
_TXTBSY_RETRIES = 5  # libcni RawExec retries "text file busy" 5 times, 1 s apart
MAX_SYMLINKS = 40
"""Symlinks one path lookup may follow before ELOOP (Linux's MAXSYMLINKS)."""

OWN_TYPES = frozenset({"netattach", "netattach-shim"})
"""netattach's executables in the bin dir (thin mode's plugin, thick mode's shim)."""

META_PLUGIN_TYPES = OWN_TYPES | {"multus", "multus-shim"}
"""Plugin types of delegating meta-plugins: a config with one of them attaches more than
its own network (netattach's in thin and thick mode, Multus' in thin and thick mode).
No delegate is ever one of them (check_plugin_type, MetaPluginRefused): a nested
meta-plugin would take its own paths, credentials and log file from the delegate's
config, which a NetworkAttachmentDefinition's or a claim's author wrote."""

_child_lock = threading.Lock()
_child_seconds = 0.0


def child_seconds() -> float:
    """Wall-clock seconds this process spent running children (the timing log line,
    read by `make bench`)."""
    return _child_seconds


def _add_child_seconds(seconds: float) -> None:
    global _child_seconds
    with _child_lock:
        _child_seconds += seconds


@dataclass(frozen=True)
class PluginEnv:
    """The CNI_* values of one child invocation (CNI_COMMAND is given separately).

    `args` is the CNI_ARGS string ("K=V;K=V"), `path` the CNI_PATH string.
    """
    container_id: str = ""
    netns: str = ""
    ifname: str = ""
    args: str = ""
    path: str = ""


class MetaPluginRefused(ConfigError):
    """A delegate's plugin is a delegating meta-plugin (META_PLUGIN_TYPES by name, or the
    same file as one of them: a symlink or a hard link). Code 7; nothing is run."""


def check_plugin_type(plugin_type: object, allowed: frozenset[str] | None = None) -> None:
    """Raise ConfigError (7) unless `plugin_type` may name a delegate's plugin:

    * a plain file name: not empty, ".", "..", no '/' or NUL (SPEC.md "Plugin
      configuration objects": `type` "must not contain characters disallowed in file
      paths"); anything else could name a file outside the plugin directories;
    * not a delegating meta-plugin (META_PLUGIN_TYPES): MetaPluginRefused;
    * in `allowed` when that is given (the node's `allowedPluginTypes`).

    The message names the type and the rule; the caller adds the pod, the network and
    the key (`plugins[i].type`)."""
    if (not isinstance(plugin_type, str) or not plugin_type or plugin_type in (".", "..")
            or "/" in plugin_type or "\0" in plugin_type):
        raise ConfigError(f"invalid plugin type {plugin_type!r}",
                          "a plugin type is a file name: not empty, '.', '..', no '/' or NUL")
    if plugin_type in META_PLUGIN_TYPES:
        raise MetaPluginRefused(
            f"plugin type {plugin_type!r} is a delegating meta-plugin; a delegate never is "
            "one (it would run with paths and credentials from the delegate's config)",
            f"refused plugin types: {', '.join(sorted(META_PLUGIN_TYPES))}")
    if allowed is not None and plugin_type not in allowed:
        raise ConfigError(f"plugin type {plugin_type!r} is not in the node's "
                          f"allowedPluginTypes ({', '.join(sorted(allowed)) or 'none'})",
                          "allowedPluginTypes: the plugin types NetworkAttachmentDefinitions "
                          "and claims may name on this node (netattach's configuration)")


def _identity(path: str) -> tuple[int, int] | None:
    """(st_dev, st_ino) of the file `path` leads to (symlinks followed), None if none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def meta_plugin_paths(dirs: Sequence[str]) -> list[str]:
    """Where the delegating meta-plugins would be: each META_PLUGIN_TYPES name in each of
    the plugin dirs `dirs`."""
    return [os.path.join(d, name) for d in dirs if d for name in sorted(META_PLUGIN_TYPES)]


def refuse_meta_plugin(plugin_type: str, path: str, meta_paths: Sequence[str]) -> None:
    """Raise MetaPluginRefused (7) when the executable `path` found for `plugin_type` is
    the same file (st_dev, st_ino; symlinks followed) as one of `meta_paths`
    (meta_plugin_paths) or as this process's own executable when it is the built
    artifact (PyInstaller's sys.executable): a symlink or a hard link to netattach, its
    shim or Multus under another name. Reads only (stat)."""
    ident = _identity(path)
    if ident is None:
        return
    candidates = list(meta_paths) + ([sys.executable] if getattr(sys, "frozen", False) else [])
    for same in candidates:
        if _identity(same) == ident:
            raise MetaPluginRefused(
                f"plugin type {plugin_type!r} is the same file as {same}, a delegating "
                "meta-plugin; a delegate never is one (it would run with paths and "
                "credentials from the delegate's config)", f"{path} and {same} are one file")


def find_plugin(plugin_type: str, dirs: Sequence[str]) -> str:
    """Path of the executable named `plugin_type` in the first of `dirs` that has one.

    SPEC.md: the runtime uses the network "type" as the executable name and looks
    for it in its plugin directories (libcni invoke.FindInPath). A type that is not a
    plain file name or is a delegating meta-plugin's raises ConfigError (7)
    (check_plugin_type), and so does an executable that is the same file as one
    (MetaPluginRefused, refuse_meta_plugin); no regular executable file found raises
    ConfigError naming the type and dirs.
    """
    check_plugin_type(plugin_type)
    for d in dirs:
        if not d:
            continue
        candidate = os.path.join(d, plugin_type)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            refuse_meta_plugin(plugin_type, candidate, meta_plugin_paths(dirs))
            return candidate
    raise ConfigError(f"failed to find plugin {plugin_type!r} in path "
                      f"[{', '.join(d for d in dirs if d)}]")


def resolve_in_root(root: str, path: str) -> str | None:
    """`path` resolved as a process whose root directory is `root` resolves it, or None.

    root: a directory here; path: a path inside it ("/opt/cni/bin/macvlan"; a relative
    path is taken from the root, the working directory of a chrooted child). Every symlink met is
    read and followed *inside* the root, as the kernel does for a chrooted process
    (and as openat2's RESOLVE_IN_ROOT does): an absolute target starts again at the
    root, `..` never climbs above it, so no lookup leaves the root. Returns the
    path inside the root with no symlink, `.` or `..` left ("/usr/lib/cni/macvlan"),
    or None when a component is missing, not a directory or not readable, or more
    than MAX_SYMLINKS links were followed (ELOOP). The last component may be of any
    type. Reads only.
    """
    pending = [p for p in reversed(path.split("/")) if p]
    resolved: list[str] = []
    links = 0
    while pending:
        part = pending.pop()
        if part == ".":
            continue
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        here = os.path.join(root, *resolved, part)
        try:
            st = os.lstat(here)
            if not stat.S_ISLNK(st.st_mode):
                resolved.append(part)
                continue
            target = os.readlink(here)
        except OSError:
            return None
        links += 1
        if links > MAX_SYMLINKS:
            return None
        if target.startswith("/"):
            resolved = []
        pending.extend(p for p in reversed(target.split("/")) if p)
    return "/" + "/".join(resolved)


def child_environ(command: str, env: PluginEnv) -> dict[str, str]:
    """os.environ with our own CNI_* replaced by this child's.

    Empty values are left out (never inherited from our environment), except
    CNI_PATH which is always set, possibly to "".
    """
    out = {k: v for k, v in os.environ.items() if k not in CNI_ENV_KEYS}
    for key, value in (("CNI_COMMAND", command), ("CNI_CONTAINERID", env.container_id),
                       ("CNI_NETNS", env.netns), ("CNI_IFNAME", env.ifname),
                       ("CNI_ARGS", env.args)):
        if value:
            out[key] = value
    out["CNI_PATH"] = env.path
    return out


def _tail(text: str, limit: int = STDERR_TAIL) -> str:
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def _descendants(pid: int) -> list[int]:
    """PIDs of the live descendants of `pid`, whatever their process group or session,
    from the parent links in /proc."""
    children: dict[int, list[int]] = {}
    try:
        entries = list(os.scandir("/proc"))
    except OSError:  # no /proc here: the process group alone is killed (_kill_tree)
        return []
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                text = f.read()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and ')', so split after the last ')'
        fields = text[text.rindex(b")") + 2:].split()
        if fields[0] != b"Z":
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            out.append(child)
            todo.append(child)
    return out


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child, its process group and every descendant that left the group.

    The group alone is not enough: a grandchild that called setsid() or setpgid()
    would outlive the child and hold our pipes open. Each process found is
    SIGSTOPped before its own children are looked up, so none can fork while the
    tree is walked; then all of them are SIGKILLed.
    """
    found: set[int] = set()
    for _ in range(100):
        new = [p for p in [proc.pid, *_descendants(proc.pid)] if p not in found]
        if not new:
            break
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        found.update(new)
    for pid in found:
        _signal(pid, signal.SIGKILL)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _spawn(argv: list[str], environ: dict[str, str], deadline: float
           ) -> subprocess.Popen[bytes]:
    path = argv[0]
    name = os.path.basename(argv[-1])
    for attempt in range(_TXTBSY_RETRIES + 1):
        try:
            return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=environ, close_fds=True,
                                    start_new_session=True)
        except OSError as e:
            # A plugin binary being replaced right now: wait and retry, as libcni does.
            if e.errno == errno.ETXTBSY and attempt < _TXTBSY_RETRIES:
                remaining = deadline - time.monotonic()
                if remaining > 0:
                    time.sleep(min(1.0, remaining))
                    continue
            through = f" through {path}" if len(argv) > 1 else ""
            raise IOFailure(f"cannot execute plugin {name!r}{through}: {e.strerror or e}",
                            path) from None
    raise AssertionError("unreachable")


def _failure(name: str, returncode: int, stdout: str, stderr: str) -> ChildError:
    """The ChildError for a non-zero exit (libcni invoke RawExec.pluginErr rules, but never
    code 0, which the spec does not define).

    A JSON error object on stdout gives code/msg/details (a code that is not a
    positive integer becomes 999). Otherwise the code is 999 (libcni's ErrInternal:
    the plugin failed outside the protocol) and the message says how it ended (the
    signal's name, or the exit status) and what it left (nothing, only stderr, or
    unparsable stdout); the stderr tail goes into details.
    """
    if returncode < 0:
        try:
            signame = signal.Signals(-returncode).name
        except ValueError:
            signame = f"signal {-returncode}"
        how = f"was killed by {signame} ({-returncode})"
    else:
        how = f"exited with status {returncode}"
    text = stdout.strip()
    if text:
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError):
            obj = None
        if isinstance(obj, dict) and ("code" in obj or "msg" in obj):
            code = obj.get("code")
            msg = obj["msg"] if isinstance(obj.get("msg"), str) else ""
            details = obj["details"] if isinstance(obj.get("details"), str) else ""
            return ChildError(code if isinstance(code, int) else INTERNAL,
                              msg or f"plugin {name!r} {how} with an empty error message",
                              details, plugin=name, stderr=_tail(stderr))
        return ChildError(INTERNAL, f"plugin {name!r} {how} and its error output is not a CNI "
                          f"error object: {_tail(text, 512)!r}", _tail(stderr),
                          plugin=name, stderr=_tail(stderr))
    if stderr.strip():
        return ChildError(INTERNAL, f"plugin {name!r} {how}: {_tail(stderr, 512)!r}",
                          _tail(stderr), plugin=name, stderr=_tail(stderr))
    return ChildError(INTERNAL, f"plugin {name!r} {how} and wrote no error", "",
                      plugin=name, stderr="")


@dataclass(frozen=True)
class ChildOutcome:
    """How one child ended (run_child): `returncode` (negative: killed by that signal;
    None: it ran past its timeout and its whole tree was killed), what it wrote to
    stdout and stderr (bytes, whole), and `elapsed` wall-clock seconds."""
    returncode: int | None
    stdout: bytes
    stderr: bytes
    elapsed: float


def run_child(argv: list[str], environ: dict[str, str], data: bytes,
              timeout: float) -> ChildOutcome:
    """Exec `argv` (argv[0] a path) in a new session with `environ`, write `data` to its
    stdin, read its stdout and stderr to the end, and wait for it, at most `timeout`
    seconds in all; past that, kill it, its process group and every descendant
    (_kill_tree) and report returncode None. "Text file busy" is retried as libcni does.
    Raises IOFailure (5) when argv[0] cannot be executed."""
    start = time.monotonic()
    deadline = start + timeout
    proc = _spawn(argv, environ, deadline)
    timed_out = False
    try:
        out_b, err_b = proc.communicate(data, timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_tree(proc)
        try:
            out_b, err_b = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:  # a descendant out of reach holds the pipes
            proc.kill()
            proc.wait()
            out_b, err_b = b"", b""
    except BaseException:
        _kill_tree(proc)
        proc.wait()
        raise
    return ChildOutcome(None if timed_out else proc.returncode, out_b, err_b,
                        time.monotonic() - start)


Runner = Callable[[list[str], dict[str, str], bytes, float], ChildOutcome]
"""run_child's signature: (argv, environment, stdin bytes, timeout seconds) -> outcome."""


def exec_plugin(path: str, command: str, config: dict[str, Any], env: PluginEnv,
                timeout: float, runner: Runner = run_child) -> dict[str, Any] | None:
    """Run plugin `path` once for `command`; return its decoded stdout.

    stdin: JSON of `config`; environment: child_environ(command, env); the child
    starts in a new session (its own process group). `runner`: what runs the child
    (run_child, here; the thick daemon's chroot.Spawner.run, in a helper already in
    its --chroot-dir).
    Returns the JSON object the plugin printed on success, or None when it printed
    nothing (or JSON null), which is normal for DEL, CHECK, STATUS and GC.

    Raises:
    * ChildError with the child's own code/msg/details when it exits non-zero with a
      CNI error object;
    * ChildError 999 for a non-zero exit or a death by signal without one
      (`_failure`: the message names the signal or status), the stderr tail in details;
    * ChildError 6 (a decoding failure) when it exits 0 but stdout is not a JSON object;
    * IOFailure (5) when it cannot be executed;
    * TryAgain (11) when it runs longer than `timeout` seconds: it, its process
      group and all its descendants are killed (_kill_tree).
    """
    name = os.path.basename(path)
    data = json.dumps(config, separators=(",", ":")).encode()
    environ = child_environ(command, env)
    start = time.monotonic()
    try:
        outcome = runner([path], environ, data, timeout)
    finally:
        _add_child_seconds(time.monotonic() - start)  # child_seconds(): the wait, whoever ran it
    return decode_outcome(name, command, env, timeout, outcome)


def decode_outcome(name: str, command: str, env: PluginEnv, timeout: float,
                   outcome: ChildOutcome) -> dict[str, Any] | None:
    """exec_plugin's answer for plugin `name` from how it ended (its contract), logged."""
    stdout = outcome.stdout.decode("utf-8", "replace")
    stderr = outcome.stderr.decode("utf-8", "replace")
    log.debug("%s %s ifname=%s rc=%s took %.3fs", command, name, env.ifname or "-",
              "timeout" if outcome.returncode is None else outcome.returncode,
              outcome.elapsed)
    if stderr.strip():
        log.debug("%s %s stderr: %s", command, name, _tail(stderr))

    if outcome.returncode is None:
        raise TryAgain(f"plugin {name!r} timed out after {timeout:g} seconds ({command})",
                       _tail(stderr))
    if outcome.returncode != 0:
        raise _failure(name, outcome.returncode, stdout, stderr)
    if not stdout.strip():
        return None
    try:
        obj = json.loads(stdout)
    except (ValueError, RecursionError) as e:
        raise ChildError(DECODE_FAILURE, f"plugin {name!r} printed output that is not JSON "
                         f"({command}): {e}", _tail(stdout, 512), plugin=name,
                         stderr=_tail(stderr)) from None
    if obj is None:
        return None
    if not isinstance(obj, dict):
        raise ChildError(DECODE_FAILURE, f"plugin {name!r} printed a JSON "
                         f"{type(obj).__name__}, not an object ({command})",
                         _tail(stdout, 512), plugin=name, stderr=_tail(stderr))
    return obj


class Executor(Protocol):
    """How the chain engine finds and runs a plugin (the seam of libcni's invoke.Exec):
    the process executor below in production, a fake in unit tests."""

    def find(self, plugin_type: str, dirs: Sequence[str]) -> str:
        """The path of plugin `plugin_type` (find_plugin's contract: a delegating
        meta-plugin, by name or by file, is refused with MetaPluginRefused)."""
        ...

    def run(self, path: str, command: str, config: dict[str, Any], env: PluginEnv,
            timeout: float) -> dict[str, Any] | None:
        """Run it once (exec_plugin's contract)."""
        ...


class ProcessExecutor:
    """The executor of real plugin executables: find_plugin + exec_plugin."""

    def find(self, plugin_type: str, dirs: Sequence[str]) -> str:
        return find_plugin(plugin_type, dirs)

    def run(self, path: str, command: str, config: dict[str, Any], env: PluginEnv,
            timeout: float) -> dict[str, Any] | None:
        return exec_plugin(path, command, config, env, timeout)


PROCESS_EXECUTOR = ProcessExecutor()


def host_path(executor: Executor, path: str) -> str:
    """Where this process sees the file the children see at `path`: inside the root of
    a chroot.ChrootExecutor (the thick daemon's --chroot-dir: the host's `/`), resolved in it
    (resolve_in_root; the path joined to the root when a part is missing), else `path`
    itself. For the files netattach reads on the children's behalf, such as
    `readinessindicatorfile`."""
    root = getattr(executor, "root", None)
    if not isinstance(root, str):
        return path
    inside = resolve_in_root(root, path)
    if inside is None:  # not there (yet): its dir resolved, if that is there
        parent = resolve_in_root(root, os.path.dirname(path))
        inside = os.path.join(parent, os.path.basename(path)) if parent else path
    return os.path.join(root, inside.lstrip("/"))
