"""Per-container state files in `cniDir`: what DEL and CHECK need, saved before any child runs.

Layout: `<cniDir>/<containerID>.json` (0600) and, only while an operation runs,
`<cniDir>/<containerID>.lock` (0600); `cniDir` itself is 0700. A state file found
damaged by DEL is kept for the admin as `<cniDir>/<containerID>.json.corrupt` (0600).

Writes are atomic (temp file + fsync + rename + fsync of the directory), and no
path here follows a symlink planted in the state dir (O_NOFOLLOW, and the
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
import json
import os
import re
import stat
from typing import Any, Iterator

STATE_FORMAT = 1
_CONTAINER_ID = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$")


class StateError(Exception):
    """State could not be read or written; the message names the file and the cause."""


class CorruptState(StateError):
    """The state file was read but is not a whole state of this container: truncated,
    overwritten, or of an unknown format. `raw` is what was read, for `salvage`."""

    def __init__(self, message: str, raw: bytes):
        super().__init__(message)
        self.raw = raw


def _well_formed_attachment(att: object) -> bool:
    return (isinstance(att, dict) and isinstance(att.get("network"), str)
            and isinstance(att.get("ifname"), str) and isinstance(att.get("config"), dict))


def _well_formed(state: dict, container_id: str) -> bool:
    """True when the state is this container's and has what DEL, CHECK and GC read: the
    runtime's ifname and, per attachment, network, ifname and config."""
    atts = state.get("attachments")
    return (state.get("containerID") == container_id and isinstance(state.get("ifname"), str)
            and isinstance(atts, list)) and all(_well_formed_attachment(a) for a in atts)


def salvage(raw: bytes, container_id: str) -> tuple[list[dict], bool]:
    """(attachments, complete): what DEL can still use of a damaged state file.

    The document is read from its start, member by member and, inside
    `attachments`, element by element, up to the first damage (a truncation, a
    foreign write, a bad byte). Every attachment complete before that point and
    holding what DEL needs (network, ifname, config) is returned, as the ADD saved
    it. `complete` is True when the whole list was read and every element was
    usable: DEL then knows every attachment. A file naming another container
    gives ([], False).
    """
    text = raw.decode("utf-8", "replace")
    decoder = json.JSONDecoder()
    found: list = []
    complete = False

    def skip(i: int) -> int:
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        return i

    try:
        i = skip(0)
        if text[i] != "{":
            return [], False
        i += 1
        while text[skip(i)] != "}":
            key, i = decoder.raw_decode(text, skip(i))
            i = skip(i)
            if text[i] != ":":
                break
            i = skip(i + 1)
            if key == "attachments" and text[i] == "[":
                i = skip(i + 1)
                while text[i] != "]":
                    value, i = decoder.raw_decode(text, i)
                    found.append(value)
                    i = skip(i)
                    if text[i] == ",":
                        i = skip(i + 1)
                    elif text[i] != "]":
                        raise ValueError("damaged list")
                complete = True
                i += 1
            else:
                value, i = decoder.raw_decode(text, i)
                if key == "containerID" and value != container_id:
                    return [], False
            i = skip(i)
            if text[i] != ",":
                break
            i += 1
    except (ValueError, IndexError, RecursionError):
        pass  # the damage: keep what came before it
    usable = [a for a in found if _well_formed_attachment(a)]
    return usable, complete and len(usable) == len(found)


class StateStore:
    """State files of one `cniDir`.

    cni_dir: directory path; created 0700 on first write.
    """

    def __init__(self, cni_dir: str):
        self.dir = cni_dir

    def _path(self, container_id: str, suffix: str) -> str:
        # The request layer validated the ID already; checked again because this
        # is where it becomes a path.
        if not _CONTAINER_ID.match(container_id) or len(container_id) > 255:
            raise StateError(f"invalid container ID {container_id!r}")
        return os.path.join(self.dir, container_id + suffix)

    def ensure_dir(self) -> None:
        """Create `cniDir` (0700, parents 0755) or check the existing one is a real dir.

        Raises StateError when it is a symlink, not a directory, or not owned by the
        user netattach runs as (someone else could plant links and files in it).
        """
        # makedirs makes the missing parents 0777 & ~umask whatever mode it is given: a
        # runtime with umask 0 left them world-writable. At least 022 while they are made.
        umask = os.umask(0o022)
        os.umask(umask | 0o022)
        try:
            os.makedirs(os.path.dirname(self.dir.rstrip("/")) or "/", exist_ok=True)
            os.mkdir(self.dir, 0o700)
        except FileExistsError:
            pass
        except OSError as e:
            raise StateError(f"cannot create state dir {self.dir}: {e.strerror}") from None
        finally:
            os.umask(umask)
        st = os.lstat(self.dir)
        if not stat.S_ISDIR(st.st_mode):
            raise StateError(f"state dir {self.dir} is not a directory (symlink or file)")
        if st.st_uid != os.geteuid():
            raise StateError(f"state dir {self.dir} belongs to uid {st.st_uid}, not to "
                             f"netattach's {os.geteuid()}")
        if st.st_mode & 0o077:
            os.chmod(self.dir, 0o700)

    def load(self, container_id: str) -> dict | None:
        """The saved state dict, or None when there is none.

        Raises StateError when the file exists but cannot be opened, CorruptState
        when what it holds is not a whole state of this container.
        """
        path = self._path(container_id, ".json")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise StateError(f"cannot open state file {path}: {e.strerror}") from None
        with os.fdopen(fd, "rb") as f:
            raw = f.read()
        try:
            data = json.loads(raw)
        except ValueError as e:
            raise CorruptState(f"state file {path} is corrupt: {e}", raw) from None
        if not isinstance(data, dict) or data.get("format") != STATE_FORMAT:
            raise CorruptState(f"state file {path} has an unknown format", raw)
        if not _well_formed(data, container_id):
            raise CorruptState(f"state file {path} is corrupt: containerID, ifname or "
                               "attachments are missing or malformed", raw)
        return data

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
            self._fsync_dir()
        except OSError as e:
            raise StateError(f"cannot move damaged state file {path} aside: {e.strerror}") from None
        return aside

    def _fsync_dir(self) -> None:
        dfd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def save(self, container_id: str, state: dict[str, Any]) -> None:
        """Write `state` atomically (0600). Raises StateError (disk full, read-only, ...)."""
        self.ensure_dir()
        path = self._path(container_id, ".json")
        tmp = f"{path}.tmp{os.getpid()}"
        data = json.dumps({**state, "format": STATE_FORMAT}, separators=(",", ":")).encode()
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, path)
            self._fsync_dir()
        except OSError as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise StateError(f"cannot write state file {path}: {e.strerror}") from None

    def container_ids(self) -> list[str]:
        """IDs of every container with a saved state file, sorted; [] when `cniDir` is absent.

        Only `<id>.json` entries whose <id> is a valid container ID count: lock files,
        temp files of an interrupted save and anything else in the dir are skipped.
        Raises StateError when the dir exists but cannot be listed.
        """
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        except OSError as e:
            raise StateError(f"cannot list state dir {self.dir}: {e.strerror}") from None
        ids = (n[:-len(".json")] for n in names if n.endswith(".json"))
        return sorted(i for i in ids if _CONTAINER_ID.match(i) and len(i) <= 255)

    def exists(self, container_id: str) -> bool:
        """True when a state file is saved for the container."""
        return os.path.lexists(self._path(container_id, ".json"))

    def remove(self, container_id: str) -> None:
        """Delete the state file if present, and the temp files of saves that a killed
        netattach left for this container (`<id>.json.tmp<pid>`). The caller holds the
        container's lock, so no live save of this container can own one."""
        path = self._path(container_id, ".json")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        prefix = os.path.basename(path) + ".tmp"
        try:
            names = os.listdir(self.dir)
        except OSError:
            return
        for name in names:
            if name.startswith(prefix) and name[len(prefix):].isdigit():
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(self.dir, name))

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
