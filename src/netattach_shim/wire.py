"""The shim's wire protocol, the one place both ends read it: netattach-shim (the
sender, src/netattach_shim) and the node daemon (the receiver, netattach.daemon.server).
Standard library only, and only `os`, which the interpreter has loaded at start: the
shim's exec'd path stays as lean as its module doc says.

One connection carries one CNI call, over the unix stream socket
`<daemonSocketDir>/netattach.sock`:
* request: each CNI variable the shim has (CNI_ENV), as `NAME=value` followed by a NUL
  byte (an environment entry holds no NUL), then one more NUL, then stdin's bytes as
  they came; then the shim shuts down its sending side. At most MAX_REQUEST bytes.
* answer: the exit status in decimal (0 or 1), a newline, then exactly the bytes for
  stdout (a CNI result or error document, or nothing); the daemon then closes. At most
  MAX_ANSWER bytes.
"""
import os

DEFAULT_SOCKET_DIR = "/run/netattach"
"""daemonSocketDir when the conf does not set it (Multus' key name)."""
SOCKET_NAME = "netattach.sock"
CNI_ENV = ("CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS",
           "CNI_PATH")
"""The variables a request carries, in this order; the daemon refuses any other."""
MAX_REQUEST = 16 << 20
"""Bytes of one request the daemon reads at most (a conf with its prevResult)."""
MAX_ANSWER = 64 << 20
"""Bytes of one answer the shim reads at most."""


def socket_path(socket_dir: str) -> str:
    """The daemon's socket in `socket_dir` (a daemonSocketDir)."""
    return os.path.join(socket_dir, SOCKET_NAME)


def encode_request(environ: dict[str, str], stdin: bytes) -> bytes:
    """The request for the CNI variables of `environ` (others are left out) and stdin.
    Names and values are encoded as the OS gave them (os.fsencode)."""
    env = b"".join(os.fsencode(f"{k}={environ[k]}") + b"\0" for k in CNI_ENV if k in environ)
    return env + b"\0" + stdin


def decode_request(data: bytes) -> tuple[dict[str, str], bytes]:
    """The bytes of one request -> (CNI variables, stdin). Raises ValueError for a
    request that ends inside its variables, or holds an entry without `=`, a name
    outside CNI_ENV, or a name twice."""
    environ: dict[str, str] = {}
    pos = 0
    while True:
        end = data.find(b"\0", pos)
        if end < 0:
            raise ValueError("the request ends inside its variables")
        if end == pos:
            return environ, data[end + 1:]
        name, eq, value = os.fsdecode(data[pos:end]).partition("=")
        if not eq or name not in CNI_ENV or name in environ:
            raise ValueError(f"unexpected variable {name[:40]!r} in the request")
        environ[name] = value
        pos = end + 1


def encode_answer(code: int, stdout: bytes) -> bytes:
    """The answer: exit status `code` (0 or 1), a newline, the stdout bytes."""
    return b"%d\n" % code + stdout


def decode_answer(data: bytes) -> tuple[int, bytes]:
    """The bytes of one whole answer -> (exit status, stdout bytes). Raises ValueError
    when `data` is not a whole answer (no newline, a status other than 0 or 1): the
    daemon closed the connection before it had answered."""
    status, newline, out = data.partition(b"\n")
    if not newline or status not in (b"0", b"1"):
        raise ValueError("not a whole answer")
    return int(status), out
