"""The installer's file helpers: atomic replacement, reading a regular file without
following a symlink, its own directories, and the temp entries an interrupted
installer leaves.

Every write is a temp file (or dir, or symlink) beside the target, fsync'ed,
renamed over the target, then the directory fsync'ed. Temp names never end in
`.conf`/`.conflist`/`.json` and never equal `netattach`, so neither the runtime's
config loader nor its plugin lookup ever sees one; they are created with
O_EXCL|O_NOFOLLOW, so a symlink planted at a temp name is never followed.
"""
from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import stat
from typing import Any, Callable

MAX_CONFIG_BYTES = 1 << 20
"""The most the installer reads of a config, kubeconfig or ServiceAccount file."""


class InstallError(Exception):
    """A step failed; the message names what and where. The installer exits 1 on it."""


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove(path: str) -> None:
    """Remove a file, symlink or directory tree at `path` without following a symlink."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def write_new(path: str, mode: int, write: Callable[[Any], None]) -> None:
    """Create `path` afresh (a stale entry there is removed first, never followed), let
    `write(binary file object)` fill it, fsync, chmod `mode`. On failure `path` is removed."""
    remove(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise


def temp_name(directory: str, name: str) -> str:
    """`<directory>/.<name>.tmp-<pid>`: hidden, and ends in neither a config extension nor
    `netattach`, so no runtime loads or execs it."""
    return os.path.join(directory, f".{name}.tmp-{os.getpid()}")


def rename_over(tmp: str, path: str) -> None:
    """Rename the finished temp entry `tmp` over `path` (one atomic step: a reader sees
    the old or the new entry), then fsync the directory. On failure `tmp` is removed."""
    try:
        os.rename(tmp, path)
    except BaseException:
        remove(tmp)
        raise
    fsync_dir(os.path.dirname(path))


def write_atomic(path: str, data: bytes, mode: int) -> None:
    """Replace `path` with `data` (file mode `mode`) so that a reader sees the old or the
    new content, never a mix: temp file beside it, fsync, rename, fsync of the dir.

    A symlink or file at `path` is replaced, not followed. Raises OSError.
    """
    tmp = temp_name(*os.path.split(path))
    write_new(tmp, mode, lambda f: f.write(data))
    rename_over(tmp, path)


def replace_if_changed(path: str, data: bytes, mode: int, what: str) -> tuple[bool, bytes | None]:
    """Write `data` to `path` atomically (write_atomic) unless the regular file there
    already holds it. Returns (written, the content before: None when there was no
    regular file or it could not be read). Raises InstallError naming `what` when the
    write fails."""
    try:
        current = read_regular(path)
    except OSError:
        current = None
    if current == data:
        return False, current
    try:
        write_atomic(path, data, mode)
    except OSError as e:
        raise InstallError(f"cannot write {what} {path}: {e.strerror}") from None
    return True, current


def read_regular(path: str, limit: int = MAX_CONFIG_BYTES) -> bytes | None:
    """Content of the regular file at `path` (not through a symlink), or None when there
    is none or it is something else. Raises OSError for other read failures."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:  # a symlink: not a file we wrote
            return None
        raise
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        return f.read(limit + 1)


def ensure_dir(path: str, mode: int, own: bool = False) -> None:
    """Create `path` (parents too, `mode`) or check it is a directory. When `own` (a dir
    only netattach uses) it must be a real directory, not a symlink, and an existing one
    gets `mode`. Raises InstallError."""
    try:
        os.makedirs(path, mode, exist_ok=True)
        st = os.lstat(path) if own else os.stat(path)
        if not stat.S_ISDIR(st.st_mode):
            raise InstallError(f"{path} is not a directory{' (a symlink?)' if own else ''}; "
                               "refusing to use it")
        if own and stat.S_IMODE(st.st_mode) != mode:
            os.chmod(path, mode)
    except OSError as e:
        raise InstallError(f"cannot create directory {path}: {e.strerror}") from None


def remove_stale_temps(directory: str, pattern: re.Pattern[str]) -> list[str]:
    """Remove the entries of `directory` whose names match `pattern` (temp files, dirs or
    symlinks an interrupted installer left). Returns the removed paths; [] when the dir is
    absent."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    removed = []
    for name in names:
        if pattern.match(name):
            remove(os.path.join(directory, name))
            removed.append(os.path.join(directory, name))
    return removed

