"""The node daemon's unix sockets, made the same way for the shim's socket
(server.Daemon._bind) and the DRA kubelet plugin's (dra._serve): a directory of this
uid (0700 when it is ours alone), and a socket left by a daemon that died removed,
never one another process answers on."""
from __future__ import annotations

import os
import socket
import stat


class SocketError(Exception):
    """The dir or socket path cannot be used; the message says why."""


def socket_dir(path: str, own: bool = True) -> None:
    """Make dir `path` (0700) if missing; own: made 0700 even when it exists (the dir is
    ours alone). Either way it must be a directory of this uid. Raises SocketError."""
    try:
        os.makedirs(path, 0o700, exist_ok=True)
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            raise SocketError(f"{path} is not a directory of uid {os.geteuid()}")
        if own:
            os.chmod(path, 0o700)
    except OSError as e:
        raise SocketError(f"cannot use dir {path}: {e.strerror or e}") from None


def clear_stale(path: str) -> None:
    """Remove a socket a process that died left at `path`. Raises SocketError when a
    process answers on it (another daemon) or `path` is not a socket."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise SocketError(f"{path} exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except OSError:
        os.unlink(path)
    else:
        raise SocketError(f"another process answers on {path}")
    finally:
        probe.close()
