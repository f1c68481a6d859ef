"""Every delegate execution of the node daemon timed, for /metrics (issue 24).

`TimedExecutor` wraps the daemon's executor (the process executor, or
chroot.ChrootExecutor under --chroot-dir): each child plugin it runs, for the runtime's
calls and for hot-plug alike, is reported to its observers as (plugin type, command,
result, seconds), which metrics.py turns into the histogram
`netattach_delegate_duration_seconds{plugin_type,command,result}` (docs/metrics.md).
Thin mode has no such metric: its process lives for one call (its timing log line has
the children's total, cni.invoke.child_seconds).

Labels, each bounded:
* plugin_type: the `type` of the child plugin, i.e. the name of the file the executor
  found and ran (a NAD names it, and NADs are written by tenants; but only a type that is
  an executable file in the plugin dirs, binDir and the runtime's CNI_PATH, which the
  node's admin fills, is ever run, so only those can make a series); past
  MAX_PLUGIN_TYPES distinct names, OTHER, so even a plugin dir holding a whole /usr/bin
  cannot make series without end;
* command: the child's CNI_COMMAND (ADD, DEL, CHECK, STATUS, GC), which can differ from
  the runtime's call (an ADD's rollback runs DEL);
* result: RESULTS: "success" (exit 0 and an answer that decodes), "timeout" (killed at
  its timeout, or the --chroot-dir spawner did not answer in time: TryAgain),
  "failure" (anything else: a CNI error object, a non-zero exit, a signal, output that is
  not JSON, an exec that failed).
A plugin that is not found (or refused by the meta-plugin rule) never runs and is not
timed.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..cni import invoke
from ..cni.errors import TryAgain

RESULTS = ("success", "failure", "timeout")
MAX_PLUGIN_TYPES = 64
"""Distinct plugin_type values at most; past them, OTHER."""
OTHER = "other"

log = logging.getLogger("netattach.daemon")

Observer = Callable[[str, str, str, float], None]
"""(plugin type, command, result, seconds) -> None, called after each execution."""


class TimedExecutor:
    """An invoke.Executor that runs through `inner` and reports each execution's wall
    time in seconds to every callable in `observers` (module doc; labels bounded by
    `max_types`). `root` is inner's (invoke.host_path reads it: the --chroot-dir)."""

    def __init__(self, inner: invoke.Executor, max_types: int = MAX_PLUGIN_TYPES):
        self.inner = inner
        self.max_types = max_types
        self.observers: list[Observer] = []
        self._types: set[str] = set()
        self._lock = threading.Lock()

    @property
    def root(self) -> str | None:
        root = getattr(self.inner, "root", None)
        return root if isinstance(root, str) else None

    def plugin_type(self, path: str) -> str:
        """The label of the plugin at `path` (the file's name: the `type` it was found
        by), or OTHER once `max_types` other names have been seen."""
        name = os.path.basename(path)
        with self._lock:
            if name in self._types:
                return name
            if len(self._types) < self.max_types:
                self._types.add(name)
                return name
        return OTHER

    def find(self, plugin_type: str, dirs: Sequence[str]) -> str:
        return self.inner.find(plugin_type, dirs)

    def run(self, path: str, command: str, config: dict[str, Any], env: invoke.PluginEnv,
            timeout: float) -> dict[str, Any] | None:
        """inner.run (exec_plugin's contract: same answer, same exceptions), timed."""
        result = RESULTS[1]
        start = time.monotonic()
        try:
            answer = self.inner.run(path, command, config, env, timeout)
            result = RESULTS[0]
            return answer
        except TryAgain:
            result = RESULTS[2]
            raise
        finally:
            seconds = time.monotonic() - start
            label = self.plugin_type(path)
            for observe in self.observers:
                try:  # a metric never replaces the child's answer or its error
                    observe(label, command, result, seconds)
                except Exception:
                    log.exception("recording the %s %s of %s failed", label, command, path)
