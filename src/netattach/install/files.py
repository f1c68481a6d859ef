"""The installer's own file rules, on top of netattach.node.atomicfile: rewriting a file
only when its content changes, reading a regular file without following a symlink,
the directories the installer creates, and removing the temp entries an interrupted
installer left.

Every write goes through netattach.node.atomicfile (the binary's tree and symlink too:
binary.py): a temp entry beside the target, fsync'ed, renamed over it, then the
directory fsync'ed. Temp names are atomicfile.temp_path's, `.<name>.tmp-<pid>`
(plus a suffix for the binary's), so they never end in `.conf`/`.conflist`/`.json`
and never equal `netattach`: neither the runtime's config loader nor its plugin
lookup ever sees one. Files are created O_EXCL|O_NOFOLLOW (atomicfile.write_new),
so a symlink planted at a temp name is never followed.
"""
from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import stat

from ..node import atomicfile

MAX_CONFIG_BYTES = 1 << 20
"""The most the installer reads of a config, kubeconfig or ServiceAccount file."""


class InstallError(Exception):
    """A step failed; the message names what and where. The installer exits 1 on it."""


def remove(path: str) -> None:
    """Remove a file, symlink or directory tree at `path` without following a symlink;
    nothing there is fine. Raises OSError."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def replace_if_changed(path: str, data: bytes, mode: int, what: str) -> tuple[bool, bytes | None]:
    """Write `data` to `path` (mode `mode`) with atomicfile.replace unless the regular
    file there already holds it (read_regular). Returns (written, the content before:
    None when there was no regular file or it could not be read). Raises InstallError
    naming `what` when the write fails."""
    try:
        current = read_regular(path)
    except OSError:
        current = None
    if current == data:
        return False, current
    try:
        atomicfile.replace(path, data, mode)
    except OSError as e:
        raise InstallError(f"cannot write {what} {path}: {e.strerror}") from None
    return True, current


def read_regular(path: str) -> bytes | None:
    """Content of the regular file at `path` (not through a symlink), at most
    MAX_CONFIG_BYTES + 1 bytes, or None when there is none or it is something else
    (a symlink, a directory, a FIFO: O_NONBLOCK, so opening one never blocks).
    Raises OSError for other failures."""
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
        return f.read(MAX_CONFIG_BYTES + 1)


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
    symlinks an interrupted installer left: names of atomicfile.temp_path's shape,
    `.<name>.tmp-<pid>`, the pattern's to match). Returns the removed paths; [] when the
    dir is absent. Raises OSError when it cannot be listed or an entry removed."""
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

