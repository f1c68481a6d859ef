"""netattach-shim: the CNI plugin a container runtime execs in thick mode.

It imports only the standard library (its PyInstaller bundle holds nothing else), and
forwards each CNI call to the node daemon (`netattach daemon`, src/netattach/daemon)
over the unix socket `<daemonSocketDir>/netattach.sock` (daemonSocketDir: the key of
its conf, Multus' name for it; default /run/netattach). What reaches stdout is exactly
one JSON document, the daemon's answer (a CNI result or error) or the shim's own CNI
error, and the exit status is 0 or 1 (CNI SPEC.md "Result" / "Error").

The wire protocol (daemon/server.py is the other end): the shim sends one JSON object
{"env": {CNI_* variables}, "stdin": <stdin as latin-1 text, lossless for any bytes>},
then shuts down its sending side; the daemon answers one JSON object {"code": exit
status, "stdout": the document's text or ""} and closes.

When the daemon does not answer (no socket, connection refused, the connection closed
before a whole answer):
* DEL, GC and CHECK, which work from saved state, are run by the thin-mode plugin
  `netattach` (the `netattach` beside the shim in its bundle, else in the shim's
  directory), exec'd in this process with the same environment and stdin: a pod can
  always be torn down, whatever state the daemon is in. (Re-running a DEL the daemon
  had started is safe: DEL works from the saved state and a completed DEL leaves a
  tombstone.)
* ADD waits up to ADD_WAIT_SECONDS for the socket to accept, then fails with code 11
  naming the socket. An ADD whose connection broke after it was sent (the daemon died
  mid-ADD) is never sent again: it fails with code 11 at once, and the runtime's DEL
  undoes what the daemon saved.
* STATUS fails with code 50 (the plugin is not available), naming the socket.
* VERSION is answered here, without the daemon.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import time

SUPPORTED_VERSIONS = ("0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
"""netattach.cni.version.SUPPORTED_VERSIONS, repeated because the shim imports nothing
of the package (tests/unit/test_shim.py keeps the two equal)."""
DEFAULT_SOCKET_DIR = "/run/netattach"
SOCKET_NAME = "netattach.sock"
ADD_WAIT_SECONDS = 10.0
"""How long an ADD waits for the daemon's socket to accept before failing with code 11:
a daemon restarting (DaemonSet rollout, a crash) is back within seconds, and the kubelet
retries a failed sandbox anyway."""
MAX_ANSWER = 64 << 20
CNI_ENV = ("CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS",
           "CNI_PATH")
FROM_STATE = ("DEL", "GC", "CHECK")
TRY_AGAIN, NOT_AVAILABLE, INTERNAL = 11, 50, 999


class NoAnswer(Exception):
    """The daemon did not answer; `sent` when the request may have reached it."""

    def __init__(self, message: str, sent: bool):
        super().__init__(message)
        self.sent = sent


def socket_path(config: object) -> str:
    """`<daemonSocketDir>/netattach.sock` of the decoded stdin (the default dir when the
    key is absent, not a non-empty string, or stdin is no JSON object)."""
    d = config.get("daemonSocketDir") if isinstance(config, dict) else None
    return os.path.join(d if isinstance(d, str) and d else DEFAULT_SOCKET_DIR, SOCKET_NAME)


def _decode(stdin: bytes) -> object:
    try:
        return json.loads(stdin)
    except (ValueError, RecursionError):
        return None


def ask(path: str, environ: dict[str, str], stdin: bytes, wait: float = 0.0) -> tuple[int, str]:
    """Send one CNI call to the daemon at `path`; returns (exit status, stdout text).

    wait: seconds to keep retrying a socket that is absent or refuses (0: try once).
    Raises NoAnswer (`sent` False when nothing was sent)."""
    deadline = time.monotonic() + wait
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            s.connect(path)
            break
        except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError) as e:
            s.close()
            if time.monotonic() >= deadline:
                raise NoAnswer(f"netattach daemon socket {path}: {e.strerror}", False) from None
            time.sleep(0.1)
        except OSError as e:
            s.close()
            raise NoAnswer(f"netattach daemon socket {path}: {e.strerror or e}", False) from None
    with s:
        request = json.dumps({"env": {k: environ[k] for k in CNI_ENV if k in environ},
                              "stdin": stdin.decode("latin-1")}).encode()
        try:
            s.sendall(request)
            s.shutdown(socket.SHUT_WR)
            chunks = []
            size = 0
            while chunk := s.recv(1 << 16):
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_ANSWER:
                    raise NoAnswer(f"netattach daemon at {path}: answer larger than "
                                   f"{MAX_ANSWER} bytes", True)
        except OSError as e:
            raise NoAnswer(f"netattach daemon at {path}: connection lost ({e.strerror or e})",
                           True) from None
    try:
        answer = json.loads(b"".join(chunks))
        code, out = answer["code"], answer["stdout"]
        if not (isinstance(code, int) and isinstance(out, str)):
            raise TypeError(code, out)
    except (ValueError, KeyError, TypeError):
        raise NoAnswer(f"netattach daemon at {path} closed the connection without a whole "
                       "answer (it stopped or was killed)", True) from None
    return code, out


def thin_plugin() -> str | None:
    """The thin-mode `netattach`: beside the shim's bundle (frozen: <bundle>/shim/
    netattach-shim -> <bundle>/netattach), else beside the shim as exec'd."""
    candidates = []
    if getattr(sys, "frozen", False):
        here = os.path.dirname(os.path.realpath(sys.executable))
        candidates.append(os.path.join(os.path.dirname(here), "netattach"))
    candidates.append(os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), "netattach"))
    for path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def run_thin(environ: dict[str, str], stdin: bytes, why: str) -> None:
    """Replace this process by the thin-mode plugin, stdin refilled from memory. Returns
    only when there is none to exec (the caller reports the error)."""
    path = thin_plugin()
    if path is None:
        return
    fd = os.memfd_create("netattach-stdin", os.MFD_CLOEXEC)
    os.write(fd, stdin)
    os.lseek(fd, 0, os.SEEK_SET)
    os.dup2(fd, 0)  # dup2 clears close-on-exec on fd 0
    env = {**environ, "NETATTACH_SHIM_FALLBACK": why[:500]}
    sys.stdout.flush()
    os.execve(path, [path], _unfrozen(env))


def _unfrozen(environ: dict[str, str]) -> dict[str, str]:
    """`environ` without what the PyInstaller bootloader set for the shim itself
    (hack/pyinstaller_entry.py, restore_runtime_environ: the same rule)."""
    env = dict(environ)
    original = env.pop("LD_LIBRARY_PATH_ORIG", None)
    if original is None:
        env.pop("LD_LIBRARY_PATH", None)
    else:
        env["LD_LIBRARY_PATH"] = original
    return {k: v for k, v in env.items() if not k.startswith("_PYI_")}


def error(cni_version: str, code: int, msg: str, details: str = "") -> str:
    doc: dict[str, object] = {"cniVersion": cni_version, "code": code, "msg": msg}
    if details:
        doc["details"] = details
    return json.dumps(doc)


def shim(environ: dict[str, str], stdin: bytes) -> tuple[int, str]:
    """One CNI call: (exit status, stdout text). May exec the thin plugin (DEL, GC and
    CHECK without a daemon) and then never returns."""
    command = environ.get("CNI_COMMAND", "")
    config = _decode(stdin)
    version = config.get("cniVersion") if isinstance(config, dict) else None
    cni_version = version if version in SUPPORTED_VERSIONS else SUPPORTED_VERSIONS[-1]
    if command == "VERSION":
        return 0, json.dumps({"cniVersion": cni_version,
                              "supportedVersions": list(SUPPORTED_VERSIONS)})
    path = socket_path(config)
    try:
        return ask(path, environ, stdin, ADD_WAIT_SECONDS if command == "ADD" else 0.0)
    except NoAnswer as e:
        why, sent = str(e), e.sent
    if command in FROM_STATE:
        run_thin(environ, stdin, why)
        return 1, error(cni_version, INTERNAL, f"{why}; and no thin-mode netattach found "
                        f"beside {sys.argv[0]} to run the {command} from saved state")
    if command == "STATUS":
        return 1, error(cni_version, NOT_AVAILABLE, f"netattach is not available: {why}")
    pod = _pod(environ)
    if sent:
        return 1, error(cni_version, TRY_AGAIN, f"{pod}: ADD interrupted: {why}",
                        "the runtime's DEL releases whatever the ADD attached, from the "
                        "state the daemon saved")
    waited = f" (waited {ADD_WAIT_SECONDS:g} s)" if command == "ADD" else ""
    return 1, error(cni_version, TRY_AGAIN, f"{pod}: {command} not run: {why}{waited}",
                    "is the netattach DaemonSet's daemon running on this node?")


def _pod(environ: dict[str, str]) -> str:
    """"pod ns/name" from CNI_ARGS, else "container <id>", for messages."""
    args = dict(kv.split("=", 1) for kv in environ.get("CNI_ARGS", "").split(";") if "=" in kv)
    ns, name = args.get("K8S_POD_NAMESPACE"), args.get("K8S_POD_NAME")
    if ns and name:
        return f"pod {ns}/{name}"
    return f"container {environ.get('CNI_CONTAINERID', '?')}"


def main() -> None:
    """Entry point (console script `netattach-shim`, hack/shim_entry.py when frozen)."""
    try:
        stdin = sys.stdin.buffer.read()
        code, out = shim(dict(os.environ), stdin)
    except Exception as e:  # a bug in the shim: still one CNI error on stdout
        code, out = 1, error(SUPPORTED_VERSIONS[-1], INTERNAL,
                             f"netattach-shim: {type(e).__name__}: {e}")
    sys.stdout.write(out + ("\n" if out and not out.endswith("\n") else ""))
    sys.stdout.flush()
    os._exit(code)
