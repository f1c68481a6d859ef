"""The state files of one `cniDir`: where each container's state (state.py) is written
and read, the tombstones of finished DELs, and the per-container lock.

Layout in `cniDir` (0700):
* `<containerID>.json` (0600): the state. Compact JSON, the attachments (each with its
  delegate's raw config) before the final `format` key, so that a file cut short
  still holds the attachments before the cut (`state.salvage`). While an ADD runs its
  children, the document is its plan and the progress of each attachment is
  appended after it, one line per step (state.py, "Progress").
* `<containerID>.lock` (0600): exists only while an operation on the container runs.
* `<containerID>.json.corrupt` (0600): a damaged state file DEL set aside for the admin.
* `<containerID>.deleted` (empty, 0600): a tombstone: the last DEL of this container
  completed (`StateStore.mark_deleted`).

Writes are atomic (atomicfile: temp file + fsync + rename + fsync of the directory),
and no path here follows a symlink planted in the state dir (O_NOFOLLOW, and the
directory is checked to be a real directory owned by us).

The lock serializes operations on one container (multi-net spec §7.3; CNI
SPEC.md "the runtime must not invoke parallel operations for the same
container", which a defensive plugin still enforces): flock on the lock file,
re-checked against the path after acquisition so that a lock file unlinked by the
previous holder is never shared.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import stat
import time
from collections.abc import Callable, Iterator

from ..cni.names import container_id_problem
from . import atomicfile
from .state import (
    SavedState,
    StateError,
    decode_state,
    encode_state,
    progress_records,
)
from .statusmemo import MEMO_NAME

TOMBSTONE_SECONDS = 7 * 24 * 3600.0
"""How long a tombstone is kept after the DEL that wrote it (see `Tombstones`)."""

_TOMBSTONE = ".deleted"
_PRUNE_STAMP = ".tombstones-pruned"
_PRUNE_EVERY = 3600.0
_OLD_TMP = ".json.tmp"  # temp files of releases before atomicfile: <id>.json.tmp<pid>


def _check_id(container_id: str) -> None:
    # The request layer validated the ID already; checked again where it becomes a path.
    problem = container_id_problem(container_id)
    if problem:
        raise StateError(f"invalid container ID {container_id!r}: {problem}")


class StateStore:
    """State files of one `cniDir`.

    cni_dir: directory path; created 0700 on first write. clock: epoch seconds
    (time.time), for tombstones.
    """

    def __init__(self, cni_dir: str, clock: Callable[[], float] = time.time):
        self.dir = cni_dir
        self.clock = clock

    def _path(self, container_id: str, suffix: str) -> str:
        _check_id(container_id)
        return os.path.join(self.dir, container_id + suffix)

    def ensure_dir(self) -> None:
        """Create `cniDir` (0700, parents 0755) or check the existing one is a real dir.

        Raises StateError when it is a symlink, not a directory, or not owned by the
        user netattach runs as (someone else could plant links and files in it).
        """
        try:
            st = os.lstat(self.dir)
        except FileNotFoundError:
            pass
        else:  # the dir of every save but the first
            self._check_dir(st)
            return
        # Each missing dir is made, then given its mode: mkdir's mode is masked by the
        # umask (a runtime with umask 0 would leave parents world-writable), and the
        # umask is the process's, not to be changed under the node daemon's threads.
        missing = []
        d = self.dir.rstrip("/")
        while d and not os.path.lexists(d):
            missing.append(d)
            d = os.path.dirname(d)
        try:
            for d in reversed(missing):
                try:
                    os.mkdir(d, 0o700)
                except FileExistsError:
                    continue  # made meanwhile by another call
                os.chmod(d, 0o700 if d == missing[0] else 0o755)
        except OSError as e:
            raise StateError(f"cannot create state dir {self.dir}: {e.strerror}") from None
        self._check_dir(os.lstat(self.dir))

    def _check_dir(self, st: os.stat_result) -> None:
        if not stat.S_ISDIR(st.st_mode):
            raise StateError(f"state dir {self.dir} is not a directory (symlink or file)")
        if st.st_uid != os.geteuid():
            raise StateError(f"state dir {self.dir} belongs to uid {st.st_uid}, not to "
                             f"netattach's {os.geteuid()}")
        if st.st_mode & 0o077:
            os.chmod(self.dir, 0o700)

    def load(self, container_id: str) -> SavedState | None:
        """The saved state, or None when there is none; a plan with progress records
        (`save_plan`) as the records say.

        Raises StateError when the file exists but cannot be opened or read (a
        directory in its place included), CorruptState when what it holds is not a
        whole state of this container in a known format.
        """
        path = self._path(container_id, ".json")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise StateError(f"cannot open state file {path}: {e.strerror}") from None
        try:
            with os.fdopen(fd, "rb") as f:
                raw = f.read()
        except OSError as e:
            raise StateError(f"cannot read state file {path}: {e.strerror}") from None
        return decode_state(raw, container_id, path)

    def set_aside(self, container_id: str) -> str:
        """Move a damaged state file to `<id>.json.corrupt` (0600), for the admin to read;
        returns that path. No operation reads it again, and GC does not list it.
        Raises StateError when it cannot be moved."""
        path = self._path(container_id, ".json")
        aside = path + ".corrupt"
        try:
            os.rename(path, aside)
            fd = os.open(aside, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                os.fchmod(fd, 0o600)  # a foreign writer may have made it readable
            finally:
                os.close(fd)
            atomicfile.fsync_dir(self.dir)
        except OSError as e:
            raise StateError(f"cannot move damaged state file {path} aside: {e.strerror}") from None
        return aside

    def save(self, state: SavedState, durable: bool = True) -> None:
        """Write `state` atomically (0600) as `<containerID>.json`. Raises StateError
        (disk full, read-only, ...).

        durable=False skips the fsyncs (atomicfile.replace): for the saves whose only
        job is to survive the process (killed by the runtime's timeout, OOM, a daemon
        restart), not a power loss, after which the sandbox's netns and interfaces are
        gone anyway and DEL works from an older state or rebuilds from the API
        (delete.py, the recovery matrix)."""
        self._write(state.container_id, encode_state(state), durable)

    def _write(self, container_id: str, data: bytes, durable: bool) -> None:
        self.ensure_dir()
        path = self._path(container_id, ".json")
        try:
            atomicfile.replace(path, data, 0o600, durable=durable)
        except OSError as e:
            raise StateError(f"cannot write state file {path}: {e.strerror}") from None

    def save_plan(self, state: SavedState) -> None:
        """Save an ADD's plan before its first child runs: `state` with no attachment
        attempted yet, written atomically as `save(durable=False)` does, with
        `progress` set (module doc), so that `record_progress` can append to it. Bytes
        written: the size of the state. Raises StateError as `save`."""
        assert not state.attempted(), "a plan is saved before any child runs"
        self._write(state.container_id, encode_state(state, plan=True), durable=False)

    def record_progress(self, state: SavedState, indexes: list[int]) -> None:
        """Append to the plan `save_plan` saved one progress record per index of
        `indexes` that is attempted in `state`: attachment i attempted, with its result
        when it has one (module doc). Bytes written: the records only (the results'
        size plus a few bytes each), so an ADD writes O(n) in all, not O(n^2). One
        write(2) with O_APPEND, not fsync'ed (survives the process, as `save` with
        durable=False). Raises StateError naming the file (gone, disk full...)."""
        path = self._path(state.container_id, ".json")
        data = progress_records(state, indexes)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
        except OSError as e:
            raise StateError(f"cannot write state file {path}: {e.strerror}") from None

    def _names(self) -> list[str]:
        """The entries of `cniDir`; [] when it is absent. Raises StateError when it
        cannot be listed."""
        try:
            return os.listdir(self.dir)
        except FileNotFoundError:
            return []
        except OSError as e:
            raise StateError(f"cannot list state dir {self.dir}: {e.strerror}") from None

    def container_ids(self) -> list[str]:
        """IDs of every container with a saved state file, sorted; [] when `cniDir` is absent.

        Only `<id>.json` entries whose <id> is a valid container ID count: lock files,
        tombstones, temp files of an interrupted save and anything else in the dir are
        skipped. Raises StateError when the dir exists but cannot be listed.
        """
        ids = (n[:-len(".json")] for n in self._names() if n.endswith(".json"))
        return sorted(i for i in ids if container_id_problem(i) is None)

    def file_identity(self, container_id: str) -> tuple[int, int, int] | None:
        """(inode, size, mtime ns) of the container's state file, None when there is
        none: a save (a new file renamed over it) or an appended record changes it."""
        try:
            st = os.stat(self._path(container_id, ".json"))
        except OSError:
            return None
        return st.st_ino, st.st_size, st.st_mtime_ns

    def operations_running(self) -> list[str]:
        """IDs of the containers whose lock an operation holds now (ADD, DEL, CHECK, GC's
        DEL, a hot-plug change), sorted. A `<id>.lock` left by a process that was killed
        is not held and does not count. Raises StateError when the dir exists but
        cannot be listed; [] when it is absent."""
        held = []
        for name in sorted(self._names()):
            cid = name[:-len(".lock")]
            if not name.endswith(".lock") or container_id_problem(cid) is not None:
                continue
            try:
                fd = os.open(os.path.join(self.dir, name),
                             os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
            except OSError:
                continue  # released (and unlinked) meanwhile, or not a lock file
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                held.append(cid)
            finally:
                os.close(fd)  # releases the flock, if it was taken
        return held

    def _ours(self, name: str) -> bool:
        """True when `name` is an entry netattach writes in cniDir (module doc): a state,
        a damaged one set aside, a lock, a tombstone, a save's temp file of this or an
        earlier release, the tombstone pruning stamp, thin STATUS's memo and its temp
        file (statusmemo)."""
        if name in (_PRUNE_STAMP, MEMO_NAME):
            return True
        for suffix in (".json", ".json.corrupt", ".lock", _TOMBSTONE):
            if name.endswith(suffix) and container_id_problem(name[:-len(suffix)]) is None:
                return True
        memo_tmp = f".{MEMO_NAME}.tmp-"  # atomicfile.temp_path of a memo's write, killed
        if name.startswith(memo_tmp) and name[len(memo_tmp):].isdigit():
            return True
        for prefix, sep in ((".", ".json.tmp-"), ("", _OLD_TMP)):
            cid, found, pid = name[len(prefix):].rpartition(sep)
            if (name.startswith(prefix) and found and pid.isdigit()
                    and container_id_problem(cid) is None):
                return True
        return False

    def remove_dir(self) -> list[str]:
        """netattach is uninstalled (nodefiles.remove_when_unused): remove every entry
        netattach writes in cniDir, then the dir itself when nothing else is in it.
        Returns the paths not removed with the reason; entries that are not
        netattach's are left, and so is the dir then. Raises StateError when the dir
        cannot be listed (absent is fine)."""
        left = []
        for name in self._names():
            path = os.path.join(self.dir, name)
            if not self._ours(name):
                left.append(f"{path} (not netattach's: left, and so is {self.dir})")
                continue
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as e:
                left.append(f"{path} ({e.strerror})")
        if not left:
            try:
                os.rmdir(self.dir)
            except FileNotFoundError:
                pass
            except OSError as e:
                left.append(f"{self.dir} ({e.strerror})")
        return left

    def remove(self, container_id: str) -> None:
        """Delete the state file if present, and the temp files of saves that a killed
        netattach left for this container (this release's `.<id>.json.tmp-<pid>` and
        earlier releases' `<id>.json.tmp<pid>`). The caller holds the container's lock,
        so no live save of this container can own one."""
        path = self._path(container_id, ".json")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        name = os.path.basename(path)
        prefixes = (f".{name}.tmp-", name + ".tmp")
        try:
            names = os.listdir(self.dir)
        except OSError:
            return
        for entry in names:
            for prefix in prefixes:
                if entry.startswith(prefix) and entry[len(prefix):].isdigit():
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(self.dir, entry))

    def release(self, container_id: str) -> None:
        """Nothing of the container is attached any more (a DEL or a rollback whose child
        DELs all succeeded, or an ADD that attached nothing): remove its state and write
        its tombstone."""
        self.remove(container_id)
        self.mark_deleted(container_id)

    # -- tombstones

    def mark_deleted(self, container_id: str) -> None:
        """Record that a DEL of the container completed: `<id>.deleted`, an empty 0600
        file whose mtime is the time of that DEL. Best effort: a tombstone that cannot
        be written only costs the next DEL of this container the slower path (it is
        logged at debug level). Then prunes expired tombstones (at most once an hour)."""
        path = self._path(container_id, _TOMBSTONE)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                now = self.clock()
                os.utime(fd, (now, now))
            finally:
                os.close(fd)
        except OSError as e:
            logging.getLogger("netattach.state").debug("cannot write tombstone %s: %s", path, e)
            return
        self.prune_tombstones()

    def deleted_since(self, container_id: str) -> float | None:
        """When the last DEL of the container completed (epoch seconds), from its
        tombstone; None when there is none or it is older than TOMBSTONE_SECONDS."""
        try:
            st = os.lstat(self._path(container_id, _TOMBSTONE))
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode) or self.clock() - st.st_mtime > TOMBSTONE_SECONDS:
            return None
        return st.st_mtime

    def forget_deleted(self, container_id: str) -> None:
        """Remove the container's tombstone (an ADD of the same ID starts anew)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path(container_id, _TOMBSTONE))

    def prune_tombstones(self, force: bool = False) -> int:
        """Remove tombstones older than TOMBSTONE_SECONDS; returns how many. Unless
        `force`, runs at most once per hour (the time of the last run is the mtime of
        `<cniDir>/.tombstones-pruned`). Never raises."""
        stamp = os.path.join(self.dir, _PRUNE_STAMP)
        now = self.clock()
        try:
            if not force and now - os.lstat(stamp).st_mtime < _PRUNE_EVERY:
                return 0
        except OSError:
            pass
        removed = 0
        try:
            fd = os.open(stamp, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                os.utime(fd, (now, now))
            finally:
                os.close(fd)
            with os.scandir(self.dir) as entries:
                for entry in entries:
                    if not entry.name.endswith(_TOMBSTONE):
                        continue
                    with contextlib.suppress(OSError):
                        if now - entry.stat(follow_symlinks=False).st_mtime > TOMBSTONE_SECONDS:
                            os.unlink(entry.path)
                            removed += 1
        except OSError:
            pass
        return removed

    @contextlib.contextmanager
    def lock(self, container_id: str) -> Iterator[None]:
        """Hold the container's lock for the block (blocking; spec §7.3).

        The lock file exists only while held: the holder unlinks it before
        releasing, and a waiter that then gets the flock on the unlinked inode
        sees the path no longer matches and retries on a fresh file. So no lock
        file is left after any operation. Raises StateError if it cannot be made.
        """
        self.ensure_dir()
        path = self._path(container_id, ".lock")
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            except OSError as e:
                raise StateError(f"cannot open lock file {path}: {e.strerror}") from None
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                same = os.fstat(fd).st_ino == os.lstat(path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # the previous holder unlinked it; take the new one
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)
            os.close(fd)


def is_missing_netns(netns: str) -> bool:
    """True when the netns path is empty or no longer exists (DEL after the sandbox is gone)."""
    if not netns:
        return True
    try:
        os.stat(netns)
    except OSError as e:
        return e.errno in (errno.ENOENT, errno.ENOTDIR)
    return False
