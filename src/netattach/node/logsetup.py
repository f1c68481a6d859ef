"""Logging of the CNI path: the `netattach` logger to `logFile` and/or stderr, never stdout.

Two formats (`logFormat`, the daemon's and the installer's `--log-format`;
LOG_FORMAT_NAMES): "text", one line `<UTC time> netattach[<pid>] <LEVEL> <logger>:
<message>`, the time ISO 8601 with milliseconds and `Z` whatever the node's TZ; and
"json", one JSON object a line (JsonFormatter). The pod, sandbox and network a line is
about reach the JSON object's fields from `log_context`, which the CNI call
(commands/call.py), each attachment's ADD and DEL and a hot-plug change set for their
thread; the text line carries them in its message, as before (docs/configuration.md,
"Logs").

`LOG_LEVELS` is the one table of the `logLevel` values netattach accepts (Multus'
names, plus `warning` and `info`; their names are spec/netconf.py's LOG_LEVEL_NAMES,
which the config schema uses) -> Python levels, used by the installer's and the
daemon's `--log-level` and `setup_logging`. `setup_logging` also rotates `logFile` by Multus'
`logOptions` (lumberjack's rules, made safe for many processes: see there).

Importing it loads nothing `logging` has not loaded but spec/netconf.py (loaded
wherever a config is parsed); `fcntl` (and at a rotation
`errno`, `_strptime`) only when `logOptions` is set, `gzip` only to compress a backup.
"""
from __future__ import annotations

import logging
import os
import sys
import threading
import time

from ..spec.netconf import LOG_LEVEL_NAMES

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)
if TYPE_CHECKING:
    from typing import Any

LOG_LEVELS: dict[str, int] = dict(zip(LOG_LEVEL_NAMES, (
    logging.CRITICAL, logging.ERROR, logging.WARNING, logging.INFO, logging.DEBUG,
    logging.DEBUG), strict=True))
"""`logLevel` value -> Python logging level, most severe first."""

MEGABYTE = 1024 * 1024
"""Bytes in one unit of `maxSize`: lumberjack's megabyte (a MiB). Tests lower it."""

LOG_OPTION_DEFAULTS: dict[str, Any] = {"maxSize": 100, "maxAge": 5, "maxBackups": 5,
                                       "compress": True}
"""What Multus gives a key its `logOptions` leaves out (pkg/logging/logging.go,
SetLogOptions)."""

LUMBERJACK_MAX_SIZE = 100
"""MB: lumberjack's size for `maxSize` 0."""

_STAMP = "%Y-%m-%dT%H-%M-%S"
"""lumberjack's backup timestamp (Go layout 2006-01-02T15-04-05.000), UTC, without
the milliseconds."""


CONTEXT_FIELDS = ("pod", "sandbox", "network")
"""The fields `log_context` sets and JsonFormatter writes, in order: the pod
("namespace/name", from CNI_ARGS), the sandbox (the CNI container ID), the network
(a NAD reference "namespace/name", or the cluster default network's name)."""

_context = threading.local()
"""This thread's CONTEXT_FIELDS (the node daemon runs calls on several threads)."""


class log_context:  # noqa: N801 - used as a `with` statement, like a function
    """`with log_context(pod=..., sandbox=..., network=...):` the records logged by this
    thread meanwhile carry those fields (a None value: unknown, left out). Fields not
    given keep their outer value; each is restored on exit, so contexts nest (a
    network's inside a call's). A record's own `extra` value wins. Standard library
    only, no contextlib: the exec'd path imports it."""

    __slots__ = ("fields", "saved")

    def __init__(self, **fields: str | None) -> None:
        self.fields = fields
        self.saved: dict[str, str | None] = {}

    def __enter__(self) -> None:
        for key, value in self.fields.items():
            self.saved[key] = getattr(_context, key, None)
            setattr(_context, key, value)

    def __exit__(self, *exc: object) -> None:
        for key, value in self.saved.items():
            setattr(_context, key, value)


class _ContextFilter(logging.Filter):
    """Copies this thread's log_context onto each record a handler gets (as
    record.pod, .sandbox, .network), unless the record has its own."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key in CONTEXT_FIELDS:
            if getattr(record, key, None) is None:
                setattr(record, key, getattr(_context, key, None))
        return True


def iso_utc(seconds: float) -> str:
    """RFC 3339 / ISO 8601 UTC time with milliseconds: `2026-11-28T20:41:07.123Z`.
    seconds: since the epoch (a LogRecord's `created`)."""
    whole, ms = divmod(int(seconds * 1000), 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{ms:03d}Z"


class TextFormatter(logging.Formatter):
    """logging.Formatter whose `%(asctime)s` is iso_utc: UTC whatever TZ says, so the
    lines of every node and process sort and compare as text."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return iso_utc(record.created)


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (a newline in a message or a traceback
    is escaped):

        {"time": "2026-11-28T20:41:07.123Z", "level": "info", "pod": "ns/name",
         "sandbox": "<container ID>", "network": "ns/net-a", "msg": "...",
         "logger": "netattach", "pid": 4242}

    time: iso_utc of the record. level: Python's level name in lower case (debug,
    info, warning, error, critical). pod, sandbox, network: the record's log_context,
    each left out when unknown. msg: the message with its arguments. logger, pid: as
    the text line's. exc: the traceback, when the record has one. Nothing else of the
    record is written (no `extra` field but those three): what reaches a line is what
    the message says, under the same rules (docs/security.md: no credential is logged).

    Standard library only (the C string encoder `_json.encode_basestring_ascii`, which
    escapes every control and non-ASCII character): the exec'd path formats with it
    without importing the `json` package (docs/architecture.md, "Logs").
    """

    def __init__(self) -> None:
        super().__init__()
        import _json
        self._quote = _json.encode_basestring_ascii

    def format(self, record: logging.LogRecord) -> str:
        quote = self._quote
        out = [f'{{"time": "{iso_utc(record.created)}", '
               f'"level": {quote(record.levelname.lower())}']
        for key in CONTEXT_FIELDS:
            value = getattr(record, key, None)
            if value is not None:
                out.append(f'"{key}": {quote(str(value))}')
        out.append(f'"msg": {quote(record.getMessage())}')
        out.append(f'"logger": {quote(record.name)}')
        out.append(f'"pid": {record.process}')
        if record.exc_info:
            if not record.exc_text:
                record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            out.append(f'"exc": {quote(record.exc_text)}')
        if record.stack_info:
            out.append(f'"stack": {quote(self.formatStack(record.stack_info))}')
        return ", ".join(out) + "}"


def formatter(log_format: str, template: str) -> logging.Formatter:
    """The formatter of `log_format` (a LOG_FORMAT_NAMES value; anything else is
    "text"). template: the text line after its time, %-style (e.g.
    "netattach[42] %(levelname)s %(name)s: %(message)s"); JSON ignores it."""
    if log_format == "json":
        return JsonFormatter()
    return TextFormatter("%(asctime)s " + template)


def setup_logging(log_file: str | None, level: str, to_stderr: bool,
                  options: dict[str, Any] | None = None, log_format: str = "text") -> None:
    """Route the `netattach` logger to `log_file` and/or stderr; rotate `log_file` by
    `options`; format each record as `log_format` says ("text" or "json": module doc).

    log_file: path or None; opened O_APPEND, created 0600 (an existing file keeps
    its mode). level: a LOG_LEVELS key (anything else is "info"). to_stderr: also
    log to stderr. When the file cannot be opened, one line says so on stderr and
    logging goes to stderr. Handlers of an earlier call are closed. Never raises
    for a file problem, and the handlers never raise into a caller.

    options: Multus' `logOptions` (schema-checked by netconf). None (the key is
    absent): no rotation, the file grows (netattach's behaviour before logOptions;
    Multus rotates a logFile even without logOptions). A dict, `{}` included: as
    Multus and lumberjack, every key left out at Multus' default
    (github.com/k8snetworkplumbingwg/multus-cni docs/configuration.md "Logging
    Options", pkg/logging/logging.go; gopkg.in/natefinch/lumberjack.v2 Logger):

    * maxSize, MB of 1024*1024 bytes (absent: 100; 0: lumberjack's 100): before a
      record would make the file larger, the file is renamed to the backup
      `<name>-<UTC time of rotation, 2006-01-02T15-04-05.000>.<ext>` beside it and
      a new one is created. A record larger than maxSize alone is still written,
      into a fresh file (lumberjack refuses such a write and loses it).
    * maxBackups (absent: 5; 0: all): at each rotation, the backups past the
      newest maxBackups by the time in their name are deleted. A backup and its
      .gz count once. Symbolic links and other names are never touched.
    * maxAge, days of 24 h (absent: 5; 0: no limit): backups whose name's time is
      older are deleted at each rotation, whatever maxBackups says.
    * compress (absent: true): after a rotation, each uncompressed backup becomes
      `<backup>.gz` (gzip level 6, its mtime kept, 0600) and the plain one goes.

    Many processes append at once (one per CNI call): each append, and each
    rotation, holds an exclusive flock on `<log_file>.lock` (0600), and checks
    first that its descriptor is still the file at `log_file` (st_dev, st_ino),
    reopening it if another process rotated; so a generation is rotated once, no
    record goes to a backup after its rotation, and a file never exceeds maxSize.
    Compression runs outside that lock (a flock on the backup keeps two processes
    from doing the same one) and swaps the .gz in under it. Writers that do not take
    the lock (another logOptions-less config on the same file) can lose lines to a
    compressed backup: give every writer of a file the same logOptions.

    A rotation failure (rename refused, lock unavailable, `log_file` a symbolic
    link, which lumberjack would rename instead of the file) is said once per
    process on stderr and in the file; that process then appends without rotating,
    and the next one tries again. A failure to compress or delete a backup is said
    once and the backup stays.
    """
    root = logging.getLogger("netattach")
    for old in root.handlers:
        old.close()
    root.handlers.clear()
    root.setLevel(LOG_LEVELS.get(level, logging.INFO))
    root.propagate = False
    fmt = formatter(log_format,
                    f"netattach[{os.getpid()}] %(levelname)s %(name)s: %(message)s")
    context = _ContextFilter()
    if log_file:
        try:
            fd = _open_append(log_file)
        except OSError as e:
            print(f"netattach: cannot open log file {log_file}: {e.strerror}", file=sys.stderr)
        else:
            handler: logging.Handler = (
                _RotatingHandler(log_file, fd, options, stderr_fallback=not to_stderr)
                if options is not None
                else _AppendHandler(log_file, fd, stderr_fallback=not to_stderr))
            handler.setFormatter(fmt)
            handler.addFilter(context)
            root.addHandler(handler)
    if to_stderr or not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(fmt)
        handler.addFilter(context)
        root.addHandler(handler)


def _open_append(path: str) -> int:
    """`path` opened for appending, created 0600 (less under a stricter umask). A
    symbolic link at `path` is not followed (OSError ELOOP): root never appends to a
    file someone planted a link to (docs/security.md). Raises OSError."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW,
                   0o600)


def _write_all(fd: int, data: bytes) -> None:
    """write(2) until all of `data` is written: one call for a regular file unless the
    disk fills up. Raises OSError."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class _AppendHandler(logging.Handler):
    """Each record, newline-terminated, as one write(2) on an O_APPEND descriptor, so
    the records of the many netattach processes appending to one logFile never
    interleave, not even a multi-line traceback (a line-buffered stream writes it
    line by line). Text that is not UTF-8 (a lone surrogate from the environment) is
    written backslash-escaped, as on stderr, not lost with a traceback.

    A write that fails (disk full) is said once on stderr, and the record goes to
    stderr when `stderr_fallback` (logToStderr off); it never raises.
    """

    def __init__(self, path: str, fd: int, *, stderr_fallback: bool) -> None:
        super().__init__()
        self.path, self.fd, self.stderr_fallback = path, fd, stderr_fallback
        self._reported: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._append((self.format(record) + "\n").encode("utf-8", "backslashreplace"))
        except Exception:  # logging's contract: a handler never raises into the caller
            self.handleError(record)

    def _append(self, data: bytes) -> None:
        self._write(data)

    def _write(self, data: bytes) -> None:
        try:
            _write_all(self.fd, data)
        except OSError as e:
            self._report("write", f"cannot write log file {self.path}: {e.strerror or e}",
                         to_file=False)
            if self.stderr_fallback:
                sys.stderr.write(data.decode("utf-8", "replace"))

    def _report(self, kind: str, text: str, *, to_file: bool = True) -> None:
        """Say `text` once per kind for this process: on stderr, and as a WARNING line
        in the file unless `to_file` is False."""
        if kind in self._reported:
            return
        self._reported.add(kind)
        print(f"netattach: {text}", file=sys.stderr)
        if to_file:
            record = logging.LogRecord(__name__, logging.WARNING, __file__, 0, text, None, None)
            self._write((self.format(record) + "\n").encode("utf-8", "backslashreplace"))

    def close(self) -> None:
        self.acquire()
        try:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1
        finally:
            self.release()
        super().close()


def _stamp(seconds: float) -> str:
    """lumberjack's backup time: UTC `2006-01-02T15-04-05.000` (milliseconds)."""
    return _stamp_ms(int(seconds * 1000))


def _stamp_ms(milli: int) -> str:
    """_stamp of a time in whole milliseconds since the epoch."""
    import time
    whole, ms = divmod(milli, 1000)
    return f"{time.strftime(_STAMP, time.gmtime(whole))}.{ms:03d}"


def _stamp_milli(stamp: str) -> int:
    """The time in milliseconds since the epoch of a _stamp. Raises ValueError."""
    import calendar
    import time
    whole, ms = stamp.rsplit(".", 1)
    return calendar.timegm(time.strptime(whole, _STAMP)) * 1000 + int(ms)


def _same_file(path: str, st: os.stat_result) -> bool:
    """Whether `path` (not followed) is still the file `st` describes."""
    try:
        now = os.lstat(path)
    except FileNotFoundError:
        return False
    return (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)


class _Generation:
    """One backup generation: the files named with one rotation time."""
    __slots__ = ("stamp", "plain", "gz", "temps")

    def __init__(self, stamp: str) -> None:
        self.stamp = stamp
        self.plain: str | None = None
        self.gz: str | None = None
        self.temps: list[str] = []

    @property
    def files(self) -> list[str]:
        return [n for n in (self.plain, self.gz) if n] + self.temps


class _RotatingHandler(_AppendHandler):
    """_AppendHandler that rotates the file by Multus' logOptions, safely across
    processes (the rules and the design: setup_logging).

    Not logging.handlers.RotatingFileHandler: it writes through a buffered stream
    (a record may take several writes), measures the file by its own stream
    position (blind to the other processes' appends) and renames a numbered chain
    (.1 to .2 ...), every backup at every rotation. lumberjack's names, which Multus
    leaves on a node, carry the rotation time maxAge goes by, and take one rename
    per rotation. Overriding emit, shouldRollover, doRollover and _open would leave
    nothing of it.

    The lock file is opened at the first record, so a process that logs nothing
    creates nothing. `_broken` is set by the first rotation failure: from then on
    this process only appends.
    """

    def __init__(self, path: str, fd: int, options: dict[str, Any], *,
                 stderr_fallback: bool) -> None:
        super().__init__(path, fd, stderr_fallback=stderr_fallback)
        opts = {**LOG_OPTION_DEFAULTS, **options}
        self.max_bytes = (opts["maxSize"] or LUMBERJACK_MAX_SIZE) * MEGABYTE
        self.max_backups: int = opts["maxBackups"]
        self.max_age_days: int = opts["maxAge"]
        self.compress: bool = opts["compress"]
        self.dir = os.path.dirname(path) or "."
        stem, self.ext = os.path.splitext(os.path.basename(path))
        self.prefix = stem + "-"
        self.lock_fd: int | None = None
        self._broken = False

    # ------------------------------------------------------------ appending

    def _append(self, data: bytes) -> None:
        import fcntl
        if self.lock_fd is None and not self._broken:
            self._open_lock()
        lock_fd = self.lock_fd
        if self._broken or lock_fd is None:
            self._write(data)
            return
        locked = compress = False
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            locked = True
            if self._full(len(data)):
                self._rotate()
                compress = self.compress
        except OSError as e:
            self._give_up(f"cannot rotate log file {self.path}", e)
        try:
            self._write(data)
        finally:
            if locked:
                fcntl.flock(lock_fd, fcntl.LOCK_UN)
        if compress:
            self._compress_backups()

    def _open_lock(self) -> None:
        try:
            self.lock_fd = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
                                   | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
        except OSError as e:
            self._give_up(f"cannot open {self.path}.lock", e)

    def _give_up(self, what: str, error: OSError) -> None:
        self._broken = True
        self._report("rotate", f"{what}: {error.strerror or error}; appending without "
                     "rotation (logOptions)")

    def _full(self, size: int) -> bool:
        """Whether writing `size` bytes would take the file past maxSize; first makes
        self.fd the file at self.path again if another process rotated it (or it was
        removed). Holds the lock. Raises OSError."""
        mine = os.fstat(self.fd)
        try:
            there = os.stat(self.path)
        except FileNotFoundError:
            there = None
        if there is None or (there.st_dev, there.st_ino) != (mine.st_dev, mine.st_ino):
            self._reopen()
            mine = os.fstat(self.fd)
        return mine.st_size > 0 and mine.st_size + size > self.max_bytes

    def _reopen(self) -> None:
        fd = _open_append(self.path)
        os.close(self.fd)
        self.fd = fd

    # ------------------------------------------------------------ rotating

    def _rotate(self) -> None:
        """Rename the file to a new backup name, open a new one, prune. Holds the lock.
        Raises OSError."""
        import errno
        import stat
        if stat.S_ISLNK(os.lstat(self.path).st_mode):
            raise OSError(errno.ELOOP, "it is a symbolic link (rotating would rename the "
                                       "link, not the file)")
        os.rename(self.path, self._backup_name())
        self._reopen()
        self._prune()

    def _backup_name(self) -> str:
        """lumberjack's `<name>-<UTC now>.<ext>`; the next millisecond while the name
        (or its .gz, or anything planted there) exists or is not later than every
        backup's: rotations faster than one a millisecond get names ahead of the clock,
        and a later one must never take a pruned earlier name, which would make it the
        oldest backup (pruned first). Holds the lock, so no other netattach process
        picks a name meanwhile."""
        import time
        try:
            newest = max((g.stamp for g in self._generations()), default="")
        except OSError:
            newest = ""
        milli = int(time.time() * 1000)
        if newest >= _stamp_ms(milli):
            try:
                milli = _stamp_milli(newest) + 1
            except ValueError:
                pass
        while True:
            stamp = _stamp_ms(milli)
            path = os.path.join(self.dir, f"{self.prefix}{stamp}{self.ext}")
            if (stamp > newest and not os.path.lexists(path)
                    and not os.path.lexists(path + ".gz")):
                return path
            milli += 1

    def _generations(self) -> list[_Generation]:
        """The backups beside the file, newest first: regular files (not links) named
        `<name>-<time>.<ext>`, that plus `.gz`, or a compression's `.gz.<pid>.tmp`,
        with a time that is a date (lumberjack's list of old log files). Raises OSError."""
        import re
        import time
        pattern = re.compile(re.escape(self.prefix) + r"(\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d\.\d{3})"
                             + re.escape(self.ext) + r"(\.gz(\.\d+\.tmp)?)?")
        gens: dict[str, _Generation] = {}
        with os.scandir(self.dir) as entries:
            for entry in entries:
                match = pattern.fullmatch(entry.name)
                if not match or not entry.is_file(follow_symlinks=False):
                    continue
                stamp, gz, temp = match.groups()
                try:
                    time.strptime(stamp[:19], _STAMP)
                except ValueError:
                    continue
                gen = gens.setdefault(stamp, _Generation(stamp))
                if temp:
                    gen.temps.append(entry.name)
                elif gz:
                    gen.gz = entry.name
                else:
                    gen.plain = entry.name
        return sorted(gens.values(), key=lambda g: g.stamp, reverse=True)

    def _prune(self) -> None:
        """Delete the generations past the newest maxBackups or older than maxAge,
        and compression leftovers of generations that are gone. Holds the lock."""
        import time
        cutoff = _stamp(time.time() - self.max_age_days * 86400)
        kept = 0
        for gen in self._generations():  # the timestamps sort as the times do
            if not (gen.plain or gen.gz):
                drop = gen.temps
            elif ((self.max_backups and kept >= self.max_backups)
                  or (self.max_age_days and gen.stamp < cutoff)):
                drop = gen.files
            else:
                kept += 1
                continue
            for name in drop:
                self._unlink(name, "prune")

    def _unlink(self, name: str, kind: str) -> None:
        try:
            os.unlink(os.path.join(self.dir, name))
        except FileNotFoundError:
            pass
        except OSError as e:
            self._report(kind, f"cannot remove log backup {os.path.join(self.dir, name)}: "
                         f"{e.strerror or e}")

    # ------------------------------------------------------------ compressing

    def _compress_backups(self) -> None:
        """gzip every uncompressed backup (this rotation's, and any an earlier process
        left). Outside the lock; never raises."""
        try:
            names = [g.plain for g in self._generations() if g.plain]
        except OSError as e:
            self._report("compress", f"cannot list log backups in {self.dir}: {e.strerror or e}")
            return
        for name in names:
            try:
                self._compress(name)
            except OSError as e:
                self._report("compress", f"cannot compress log backup "
                             f"{os.path.join(self.dir, name)}: {e.strerror or e}")

    def _compress(self, name: str) -> None:
        """`name` -> `name.gz`: written to `name.gz.<pid>.tmp`, then, under the lock
        and only if `name` is still the file read (not pruned meanwhile), renamed over
        `name.gz` and `name` removed. Skipped when another process holds the backup's
        flock (it is compressing it). Raises OSError."""
        import fcntl
        import stat
        path = os.path.join(self.dir, name)
        try:
            src = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return  # pruned, or compressed by another process
        try:
            st = os.fstat(src)
            if not stat.S_ISREG(st.st_mode):
                return
            try:
                fcntl.flock(src, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return
            temp = f"{path}.gz.{os.getpid()}.tmp"
            try:
                self._gzip(src, st, temp, name)
                lock_fd = self.lock_fd
                assert lock_fd is not None  # compression follows a rotation under it
                fcntl.flock(lock_fd, fcntl.LOCK_EX)
                try:
                    if _same_file(path, st):  # else pruned meanwhile: drop the copy
                        os.rename(temp, path + ".gz")
                        os.unlink(path)
                finally:
                    fcntl.flock(lock_fd, fcntl.LOCK_UN)
            finally:
                self._unlink(os.path.basename(temp), "compress")  # unless renamed
        finally:
            os.close(src)

    @staticmethod
    def _gzip(src: int, st: os.stat_result, temp: str, name: str) -> None:
        """Compress descriptor `src` (stat `st`) into a new file `temp` (0600, O_EXCL:
        a link planted there is not followed), with the source's mtime. Raises OSError."""
        import gzip
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600)
        except FileExistsError:  # left by a killed process that had our pid
            os.unlink(temp)
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600)
        with open(fd, "wb") as raw:
            # level 6: Go's gzip.DefaultCompression, which lumberjack uses
            with gzip.GzipFile(filename=name, mode="wb", fileobj=raw, compresslevel=6,
                               mtime=int(st.st_mtime)) as gz:
                while chunk := os.read(src, 1 << 20):
                    gz.write(chunk)
            raw.flush()
            os.utime(raw.fileno(), ns=(st.st_atime_ns, st.st_mtime_ns))

    def close(self) -> None:
        self.acquire()
        try:
            if self.lock_fd is not None:
                os.close(self.lock_fd)
                self.lock_fd = None
        finally:
            self.release()
        super().close()
