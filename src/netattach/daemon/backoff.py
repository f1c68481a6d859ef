"""Per-key exponential backoff of the node daemon's retries (hot-plug, daemon/hotplug.py).

The rule is client-go's `flowcontrol.Backoff` (k8s.io/client-go/util/flowcontrol/
backoff.go), the one the kubelet uses for its image pulls and container restarts
(CrashLoopBackOff: 10 s, doubling, capped at 5 min, MaxContainerBackOff): the first
failure of a key waits `initial` seconds; each failure while it is in backoff doubles
the wait, up to `maximum`; a key that has not failed for 2 x `maximum` starts again at
`initial` (client-go's `hasExpired`), and is dropped by `gc` then. A success forgets
the key (`reset`). No jitter: the hot-plug worker is one thread per node, so retries of
many nodes do not line up on one server.

Pure logic: the clock is whatever the caller passes as `now` (monotonic seconds).
"""
from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

DEFAULT_INITIAL = 10.0
"""Seconds of the first wait (the kubelet's container restart backoff, backOffPeriod)."""
DEFAULT_MAXIMUM = 300.0
"""Seconds, the cap (the kubelet's MaxContainerBackOff)."""


@dataclass
class _Entry:
    delay: float
    last: float  # when the last failure was recorded


class Backoff:
    """Failures by key and how long each must wait (module doc).

    initial, maximum: seconds, 0 < initial <= maximum. Raises ValueError otherwise.
    Not thread-safe: its owner holds a lock around every call.
    """

    def __init__(self, initial: float = DEFAULT_INITIAL, maximum: float = DEFAULT_MAXIMUM):
        if not 0 < initial <= maximum:
            raise ValueError(f"backoff: need 0 < initial ({initial}) <= maximum ({maximum})")
        self.initial, self.maximum = initial, maximum
        self._entries: dict[Hashable, _Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def failed(self, key: Hashable, now: float) -> float:
        """Record a failure of `key` at `now` (seconds); returns the seconds it must now
        wait: `initial` for a key unknown or idle for 2 x `maximum`, else twice its last
        wait, capped at `maximum`."""
        entry = self._entries.get(key)
        if entry is None or now - entry.last > 2 * self.maximum:
            entry = self._entries[key] = _Entry(self.initial, now)
        else:
            entry.delay, entry.last = min(entry.delay * 2, self.maximum), now
        return entry.delay

    def waiting(self, key: Hashable, now: float) -> bool:
        """True while `key`'s last failure is less than its wait before `now`."""
        entry = self._entries.get(key)
        return entry is not None and now - entry.last < entry.delay

    def due(self, key: Hashable) -> float | None:
        """When `key` may be tried again (the clock's seconds), None when it has no
        failure recorded."""
        entry = self._entries.get(key)
        return None if entry is None else entry.last + entry.delay

    def reset(self, key: Hashable) -> None:
        """`key` succeeded (or is gone): its next failure waits `initial` again."""
        self._entries.pop(key, None)

    def waiting_keys(self, match: object, now: float) -> list[tuple[Any, ...]]:
        """The keys that are tuples starting with `match` (a sandbox's container ID) and
        are `waiting` at `now`."""
        return [k for k, e in self._entries.items() if isinstance(k, tuple) and k
                and k[0] == match and now - e.last < e.delay]

    def forget(self, match: object) -> None:
        """Drop every key that is a tuple starting with `match` (a sandbox DELed: its
        container ID)."""
        for key in [k for k in self._entries if isinstance(k, tuple) and k and k[0] == match]:
            del self._entries[key]

    def gc(self, now: float) -> None:
        """Drop the keys that have not failed for 2 x `maximum` (client-go's GC): their
        next failure would start at `initial` anyway."""
        for key in [k for k, e in self._entries.items() if now - e.last > 2 * self.maximum]:
            del self._entries[key]
