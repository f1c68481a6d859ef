"""Logging of the CNI path: the `netattach` logger to `logFile` and/or stderr, never stdout.

`LOG_LEVELS` is the one table of the `logLevel` values netattach accepts (Multus'
names, plus `warning` and `info`), used by the config schema, the installer's
`--log-level` and `setup_logging`.
"""
from __future__ import annotations

import logging
import os
import sys
from typing import Any

LOG_LEVELS: dict[str, int] = {
    "panic": logging.CRITICAL, "error": logging.ERROR, "warning": logging.WARNING,
    "info": logging.INFO, "debug": logging.DEBUG, "verbose": logging.DEBUG,
}
"""`logLevel` value -> Python logging level, most severe first."""


def setup_logging(log_file: str | None, level: str, to_stderr: bool,
                  options: dict[str, Any] | None = None) -> None:
    """Route the `netattach` logger to `log_file` (0600, appended) and/or stderr.

    level: a LOG_LEVELS key (anything else is "info"). options: Multus' `logOptions`
    for the file (maxSize MB, maxAge days, maxBackups, compress). When the file
    cannot be opened, one line says so on stderr and logging goes to stderr.
    Handlers of an earlier call are closed.
    """
    root = logging.getLogger("netattach")
    for old in root.handlers:
        old.close()
    root.handlers.clear()
    root.setLevel(LOG_LEVELS.get(level, logging.INFO))
    root.propagate = False
    fmt = logging.Formatter(f"%(asctime)s netattach[{os.getpid()}] %(levelname)s %(name)s: %(message)s")
    if log_file:
        try:
            handler: logging.Handler = _AppendHandler(log_file, _open_append(log_file),
                                                      stderr_fallback=not to_stderr)
            handler.setFormatter(fmt)
            root.addHandler(handler)
        except OSError as e:
            print(f"netattach: cannot open log file {log_file}: {e.strerror}", file=sys.stderr)
    if to_stderr or not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(fmt)
        root.addHandler(handler)


def _open_append(path: str) -> int:
    """`path` opened for appending, created 0600 (less under a stricter umask)."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)


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
        with self.lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1
        super().close()
