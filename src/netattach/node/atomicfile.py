"""Replacing a file atomically: the one helper for state files, device-info files and
everything the installer writes. Standard library only (on the exec'd CNI path).

A reader of the target sees the old content or the new, never a mix, and after a crash
the file is whole (old or new): the data goes to a temp file beside the target, is
fsync'ed, renamed over the target, and the directory is fsync'ed so the rename itself
survives a power loss (rename(2) is atomic within one file system).
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)
if TYPE_CHECKING:
    from typing import IO


def temp_path(path: str) -> str:
    """`<dir>/.<name>.tmp-<pid>`: beside `path` (same file system, so the rename is
    atomic), hidden, and ending in neither a config extension nor a plugin name, so no
    runtime loads or execs it; unique per process."""
    directory, name = os.path.split(path)
    return os.path.join(directory, f".{name}.tmp-{os.getpid()}")


def fsync_dir(directory: str) -> None:
    """fsync a directory, so that a rename or unlink in it is on disk. Raises OSError."""
    fd = os.open(directory or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_new(path: str, mode: int, write: Callable[[IO[bytes]], object],
              durable: bool = True) -> None:
    """Create `path` afresh (an entry already there is unlinked first, never followed;
    O_EXCL | O_NOFOLLOW, so a symlink planted at the name is not written through), let
    `write(binary file)` fill it, fsync it (unless not `durable`) and give it `mode`
    whatever the umask. On failure `path` is removed. Raises OSError."""
    with contextlib.suppress(FileNotFoundError, IsADirectoryError):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fchmod(f.fileno(), mode)
            if durable:
                os.fsync(f.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise


def replace(path: str, data: bytes, mode: int, tmp: str | None = None,
            durable: bool = True) -> None:
    """Replace `path` with `data` (file mode `mode`), atomically and durably (module doc).

    tmp: the temp file's path (default `temp_path(path)`); it must be in `path`'s
    directory. A symlink at `path` is replaced, never followed. On failure the temp
    file is removed and `path` is unchanged. Raises OSError (disk full, read-only...).
    durable=False: atomic only (no fsync of the file or the directory): readers and a
    process that crashes still see the old content or the new, whole, but after a
    power loss the file may be the old one (or, on some file systems, empty).
    """
    tmp = tmp or temp_path(path)
    try:
        write_new(tmp, mode, lambda f: f.write(data), durable)
        os.rename(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(os.path.dirname(path))
