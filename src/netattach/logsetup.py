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
    """
    root = logging.getLogger("netattach")
    root.handlers.clear()
    root.setLevel(LOG_LEVELS.get(level, logging.INFO))
    root.propagate = False
    fmt = logging.Formatter(f"%(asctime)s netattach[{os.getpid()}] %(levelname)s %(name)s: %(message)s")
    if log_file:
        try:
            fd = os.open(log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            # backslashreplace, as on stderr: a value from the environment that is not
            # UTF-8 (a lone surrogate in Python) is logged escaped, not lost with a traceback.
            handler: logging.Handler = logging.StreamHandler(
                os.fdopen(fd, "a", buffering=1, encoding="utf-8", errors="backslashreplace"))
            handler.setFormatter(fmt)
            root.addHandler(handler)
        except OSError as e:
            print(f"netattach: cannot open log file {log_file}: {e.strerror}", file=sys.stderr)
    if to_stderr or not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(fmt)
        root.addHandler(handler)
