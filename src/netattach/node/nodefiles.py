"""netattach's files on a node, by name, and their removal once it is uninstalled.

`netattach install` puts these on a node (the installer's modules take the names
from here, so the installer and the plugin's removal agree on them):
* `<conf dir>/00-netattach.conflist` (CONFLIST_NAME): the conflist the runtime loads;
* `<conf dir>/netattach.d/` (KUBECONFIG_DIR_NAME, 0700): the plugin's kubeconfig, the
  API server's CA, and `installer.lock` (PRESENCE_LOCK_NAME), on which every running
  installer holds a shared flock for its lifetime (install/loop.py);
* in the bin dir: `netattach` (BINARY_NAME: the executable, or a symlink into
  `.netattach-<12 hex>/`, the onedir artifact: VERSION_DIR), `netattach-shim`
  (SHIM_NAME, thick mode: a symlink into that dir), and the temp entries of an
  interrupted copy (BIN_TEMP);
* the state dir (`cniDir`): what ADD saved; statestore.StateStore owns its layout.

`remove_when_unused` removes all of them, and only when nothing needs them any more
(docs/install-lifecycle.md): the conflist is still the retired one the installer wrote
when it was told netattach is uninstalled (`retired` in its plugin entry; a reinstall
replaces it with an active one, and then nothing is removed), no installer runs on
the node (none holds the presence lock), no retired CNI operation runs (each holds a
shared flock on the retired conflist, retired.py), no sandbox has saved state and no
operation holds a container's lock. The runtime then has only the cluster default
network's config left, as before netattach.

Standard library and state.py only: the plugin imports this in retired mode only.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import shutil
import stat
from dataclasses import dataclass

from ..spec.netconf import CONFLIST_NAME as CONFLIST_NAME  # netattach's files by name
from . import atomicfile
from .libcni_cache import CACHE_DIR, remove_network
from .state import StateError
from .statestore import StateStore

KUBECONFIG_DIR_NAME = "netattach.d"
"""`<conf dir>/netattach.d/`: the plugin's kubeconfig, the CA, the presence lock."""
PRESENCE_LOCK_NAME = "installer.lock"
"""In KUBECONFIG_DIR_NAME: a shared flock per running installer; an exclusive one while
netattach's files are removed."""
BINARY_NAME = "netattach"
SHIM_NAME = "netattach-shim"
"""Thick mode's plugin: `<bin>/netattach-shim`, a link to the shim bundle inside the
installed artifact (`.netattach-<digest>/shim/netattach-shim`, netattach.spec)."""
VERSION_DIR = re.compile(r"^\.netattach-[0-9a-f]{12}$")
BIN_TEMP = re.compile(r"^\.netattach\.tmp-")
"""The bin dir's temp entries: atomicfile.temp_path of `netattach`, with a suffix for a
tree, a symlink or a version dir set aside (install/binary.py)."""
RETIRED_KEY = "retired"
"""The key of a retired conflist's plugin entry: {"conflist": its own host path}
(netconf.NetConf.retired_conflist)."""
MAX_CONFLIST_BYTES = 1 << 20

log = logging.getLogger("netattach.nodefiles")

# what remove_when_unused found (Removal.outcome)
REMOVED = "removed"
GONE = "gone"                # no conflist: removed already, or never written
NOT_RETIRED = "not retired"  # an active conflist (reinstalled), or not netattach's
INSTALLER = "installer"      # an installer runs on the node
BUSY = "busy"                # a CNI operation runs: it or the next one removes them
ATTACHED = "attached"        # sandboxes netattach attached are still there
UNKNOWN = "unknown"          # the state dir could not be read: nothing removed


@dataclass(frozen=True)
class Removal:
    """What `remove_when_unused` did: `outcome` (one of the names above), `detail` for a
    log line, `left`: paths it should have removed and could not (logged at ERROR)."""
    outcome: str
    detail: str
    left: tuple[str, ...] = ()


def is_retired(doc: object) -> bool:
    """True when `doc` (a decoded conflist or conf) is netattach's retired one: its
    (first) plugin entry has RETIRED_KEY as an object."""
    if not isinstance(doc, dict):
        return False
    plugins = doc.get("plugins")
    entry = plugins[0] if isinstance(plugins, list) and plugins else doc
    return isinstance(entry, dict) and isinstance(entry.get(RETIRED_KEY), dict)


def lock_conflist(path: str, exclusive: bool) -> int | None:
    """Open the conflist at `path` (not through a symlink) and flock it: shared
    (blocking: a removal holds it for a moment) or `exclusive` (never waits; None when
    someone holds it). Returns the fd, None when there is no such file or the exclusive
    lock is taken. The caller closes the fd. Raises OSError for other failures."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        if exclusive:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return None
        else:
            fcntl.flock(fd, fcntl.LOCK_SH)
    except BaseException:
        os.close(fd)
        raise
    return fd


def still_there(fd: int, path: str) -> bool:
    """True when `fd` is still the file at `path` (not removed, not replaced by a rename)."""
    try:
        mine, there = os.fstat(fd), os.lstat(path)
    except FileNotFoundError:
        return False
    return mine.st_nlink > 0 and (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino)


def _retired_content(fd: int) -> bool:
    """True when the regular file open at `fd` holds a retired conflist."""
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        return False
    data = os.pread(fd, MAX_CONFLIST_BYTES + 1, 0)
    try:
        return len(data) <= MAX_CONFLIST_BYTES and is_retired(json.loads(data))
    except (ValueError, RecursionError):
        return False


def kubeconfig_dir(conflist: str) -> str:
    """`<the conflist's dir>/netattach.d`."""
    return os.path.join(os.path.dirname(conflist), KUBECONFIG_DIR_NAME)


def _take_presence(kube_dir: str) -> int | None:
    """An exclusive flock on `<kube_dir>/installer.lock`, never waiting (made, with its
    dir, when absent: an installer starting now then waits for the removal); None when
    an installer holds it. Raises OSError."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(kube_dir, 0o700)
    fd = os.open(os.path.join(kube_dir, PRESENCE_LOCK_NAME),
                 os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def remove_when_unused(conflist: str, bin_dir: str, cni_dir: str,
                       presence_fd: int | None = None, network: str | None = None,
                       cache_dir: str = CACHE_DIR) -> Removal:
    """Remove netattach's files from the node when nothing needs them (module doc).

    conflist, bin_dir, cni_dir: the conflist, the CNI bin dir and the state dir as this
    process sees them (the plugin: host paths, from its retired configuration; the
    installer: its mounts). presence_fd: the installer's own presence lock, held
    exclusively already (it removes the files as it exits); None: taken here without
    waiting. network: the conflist's network name, whose entries in the runtime's
    libcni cache `cache_dir` go too (libcni_cache.remove_network: the runtime DELs
    through another network name once the conflist is gone, so the sandboxes ADDed with
    the retired conflist would leave theirs for ever); None: none.

    Removes, in this order: the conflist (the runtime stops calling netattach), the
    state dir's netattach entries and the dir, the bin dir's netattach entries,
    `<conf dir>/netattach.d/`, the cache entries. Never waits for a lock and never
    raises: what could not be removed is in `left`.
    """
    try:
        fd = lock_conflist(conflist, exclusive=True)
    except OSError as e:
        return Removal(NOT_RETIRED, f"{conflist} cannot be opened ({e.strerror}); nothing "
                                    "removed")
    if fd is None:
        if not os.path.lexists(conflist):
            return Removal(GONE, f"{conflist} is not there")
        return Removal(BUSY, f"a CNI operation with the retired {conflist} runs; it removes "
                             "netattach's files when it ends")
    presence = presence_fd
    try:
        if not (still_there(fd, conflist) and _retired_content(fd)):
            return Removal(NOT_RETIRED, f"{conflist} is not the retired conflist any more "
                                        "(netattach was installed again); nothing removed")
        kube_dir = kubeconfig_dir(conflist)
        if presence is None:
            try:
                presence = _take_presence(kube_dir)
            except OSError as e:
                return Removal(UNKNOWN, f"cannot lock {kube_dir}/{PRESENCE_LOCK_NAME} "
                                        f"({e.strerror}); nothing removed")
            if presence is None:
                return Removal(INSTALLER, "a netattach installer runs on this node; nothing "
                                          "removed")
        store = StateStore(cni_dir)
        try:
            attached = store.container_ids()
            running = store.operations_running()
        except StateError as e:
            return Removal(UNKNOWN, f"{e}; nothing removed")
        if attached:
            return Removal(ATTACHED, f"{len(attached)} sandbox(es) attached by netattach "
                                     f"remain ({', '.join(attached[:5])}"
                                     f"{', ...' if len(attached) > 5 else ''}); their DEL "
                                     "removes netattach's files after the last one")
        if running:
            return Removal(BUSY, f"an operation on container {running[0]} runs")
        left = _remove_all(conflist, bin_dir, store, kube_dir)
        if network is not None:
            left += remove_network(network, cache_dir)
        return Removal(REMOVED, f"removed {conflist}, netattach's entries in {bin_dir}, "
                                f"{cni_dir} and {kube_dir}", tuple(left))
    finally:
        os.close(fd)
        if presence is not None and presence_fd is None:
            os.close(presence)


def _remove(path: str, left: list[str]) -> None:
    """Remove the file, symlink or directory tree at `path`, not following a symlink;
    nothing there is fine; a failure is appended to `left`."""
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        left.append(f"{path} ({e.strerror})")


def _remove_all(conflist: str, bin_dir: str, store: StateStore, kube_dir: str) -> list[str]:
    """Remove the files (remove_when_unused's order); returns what could not be."""
    left: list[str] = []

    def remove(path: str) -> None:
        _remove(path, left)

    remove(conflist)
    with contextlib.suppress(OSError):
        atomicfile.fsync_dir(os.path.dirname(conflist))
    try:
        left += store.remove_dir()
    except StateError as e:
        left.append(str(e))
    try:
        names = os.listdir(bin_dir)
    except OSError as e:
        if e.errno != errno.ENOENT:
            left.append(f"{bin_dir} ({e.strerror})")
        names = []
    for name in sorted(names):
        if name in (BINARY_NAME, SHIM_NAME) or VERSION_DIR.match(name) or BIN_TEMP.match(name):
            remove(os.path.join(bin_dir, name))
    with contextlib.suppress(OSError):
        atomicfile.fsync_dir(bin_dir)
    remove(kube_dir)
    with contextlib.suppress(OSError):
        atomicfile.fsync_dir(os.path.dirname(kube_dir))
    return left

