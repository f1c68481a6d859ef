"""The memo of thin STATUS's answer: "ready, nothing to forward" remembered for the
exact call that earned it, so the next identical STATUS answers before importing the
configuration's parser and validator.

Why: containerd execs STATUS at every CRI Status call, every few seconds on every
node, with the same configuration each time. Settling it the full way (parse the
request, validate netattach's configuration, read the cluster default network's
file: commands/status.answered_without_forwarding) costs some 20 ms of imports
(dataclasses, re, the generated validator); answered from the memo, STATUS costs
what VERSION costs (docs/performance.md, docs/architecture.md "Decisions").

What a memo holds (`<cniDir>/.status-memo`, 0600, JSON; written only when that full
way answered "ready" without forwarding): the call's key (the digest of the bundle's
sources, the executable's identity, every CNI_* variable, stdin byte for byte), the
readiness indicator file the configuration names (or null), and the identity (device,
inode, size, mtime, ctime) of the cluster default network's file as it was read.
`recall` answers "ready" only when the key is the same, the readiness indicator file
still exists and the file's identity is unchanged: the answer is then the one the full
way would give, since it depends on nothing else (status.py). Any difference, a
missing, foreign or unreadable memo, or a run from source rather than the built
executable (whose code has no digest) is a miss: the full way runs, and writes the
memo afresh (unless the file changed just before it was read: RACY_NS).

Only the node's root writes the state dir (0700); the memo is trusted only when it is
a regular file of this uid that no one else may write. The standard library's os,
stat, sys and time, and cni/jsonutil.py (the C JSON scanner without the `json`
package, whose import brings `re`): it runs before anything else of a STATUS.
"""
from __future__ import annotations

import os
import stat
import sys
import time

from ..cni.jsonutil import dumps, loads_strict
from ..spec.paths import DEFAULT_CNI_DIR

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)
if TYPE_CHECKING:
    from typing import Any

MEMO_NAME = ".status-memo"
"""The memo's file name in the state dir (cniDir); node/statestore.py counts it as
netattach's own, so an uninstall removes it with the dir (a release older than the memo,
installed over it, does not know it, and its uninstall leaves the dir with it)."""
MAX_MEMO = 1 << 21
"""Bytes of a memo read at most: its key holds stdin (at most 1 MiB, cni/stdin.py)."""
RACY_NS = 2_000_000_000
"""A file whose status changed less than this (ns) before it was read is not remembered
(git's "racy" index entries): a write within the same tick of the file system's clock
(a jiffy; up to 2 s on some file systems) could leave size, mtime and ctime as they
were. Files `netattach install` wrote are older than that by the first STATUS."""


def _now_ns() -> int:
    return time.time_ns()


def identity(path: str) -> list[int] | None:
    """[st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns] of `path` (symlinks
    followed, as a read follows them), None when it cannot be stat'ed."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _source_digest() -> str | None:
    """The bundle's SOURCE_DIGEST_FILE (64 hex digits) beside the netattach package, None
    without one."""
    from .. import SOURCE_DIGEST_FILE
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        with open(os.path.join(package, SOURCE_DIGEST_FILE), "rb") as f:
            code = f.read(128).strip().decode("ascii")
    except (OSError, ValueError):
        return None
    return code if len(code) == 64 and not code.strip("0123456789abcdef") else None


def key(environ: dict[str, str], stdin: bytes) -> dict[str, Any] | None:
    """What makes two STATUS calls the same call: the code (the bundle's digest of
    netattach's sources, SOURCE_DIGEST_FILE beside the package: the bootloader
    executable is the same file in every build), the executable (path and identity),
    the CNI_* variables (sorted), stdin (its bytes as latin-1 text, one character each).
    None when not run as the built executable (sys.frozen) or without the digest."""
    if not getattr(sys, "frozen", False) or not isinstance(stdin, bytes):
        return None
    code = _source_digest()
    exe = identity(sys.executable)
    if exe is None or code is None:
        return None
    return {"code": code, "exe": [sys.executable, *exe],
            "env": sorted([k, v] for k, v in environ.items() if k.startswith("CNI_")),
            "stdin": stdin.decode("latin-1")}


def memo_path(config: Any) -> str:
    """The memo's path for a configuration (the decoded stdin): `cniDir` when it is an
    absolute path, else the default state dir. The memo is read only when its key holds
    this same stdin, so a configuration the parser would refuse never has one."""
    cni_dir = config.get("cniDir") if isinstance(config, dict) else None
    if not isinstance(cni_dir, str) or not cni_dir.startswith("/"):
        cni_dir = DEFAULT_CNI_DIR
    return os.path.join(cni_dir, MEMO_NAME)


def recall(environ: dict[str, str], stdin: bytes, config: Any) -> bool:
    """True when the memo for `config` (the decoded stdin) answers this STATUS "ready"
    (module doc). Never raises: anything amiss is False."""
    try:
        return _recall(environ, stdin, config)
    except Exception:  # noqa: BLE001 - a miss: the full way answers
        return False


def _recall(environ: dict[str, str], stdin: bytes, config: Any) -> bool:
    this = key(environ, stdin)
    if this is None:
        return False
    # an OSError or ValueError (no memo, not JSON) is a miss: `recall`
    fd = os.open(memo_path(config), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or st.st_mode & 0o022 or not stat.S_ISREG(st.st_mode):
            return False
        data = os.read(fd, MAX_MEMO)
    finally:
        os.close(fd)
    memo = loads_strict(data)
    if not isinstance(memo, dict) or memo.get("key") != this:
        return False
    ready = memo.get("readiness")
    if ready is not None and (not isinstance(ready, str) or not os.path.exists(ready)):
        return False  # the full way words the refusal
    files = memo.get("files")
    if not isinstance(files, list) or not files:
        return False
    for entry in files:
        if not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[0], str) \
                or identity(entry[0]) != entry[1]:
            return False
    return True


def remember(environ: dict[str, str], stdin: bytes, config: Any, readiness: str | None,
             files: list[list[Any]]) -> None:
    """Write the memo of a STATUS the full way answered "ready" without forwarding:
    `readiness` the readiness indicator file (None: none configured), `files` [[path,
    identity]] of what it read, each taken before the read and found the same after it,
    and none changed within RACY_NS. Into the state dir, made (0700) when its parent
    exists, used only when it is a directory of this uid no one else may write. Never
    raises: a memo not written is a miss next time."""
    try:
        _remember(environ, stdin, config, readiness, files)
    except Exception:  # noqa: BLE001 - the answer stands; a memo is only a shortcut
        pass


def _remember(environ: dict[str, str], stdin: bytes, config: Any, readiness: str | None,
              files: list[list[Any]]) -> None:
    this = key(environ, stdin)
    if this is None or any(ident[4] > _now_ns() - RACY_NS for _, ident in files):
        return
    path = memo_path(config)
    directory = os.path.dirname(path)
    try:
        os.mkdir(directory, 0o700)  # no ADD made it yet; its parent must exist
    except FileExistsError:
        pass
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        return  # not a dir only this uid may write: StateStore refuses it too
    data = dumps({"key": this, "readiness": readiness, "files": files}).encode()
    if len(data) > MAX_MEMO:
        return  # `recall` would not read it whole
    from . import atomicfile
    atomicfile.replace(path, data, 0o600, durable=False)
