"""The netattach executable in the host's CNI bin dir: copying the artifact (a single
file, or a PyInstaller onedir tree under a versioned dir behind a symlink) so that a
runtime exec'ing the plugin never sees a partial one, and comparing what is installed
with the artifact (for --check)."""
from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import stat
import sys
from typing import Any

from ..node import atomicfile
from ..node.nodefiles import BIN_TEMP, BINARY_NAME, SHIM_NAME, VERSION_DIR  # noqa: F401
from .files import InstallError, read_regular, remove

log = logging.getLogger(__name__)

_CHUNK = 1 << 20


def _temp(bin_dir: str) -> str:
    """atomicfile.temp_path of `<bin_dir>/netattach`: `.netattach.tmp-<pid>`, hidden, and
    (with any suffix the caller adds) neither a config name nor `netattach`."""
    return atomicfile.temp_path(os.path.join(bin_dir, BINARY_NAME))


def _swap_in(tmp: str, path: str) -> None:
    """Rename the finished temp entry `tmp` (a file, a directory tree or a symlink) over
    `path`, one atomic step, then fsync the directory (atomicfile.fsync_dir). What
    atomicfile.replace does for bytes, for the entries that are not. On failure `tmp`
    is removed. Raises OSError."""
    try:
        os.rename(tmp, path)
    except BaseException:
        remove(tmp)
        raise
    atomicfile.fsync_dir(os.path.dirname(path))


def default_source() -> str | None:
    """The artifact this process runs from, or None when it is not a frozen build.

    PyInstaller sets `sys.frozen`. A onedir build has `sys._MEIPASS` inside (or equal
    to) the directory of `sys.executable`: the artifact is that directory. A onefile
    build unpacks to a temp `_MEIPASS` elsewhere: the artifact is `sys.executable`.
    """
    if not getattr(sys, "frozen", False):
        return None
    exe = os.path.realpath(sys.executable)
    here = os.path.dirname(exe)
    meipass = os.path.realpath(getattr(sys, "_MEIPASS", "") or "/nonexistent")
    if meipass == here or meipass.startswith(here + os.sep):
        return here
    return exe


def _file_digest(path: str, h: Any) -> None:
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)


def tree_digest(root: str) -> str:
    """First 12 hex digits of a sha256 over a directory tree: every entry's relative
    path and kind, a file's exec bit and bytes, a symlink's target; names in byte order.

    Symlinks are hashed, not followed. Raises OSError.
    """
    h = hashlib.sha256()

    def walk(directory: str, rel: str) -> None:
        for entry in sorted(os.scandir(directory), key=lambda e: e.name):
            path = f"{rel}/{entry.name}" if rel else entry.name
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                h.update(f"l {len(path)}:{path} {os.readlink(entry.path)}\n".encode())
            elif stat.S_ISDIR(st.st_mode):
                h.update(f"d {len(path)}:{path}\n".encode())
                walk(entry.path, path)
            elif stat.S_ISREG(st.st_mode):
                h.update(f"f {len(path)}:{path} {int(bool(st.st_mode & 0o111))} "
                         f"{st.st_size}\n".encode())
                _file_digest(entry.path, h)
            else:
                raise InstallError(f"{entry.path} in the artifact is neither a file, a "
                                   "directory nor a symlink")

    walk(root, "")
    return h.hexdigest()[:12]


def _same_file_content(a: str, b: str) -> bool:
    with open(a, "rb") as fa, open(b, "rb") as fb:
        if os.fstat(fa.fileno()).st_size != os.fstat(fb.fileno()).st_size:
            return False
        while True:
            ca, cb = fa.read(_CHUNK), fb.read(_CHUNK)
            if ca != cb:
                return False
            if not ca:
                return True


def _copy_into(source: str, path: str, mode: int | None = None) -> None:
    """Copy the file `source` to a fresh `path`, fsync'ed, with `mode` (default: 0755 when
    `source` has an exec bit, else 0644)."""
    if mode is None:
        mode = 0o755 if os.stat(source).st_mode & 0o111 else 0o644
    with open(source, "rb") as src:
        atomicfile.write_new(path, mode, lambda f: shutil.copyfileobj(src, f, _CHUNK))


def _copy_tree(source: str, dest: str) -> None:
    """Copy the tree `source` into the existing empty dir `dest`: files (fsync'ed, 0755
    or 0644), symlinks as symlinks, dirs 0755 (fsync'ed)."""
    for entry in sorted(os.scandir(source), key=lambda e: e.name):
        target = os.path.join(dest, entry.name)
        if entry.is_symlink():
            os.symlink(os.readlink(entry.path), target)
        elif entry.is_dir(follow_symlinks=False):
            os.mkdir(target, 0o755)
            _copy_tree(entry.path, target)
        else:
            _copy_into(entry.path, target)
    atomicfile.fsync_dir(dest)


def _linked_version(bin_dir: str) -> str | None:
    """The `.netattach-<digest>` dir `<bin_dir>/netattach` links to, if it is such a link."""
    try:
        target = os.readlink(os.path.join(bin_dir, BINARY_NAME))
    except OSError:
        return None
    head, _, tail = target.partition("/")
    return head if tail == BINARY_NAME and VERSION_DIR.match(head) else None


def _install_tree(source: str, bin_dir: str) -> tuple[bool, str]:
    """Copy the onedir `source` to `<bin_dir>/.netattach-<digest>/` (temp dir + rename)
    unless that dir already holds the same content, then point `<bin_dir>/netattach` at
    `.netattach-<digest>/netattach` with a relative symlink (temp link + rename).
    Returns (anything changed, version dir name)."""
    exe = os.path.join(source, BINARY_NAME)
    if not (os.path.isfile(exe) and not os.path.islink(exe) and os.access(exe, os.X_OK)):
        raise InstallError(f"artifact directory {source} has no executable file {BINARY_NAME}")
    digest = tree_digest(source)
    name = f".netattach-{digest}"
    final = os.path.join(bin_dir, name)
    changed = False
    if os.path.lexists(final):
        st = os.lstat(final)
        if not stat.S_ISDIR(st.st_mode) or tree_digest(final) != digest:
            log.warning("%s does not hold the artifact's content; replacing it", final)
            aside = _temp(bin_dir) + ".old"
            remove(aside)
            os.rename(final, aside)
            remove(aside)
    if not os.path.lexists(final):
        tmp = _temp(bin_dir) + ".d"
        remove(tmp)
        os.mkdir(tmp, 0o755)
        try:
            _copy_tree(source, tmp)
        except BaseException:
            remove(tmp)
            raise
        _swap_in(tmp, final)
        log.info("copied artifact directory %s to %s", source, final)
        changed = True
    link = os.path.join(bin_dir, BINARY_NAME)
    want = f"{name}/{BINARY_NAME}"
    if not (os.path.islink(link) and os.readlink(link) == want):
        tmp_link = _temp(bin_dir) + ".link"
        remove(tmp_link)
        os.symlink(want, tmp_link)
        _swap_in(tmp_link, link)
        log.info("pointed %s at %s", link, want)
        changed = True
    return changed, name


def _install_file(source: str, bin_dir: str) -> bool:
    """Replace `<bin_dir>/netattach` with a 0755 copy of `source` (temp + fsync + rename)
    unless it is already a regular 0755 file with the same bytes. Returns whether it
    changed anything."""
    target = os.path.join(bin_dir, BINARY_NAME)
    st = os.lstat(target) if os.path.lexists(target) else None
    if (st is not None and stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o755
            and _same_file_content(source, target)):
        return False
    tmp = _temp(bin_dir)
    _copy_into(source, tmp, 0o755)
    _swap_in(tmp, target)
    log.info("copied %s to %s", source, target)
    return True


def install_binary(source: str, bin_dir: str) -> bool:
    """Install the artifact `source` as `<bin_dir>/netattach`; returns whether anything
    changed.

    source: a single executable file (copied to `<bin_dir>/netattach`) or a PyInstaller
    onedir directory holding `netattach` and `_internal/` (copied to
    `<bin_dir>/.netattach-<12 hex of its content sha256>/`, `netattach` a relative
    symlink into it, so the bootloader finds `_internal/` beside its real path).
    Either way the switch is one rename: a runtime exec'ing the plugin (CNI SPEC.md:
    the plugin is looked up by name in the bin dir) sees the old or the new one, never
    a partial file. Afterwards every `.netattach-*` dir but the current one and the one
    just replaced (an ADD may still run from it) is removed.

    Raises InstallError when `<bin_dir>/netattach` is a directory or the source is
    unusable, OSError on I/O failures.
    """
    target = os.path.join(bin_dir, BINARY_NAME)
    if os.path.isdir(target) and not os.path.islink(target):
        raise InstallError(f"{target} is a directory; refusing to replace it")
    if not os.path.exists(source):
        raise InstallError(f"artifact {source} does not exist")
    previous = _linked_version(bin_dir)
    if os.path.isdir(source):
        changed, current = _install_tree(source, bin_dir)
    else:
        changed, current = _install_file(source, bin_dir), None
    keep = {current, previous if changed else None}
    for name in os.listdir(bin_dir):
        if VERSION_DIR.match(name) and name not in keep:
            remove(os.path.join(bin_dir, name))
            log.info("removed old version %s", os.path.join(bin_dir, name))
    if not changed:
        log.info("%s is already the artifact %s; not copied", target, source)
    return changed


def binary_problem(source: str | None, bin_dir: str, digest: str | None = None) -> str | None:
    """None when `<bin_dir>/netattach` is the installed `source`, else what is wrong.

    Without a source (not frozen, no --source) it only checks that an executable
    `netattach` is there. digest: tree_digest(source) of an onedir source when the
    caller knows it (the installer's record: the image cannot change it), so it is
    not hashed again. Reads only; raises nothing for missing files.
    """
    target = os.path.join(bin_dir, BINARY_NAME)
    try:
        if source is None:
            ok = os.access(target, os.X_OK) and os.path.isfile(target)
            return None if ok else f"{target} is missing or not executable"
        if os.path.isdir(source):
            want = f".netattach-{digest or tree_digest(source)}/{BINARY_NAME}"
            if not (os.path.islink(target) and os.readlink(target) == want
                    and os.path.isfile(os.path.join(bin_dir, want))):
                return f"{target} does not point to {want} (the artifact {source})"
            return None
        st = os.lstat(target)
        if (not stat.S_ISREG(st.st_mode) or stat.S_IMODE(st.st_mode) != 0o755
                or not _same_file_content(source, target)):
            return f"{target} differs from the artifact {source} (content or mode 0755)"
        return None
    except OSError as e:
        return f"cannot compare {target} with the artifact {source}: {e.strerror}"



SHIM_PYTHON = "shim/bin/python3"
"""The shim's interpreter inside the onedir artifact (netattach.spec lays out shim/ as a
Python prefix: bin/python3, lib/, lib/python3.X/ holding netattach_shim)."""
SHEBANG_MAX = 127
"""The longest `#!` line (bytes, newline excluded) every Linux kernel reads whole:
BINPRM_BUF_SIZE was 128 before Linux 5.1 (binfmt_script truncates the rest)."""
_SHEBANG_PATH = re.compile(r"/[A-Za-z0-9._+/-]*")
"""What a host bin dir may be to go into the shim's `#!` line: absolute, and no byte
the kernel would split the line at (blank) or end it with (newline), nor any other byte
a shell-free exec would treat differently."""


def shim_script(interpreter: str) -> bytes:
    """The text of `<bin_dir>/netattach-shim`: a Python script whose `#!` line runs
    `interpreter` (the absolute path, as the runtime's host sees it, of the artifact's
    SHIM_PYTHON) with -S (no site: nothing read from site-packages or .pth files) and -I
    (isolated: no PYTHON* variable of the runtime's environment, no user site, no
    script dir on sys.path), then netattach_shim.main from the interpreter's own
    lib/python3.X/. The kernel passes "-SI" as one argument, which Python parses as two
    flags (execve(2), "Interpreter scripts"). Raises InstallError when `interpreter`
    cannot go into a `#!` line (not absolute; a blank, a newline or another byte outside
    [A-Za-z0-9._+/-]; the line longer than SHEBANG_MAX)."""
    line = f"#!{interpreter} -SI"
    if not _SHEBANG_PATH.fullmatch(interpreter) or len(line.encode()) > SHEBANG_MAX:
        raise InstallError(
            f"thick mode's shim cannot start its interpreter {interpreter!r} from a `#!` "
            f"line: the path must be absolute, of the characters A-Z a-z 0-9 . _ + / -, "
            f"and the line at most {SHEBANG_MAX} bytes (--host-bin-dir)")
    return (f"{line}\n"
            "# netattach-shim, thick mode's CNI plugin: written by `netattach install`\n"
            "# (netattach.install.binary.shim_script); it forwards each call to the\n"
            "# node's netattach daemon.\n"
            "from netattach_shim import main\n"
            "main()\n").encode()


def _shim_interpreter(bin_dir: str, host_bin_dir: str) -> str:
    """The host path of the installed artifact's shim interpreter,
    `<host_bin_dir>/.netattach-<digest>/shim/bin/python3`. Raises InstallError when the
    installed artifact is not a onedir build with a shim."""
    version = _linked_version(bin_dir)
    if version is None:
        raise InstallError(f"thick mode needs the onedir artifact (with its shim/ dir) "
                           f"installed as {os.path.join(bin_dir, BINARY_NAME)}")
    if not os.path.isfile(os.path.join(bin_dir, version, SHIM_PYTHON)):
        raise InstallError(f"the artifact {os.path.join(bin_dir, version)} has no "
                           f"{SHIM_PYTHON}: build it with `make build`")
    return os.path.join(host_bin_dir, version, SHIM_PYTHON)


def install_shim(bin_dir: str, host_bin_dir: str) -> bool:
    """Write `<bin_dir>/netattach-shim` (0755, temp file + fsync + rename: a runtime never
    finds it missing or partial), the shim_script of the installed artifact's
    interpreter as the host sees it (`host_bin_dir`: the same dir as the runtime sees
    it, --host-bin-dir); returns whether it changed. Call after install_binary.
    Raises InstallError (no shim in the artifact, a host path no `#!` line can hold),
    OSError."""
    want = shim_script(_shim_interpreter(bin_dir, host_bin_dir))
    path = os.path.join(bin_dir, SHIM_NAME)
    if _is_file_with(path, want):
        return False
    tmp = _temp(bin_dir) + ".shim"
    remove(tmp)
    atomicfile.write_new(tmp, 0o755, lambda f: f.write(want))
    _swap_in(tmp, path)
    log.info("wrote %s (runs %s)", path, want.split(b"\n", 1)[0][2:].decode())
    return True


def _is_file_with(path: str, content: bytes) -> bool:
    """Whether `path` is a regular 0755 file (not a symlink) holding exactly `content`
    (files.read_regular: never follows a link, never blocks on a FIFO)."""
    try:
        return read_regular(path) == content and stat.S_IMODE(os.lstat(path).st_mode) == 0o755
    except OSError:
        return False


def shim_problem(bin_dir: str, host_bin_dir: str) -> str | None:
    """None when `<bin_dir>/netattach-shim` is the script install_shim writes for the
    installed artifact, else what is wrong. Reads only."""
    try:
        interpreter = _shim_interpreter(bin_dir, host_bin_dir)
        want = shim_script(interpreter)
    except InstallError as e:
        return str(e)
    path = os.path.join(bin_dir, SHIM_NAME)
    if not _is_file_with(path, want):
        return f"{path} is not the shim script for {interpreter}"
    return None
