"""netattach-shim: the CNI plugin a container runtime execs in thick mode.

It imports only the standard library (the Python prefix it runs from, the artifact's
shim/ dir, holds nothing else: netattach.spec), and
forwards each CNI call to the node daemon (`netattach daemon`, src/netattach/daemon)
over the unix socket `<daemonSocketDir>/netattach.sock` (daemonSocketDir: the key of
its conf, Multus' name for it; default /run/netattach). What reaches stdout is exactly
one JSON document, the daemon's answer (a CNI result or error) or the shim's own CNI
error, and the exit status is 0 or 1 (CNI SPEC.md "Result" / "Error").

The runtime execs the shim once per CNI call, so its start is most of what thick mode
costs beyond the daemon's work: on the path of a call the daemon answers it imports no
module the interpreter has not loaded at start but `_socket` (the C module under
`socket`; `socket` itself pulls selectors, enum, collections and more) and `time`,
and it does not import `json` (which pulls `re` and compiles its patterns): the wire
protocol below is plain bytes, stdin is decoded only when it may hold
`daemonSocketDir` (`socket_path_of`), and then by the C scanner json.loads itself
uses (`_decode`). Only the shim's own errors import `json`, to write the document.
docs/architecture.md has the numbers.

The wire protocol (request, answer, limits) is netattach_shim.wire, which the daemon
(daemon/server.py) imports too.

The shim waits for the answer at most `answer_timeout` seconds once connected (the
conf's readiness wait, apiTimeout and delegateTimeout for the networks the conf names
and one more for the pod's own selection, plus ANSWER_MARGIN); then it closes the
connection, which makes the daemon abandon an ADD at its next step and roll it back
(src/netattach/commands/add.py, "Abandoned"), and goes on as below.

When the daemon does not answer (no socket, connection refused, the connection closed
before a whole answer, no answer within answer_timeout):
* DEL, GC and CHECK, which work from saved state, are run by the thin-mode plugin
  `netattach` (the `netattach` beside the shim in its bundle, else in the shim's
  directory), exec'd in this process with the same environment and stdin: a pod can
  always be torn down, whatever state the daemon is in. (Re-running a DEL the daemon
  had started is safe: DEL works from the saved state and a completed DEL leaves a
  tombstone.)
* ADD waits up to ADD_WAIT_SECONDS for the socket to accept, then fails with code 11
  naming the socket. An ADD whose connection broke after it was sent (the daemon died
  mid-ADD, or its answer timeout passed) is never sent again: it fails with code 11 at
  once, and the runtime's DEL undoes what the daemon saved.
* STATUS fails with code 50 (the plugin is not available), naming the socket.
* VERSION is answered here, without the daemon.
"""
import _socket  # not `socket`: see the module doc
import os
import sys
import time

from .wire import DEFAULT_SOCKET_DIR, MAX_ANSWER, decode_answer, encode_request
from .wire import socket_path as _in_dir

SUPPORTED_VERSIONS = ("0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
"""netattach.cni.version.SUPPORTED_VERSIONS, repeated because the shim imports nothing
of the package (tests/unit/test_thick_units.py keeps the two equal)."""
RELEASE = "0.1.0"
"""netattach.__version__, repeated for the same reason (tests/unit/test_thick_units.py)."""
COMMIT_FILE = "build-commit"
"""The build's commit stamp (netattach/buildinfo.py), copied by netattach.spec beside
this module in the shim's prefix."""
ADD_WAIT_SECONDS = 10.0
"""How long an ADD waits for the daemon's socket to accept before failing with code 11:
a daemon restarting (DaemonSet rollout, a crash) is back within seconds, and the kubelet
retries a failed sandbox anyway."""
ANSWER_MARGIN = 10.0
"""Seconds of answer_timeout beyond the conf's budgets: the daemon's queue, its state
writes and the API reads its caches miss."""
FROM_STATE = ("DEL", "GC", "CHECK")
TRY_AGAIN, NOT_AVAILABLE, INTERNAL = 11, 50, 999


class NoAnswer(Exception):
    """The daemon did not answer; `sent` when the request may have reached it,
    `timed_out` when answer_timeout passed (the shim closed the connection)."""

    def __init__(self, message: str, sent: bool, timed_out: bool = False):
        super().__init__(message)
        self.sent = sent
        self.timed_out = timed_out


def socket_path(config: object) -> str:
    """`<daemonSocketDir>/netattach.sock` of the decoded stdin (the default dir when the
    key is absent, not a non-empty string, or stdin is no JSON object)."""
    d = config.get("daemonSocketDir") if isinstance(config, dict) else None
    return _in_dir(d if isinstance(d, str) and d else DEFAULT_SOCKET_DIR)


def _seconds(config: dict, key: str, default: float) -> float:
    """config[key] when it is a positive finite number of seconds, else `default` (the
    daemon refuses a bad value with code 7 naming the key)."""
    value = config.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool) \
            and 0 < value < float("inf"):
        return float(value)
    return default


def answer_timeout(config: object) -> float:
    """Seconds the shim waits for the daemon's answer once connected, from the decoded
    stdin (netattach's conf; its defaults for what it leaves out, as
    src/netattach/spec/netconf.py has them):

        readinessTimeout (30; only with readinessindicatorfile, which an ADD waits for)
        + apiTimeout (5: all of an ADD's API requests)
        + delegateTimeout (60) x (2 + the number of defaultNetworks)
        + ANSWER_MARGIN (10)

    that is 135 s with the defaults. The networks the conf names (clusterNetwork, each
    of defaultNetworks) get one delegateTimeout each, and the pod's own selection one in
    all, whatever it names: a pod does not get more of the node daemon's time by
    selecting more networks (issue 21, "Bounded work per pod"). The runtime's own
    deadline (the kubelet's --runtime-request-timeout, 2 min) may end the shim first;
    either way the daemon abandons the ADD when the connection closes."""
    c = config if isinstance(config, dict) else {}
    ready = _seconds(c, "readinessTimeout", 30.0) if c.get("readinessindicatorfile") else 0.0
    networks = c.get("defaultNetworks")
    named = 1 + (len(networks) if isinstance(networks, list) else 0)
    return (ready + _seconds(c, "apiTimeout", 5.0)
            + _seconds(c, "delegateTimeout", 60.0) * (named + 1) + ANSWER_MARGIN)


SETTINGS_KEYS = (b"daemonSocketDir", b"apiTimeout", b"delegateTimeout", b"readinessTimeout",
                 b"readinessindicatorfile", b"defaultNetworks")
"""The keys of stdin the shim reads (socket_path, answer_timeout)."""


def settings_of(stdin: bytes) -> tuple[str, float]:
    """(socket_path, answer_timeout) of stdin, decoding it only when it may hold one of
    SETTINGS_KEYS: a JSON object key spells one either literally or with a `\\u`
    escape, so stdin holding neither has none, whatever else it holds."""
    if b"\\u" not in stdin and not any(key in stdin for key in SETTINGS_KEYS):
        return _in_dir(DEFAULT_SOCKET_DIR), answer_timeout(None)
    config = _decode(stdin)
    return socket_path(config), answer_timeout(config)


def socket_path_of(stdin: bytes) -> str:
    """socket_path of stdin (settings_of)."""
    return settings_of(stdin)[0]


class _ScanContext:
    """What `_json.make_scanner` reads off a json.JSONDecoder: json.loads' defaults,
    but NaN and Infinity refused (the slow path then decides)."""
    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    memo: dict[str, str] = {}

    @staticmethod
    def parse_constant(name: str) -> object:
        raise ValueError(name)


def _decode(stdin: bytes) -> object:
    """stdin as json.loads decodes it (None when it is no JSON), without importing
    `json` for the common case: `_json.make_scanner`, the C scanner under json.loads,
    reads a UTF-8 document; anything it does not take (another encoding, NaN, an error)
    goes to json.loads, which decides."""
    try:
        import _json
        text = stdin.decode("utf-8").lstrip(" \t\n\r")
        if not text:
            return None
        value, end = _json.make_scanner(_ScanContext)(text, 0)  # type: ignore[arg-type]
        if not text[end:].strip(" \t\n\r"):
            return value
    except Exception:  # ImportError, UnicodeError, ValueError, StopIteration, RecursionError
        pass
    import json
    try:
        return json.loads(stdin)
    except (ValueError, RecursionError):
        return None


def ask(path: str, environ: dict[str, str], stdin: bytes, wait: float = 0.0,
        timeout: float = 135.0) -> tuple[int, bytes]:
    """Send one CNI call to the daemon at `path`; returns (exit status, stdout bytes).

    wait: seconds to keep retrying a socket that is absent or refuses (0: try once);
    timeout: seconds for the answer once connected (answer_timeout), for a connect that
    blocks too (the daemon's backlog is full). Raises NoAnswer (`sent` False when
    nothing was sent, `timed_out` when the timeout passed after sending)."""
    deadline = time.monotonic() + wait
    while True:
        s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
        s.settimeout(timeout)
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
    answer_by = time.monotonic() + timeout
    try:
        try:
            s.sendall(encode_request(environ, stdin))
            s.shutdown(_socket.SHUT_WR)
            chunks = []
            size = 0
            while True:
                s.settimeout(max(answer_by - time.monotonic(), 0.001))
                chunk = s.recv(1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_ANSWER:
                    raise NoAnswer(f"netattach daemon at {path}: answer larger than "
                                   f"{MAX_ANSWER} bytes", True)
        except TimeoutError:
            raise NoAnswer(f"netattach daemon at {path}: no answer within {timeout:g} s (the "
                           "shim's answer timeout, from the conf's readinessTimeout, "
                           "apiTimeout and delegateTimeout)", True, True) from None
        except OSError as e:
            raise NoAnswer(f"netattach daemon at {path}: connection lost ({e.strerror or e})",
                           True) from None
    finally:
        s.close()
    try:
        return decode_answer(b"".join(chunks))
    except ValueError:
        raise NoAnswer(f"netattach daemon at {path} closed the connection without a whole "
                       "answer (it stopped or was killed)", True) from None


def thin_plugin() -> str | None:
    """The thin-mode `netattach`: beside the shim's prefix when the artifact's own
    interpreter runs the shim (`<artifact>/shim/bin/python3` -> `<artifact>/netattach`,
    netattach.spec), else beside the shim as exec'd (`<bin>/netattach-shim` ->
    `<bin>/netattach`, the installed link to the same executable)."""
    candidates = []
    if os.path.basename(sys.prefix) == "shim":
        candidates.append(os.path.join(os.path.dirname(sys.prefix), "netattach"))
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
    os.execve(path, [path], {**environ, "NETATTACH_SHIM_FALLBACK": why[:500]})


def build_line() -> str:
    """What a VERSION call writes to stderr, as `netattach --version` prints it:
    "netattach-shim <release> (commit <commit>; CNI <versions>)". The commit is the
    stamp beside this module (40 hex digits, "-dirty" after it), or "unknown" when there
    is none (a virtualenv) or it holds anything else."""
    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), COMMIT_FILE),
                  "rb") as f:
            text = f.read(64).strip().decode("ascii")
    except (OSError, ValueError):
        text = ""
    sha = text.removesuffix("-dirty")
    if len(sha) != 40 or sha.strip("0123456789abcdef"):
        text = "unknown"
    return f"netattach-shim {RELEASE} (commit {text}; CNI {', '.join(SUPPORTED_VERSIONS)})"


def _cni_version(stdin: bytes) -> str:
    """The cniVersion of stdin if netattach supports it, else the newest it supports:
    the version of the documents the shim writes itself."""
    config = _decode(stdin)
    version = config.get("cniVersion") if isinstance(config, dict) else None
    return version if version in SUPPORTED_VERSIONS else SUPPORTED_VERSIONS[-1]


def error(cni_version: str, code: int, msg: str, details: str = "") -> bytes:
    """A CNI error document (SPEC.md "Error"), encoded."""
    import json
    doc: dict[str, object] = {"cniVersion": cni_version, "code": code, "msg": msg}
    if details:
        doc["details"] = details
    return json.dumps(doc).encode()


def shim(environ: dict[str, str], stdin: bytes) -> tuple[int, bytes]:
    """One CNI call: (exit status, stdout bytes). May exec the thin plugin (DEL, GC and
    CHECK without a daemon) and then never returns."""
    command = environ.get("CNI_COMMAND", "")
    if command == "VERSION":  # json.dumps' output, built from our own version strings
        try:  # its one log line (issue 24): libcni copies stderr into the runtime's log
            os.write(2, (build_line() + "\n").encode())
        except OSError:
            pass
        versions = ", ".join(f'"{v}"' for v in SUPPORTED_VERSIONS)
        return 0, (f'{{"cniVersion": "{_cni_version(stdin)}", '
                   f'"supportedVersions": [{versions}]}}').encode()
    path, timeout = settings_of(stdin)
    try:
        return ask(path, environ, stdin, ADD_WAIT_SECONDS if command == "ADD" else 0.0,
                   timeout)
    except NoAnswer as e:
        why, sent, timed_out = str(e), e.sent, e.timed_out
    if command in FROM_STATE:
        run_thin(environ, stdin, why)
        return 1, error(_cni_version(stdin), INTERNAL, f"{why}; and no thin-mode netattach "
                        f"found beside {sys.argv[0]} to run the {command} from saved state")
    if command == "STATUS":
        return 1, error(_cni_version(stdin), NOT_AVAILABLE, f"netattach is not available: {why}")
    pod = _pod(environ)
    if timed_out:
        return 1, error(_cni_version(stdin), TRY_AGAIN, f"{pod}: ADD interrupted: {why}",
                        "the daemon abandons the ADD at its next step and rolls back what "
                        "it attached; the runtime's DEL releases anything left, from the "
                        "state the daemon saved")
    if sent:
        return 1, error(_cni_version(stdin), TRY_AGAIN, f"{pod}: ADD interrupted: {why}",
                        "the runtime's DEL releases whatever the ADD attached, from the "
                        "state the daemon saved")
    waited = f" (waited {ADD_WAIT_SECONDS:g} s)" if command == "ADD" else ""
    return 1, error(_cni_version(stdin), TRY_AGAIN, f"{pod}: {command} not run: {why}{waited}",
                    "is the netattach DaemonSet's daemon running on this node?")


def _pod(environ: dict[str, str]) -> str:
    """"pod ns/name" from CNI_ARGS, else "container <id>", for messages."""
    args = dict(kv.split("=", 1) for kv in environ.get("CNI_ARGS", "").split(";") if "=" in kv)
    ns, name = args.get("K8S_POD_NAMESPACE"), args.get("K8S_POD_NAME")
    if ns and name:
        return f"pod {ns}/{name}"
    return f"container {environ.get('CNI_CONTAINERID', '?')}"


def main() -> None:
    """Entry point: the console script `netattach-shim` (a virtualenv), or the script
    `netattach install` writes (netattach.install.binary.shim_script)."""
    try:
        stdin = sys.stdin.buffer.read()
        code, out = shim(dict(os.environ), stdin)
    except Exception as e:  # a bug in the shim: still one CNI error on stdout
        code, out = 1, error(SUPPORTED_VERSIONS[-1], INTERNAL,
                             f"netattach-shim: {type(e).__name__}: {e}")
    if out and not out.endswith(b"\n"):
        out += b"\n"
    while out:
        out = out[os.write(1, out):]
    os._exit(code)
