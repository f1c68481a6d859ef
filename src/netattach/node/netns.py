"""The one way into a pod's network namespace: open its path, switch a thread there,
and never leave a thread of this process in it by mistake.

setns(2) with CLONE_NEWNET changes only the calling thread's network namespace; a
socket keeps the namespace it was created in. Two ways in:

* `run_inside(path, fn)`: `fn` runs in a short-lived worker thread that enters the
  netns and then ends, so no thread is left in it (netnsinfo reads MTUs this way);
* `inside(path)`: a context manager that switches the calling thread in and always
  back (the thread's own netns is opened first); a thread that cannot switch back
  gets `NetnsStuck` (routes.py opens its netlink socket this way, inside the netns,
  and uses it after switching back).

Opening the path: read-only, close-on-exec, never created (pyroute2's `netns=` mode
creates a missing named netns; netattach never does). setns through os.setns from
Python 3.12, else libc's through ctypes (imported only then). Standard library only:
the exec'd ADD imports this module for every pod (netnsinfo), so it must not bring
pyroute2 or any other library.

Errors are named by the step that failed: `NetnsOpenError` (the path), `NetnsEnterError`
(setns: not a network namespace, no permission), both OSErrors carrying the errno;
`NetnsStuck` when the calling thread could not return to its own namespace.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["NetnsError", "NetnsOpenError", "NetnsEnterError", "NetnsStuck",
           "inside", "run_inside"]

CLONE_NEWNET = 0x40000000
_OWN = "/proc/thread-self/ns/net"

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)
if TYPE_CHECKING:
    from typing import Any, TypeVar

    T = TypeVar("T")


class NetnsError(OSError):
    """The pod netns at `path` could not be used; `errno`/`strerror` are the system's."""

    def __init__(self, errno_: int | None, strerror: str | None, path: str) -> None:
        super().__init__(errno_, strerror)
        self.path = path


class NetnsOpenError(NetnsError):
    """open(2) of the netns path failed (missing, no permission); its text names the
    path, as open's own OSError does."""

    def __init__(self, errno_: int | None, strerror: str | None, path: str) -> None:
        OSError.__init__(self, errno_, strerror, path)
        self.path = path


class NetnsEnterError(NetnsError):
    """setns(2) into the opened path failed (not a network namespace, no permission)."""


class NetnsStuck(RuntimeError):
    """The calling thread entered a pod netns and could not switch back to its own."""


_libc_setns: Any = None
"""libc's setns through ctypes, loaded on the first call (Python before 3.12)."""


def _setns(fd: int) -> None:
    """setns(2) of the calling thread into the network namespace `fd`: os.setns from
    Python 3.12, else libc's through ctypes (imported and loaded once, on the first
    call: a CDLL per call cost the node daemon about 0.7 ms of GIL-held time per pod,
    py-spy on the real node, 2026-11-29). Raises OSError."""
    global _libc_setns
    setns = getattr(os, "setns", None)
    if setns is not None:
        setns(fd, CLONE_NEWNET)
        return
    import ctypes
    if _libc_setns is None:
        _libc_setns = ctypes.CDLL(None, use_errno=True).setns
    if _libc_setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _open(path: str) -> int:
    """A read-only, close-on-exec fd of `path`. Raises NetnsOpenError."""
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise NetnsOpenError(e.errno, e.strerror, path) from e


def _enter(fd: int, path: str) -> None:
    """setns(2) of the calling thread into `fd` (opened from `path`). Raises
    NetnsEnterError."""
    try:
        _setns(fd)
    except OSError as e:
        raise NetnsEnterError(e.errno, e.strerror, path) from e


@contextmanager
def inside(path: str) -> Iterator[None]:
    """Run the body with the calling thread in the network namespace at `path`.

    The thread's own netns (/proc/thread-self/ns/net) is opened before it leaves, and
    the thread switches back when the body ends, by return or by exception.

    Raises:
        NetnsOpenError: `path` cannot be opened (before anything changed).
        NetnsEnterError: setns(2) into it failed (the thread did not move).
        NetnsStuck: the thread could not switch back (it stays in the pod netns; the
            caller must not go on using it as if it had returned).
    """
    target = _open(path)
    try:
        own = os.open(_OWN, os.O_RDONLY | os.O_CLOEXEC)
        try:
            _enter(target, path)
            try:
                yield
            finally:
                try:
                    _setns(own)
                except OSError as e:  # pragma: no cover - setns to our own netns
                    raise NetnsStuck("cannot return to the original network namespace "
                                     f"after entering {path}: {e}") from e
        finally:
            os.close(own)
    finally:
        os.close(target)


def run_inside(path: str, fn: Callable[[], T], thread_name: str = "netns") -> T:
    """`fn()` run by a new thread inside the network namespace at `path`; the thread
    ends with it, so no thread of the process stays in the pod netns.

    Returns what `fn` returns. Raises what `fn` raises, or NetnsOpenError /
    NetnsEnterError (fn did not run).
    """
    out: list[T] = []
    failed: list[BaseException] = []

    def worker() -> None:
        try:
            fd = _open(path)
            try:
                _enter(fd, path)
            finally:
                os.close(fd)
            out.append(fn())
        except BaseException as e:  # handed to the caller's thread
            failed.append(e)

    t = threading.Thread(target=worker, name=thread_name)
    t.start()
    t.join()
    if failed:
        raise failed[0]
    return out[0]
