"""Which of the node daemon's calls run when (issue 21, "Bounded work per pod"): the
pool's queue, with one sandbox at a time and bounds on what may wait.

Pod owners are tenants, and a pod decides how long its calls take (the networks it
selects, the plugins their NADs run), so one sandbox must not take the pool. The rules:

* **One call per sandbox at a time.** A call of a sandbox (its CNI_CONTAINERID: ADD,
  DEL, CHECK) runs on a worker only while no other call of that sandbox runs; the
  others wait here, without a worker. They would wait anyway: the container's lock
  (statestore.StateStore.lock, spec §7.3) serializes them, but a call blocked on that lock
  held one of the `workers`, so a runtime retrying the calls of one slow sandbox could
  take every worker and starve every other pod of the node. Calls without a sandbox
  (GC, STATUS) each run on their own.
* **Sandboxes take turns.** When a sandbox's call ends and another of it waits, that
  one goes to the back of the line of calls ready to run, behind those of other
  sandboxes that came meanwhile: first come, first served between sandboxes.
* **Bounded waiting.** At most `max_waiting_per_sandbox` calls of one sandbox wait
  (MAX_WAITING_PER_SANDBOX: a runtime has an ADD, the DEL after giving up on it and
  that DEL's retry outstanding, not more), and at most `max_waiting` calls in all
  (`--max-queued`). A call past either bound is refused at once with code 11 (try
  again later, Refused) rather than queued: each waiting call is a shim process and a
  socket on the node, and the runtime retries a failed call anyway.
* **Saturation.** The pool is saturated while every worker is busy and a call that
  could run (no other call of its sandbox running) waits for one; `saturated_for`
  says for how long, and the daemon's /readyz turns false past `--saturation-timeout`
  (server.Daemon.readiness), true again as soon as no call waits for a worker.

Pure logic under one lock; the clock is injected (tests/unit/test_daemon_admission.py).
"""
from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

T = TypeVar("T")

MAX_WAITING_PER_SANDBOX = 4
"""Calls of one sandbox that may wait while one of it runs (module doc)."""


class Refused(Exception):
    """A call not admitted: `bound` is "sandbox" (too many of its sandbox wait) or
    "queue" (too many calls wait in all); the message says which, with the numbers."""

    def __init__(self, bound: str, message: str):
        super().__init__(message)
        self.bound = bound


class Slot:
    """The sandbox a running call holds; handed back to CallQueue.done."""
    __slots__ = ("key",)

    def __init__(self, key: Hashable):
        self.key = key


class CallQueue(Generic[T]):
    """The queue of the daemon's pool of `workers` threads (module doc).

    workers: threads calling `get` (>= 1); max_waiting: calls that may wait in all
    (>= 0); max_waiting_per_sandbox: calls of one sandbox that may wait (>= 0); clock:
    monotonic seconds, of `saturated_for`. Raises ValueError for a bad number.
    """

    def __init__(self, workers: int, max_waiting: int,
                 max_waiting_per_sandbox: int = MAX_WAITING_PER_SANDBOX,
                 clock: Callable[[], float] = time.monotonic):
        if workers < 1 or max_waiting < 0 or max_waiting_per_sandbox < 0:
            raise ValueError("workers must be positive, the bounds not negative")
        self.workers = workers
        self.max_waiting = max_waiting
        self.max_waiting_per_sandbox = max_waiting_per_sandbox
        self._clock = clock
        self._cond = threading.Condition()
        self._waiting: dict[Hashable, collections.deque[T]] = {}
        self._ready: collections.deque[Hashable] = collections.deque()
        self._running: set[Hashable] = set()
        self._count = 0  # calls waiting, all sandboxes
        self._closed = False
        self._saturated_since: float | None = None

    def put(self, sandbox: str | None, call: T) -> None:
        """Queue `call` of `sandbox` (its container ID; None: a call of no sandbox).
        Raises Refused past a bound, ValueError once closed."""
        key: Hashable = sandbox if sandbox else object()
        with self._cond:
            if self._closed:
                raise ValueError("the queue is closed")
            if self._count >= self.max_waiting:
                raise Refused("queue", f"{self._count} calls already wait for the daemon's "
                                       f"{self.workers} workers (at most {self.max_waiting})")
            queued = self._waiting.get(key)
            if queued is not None and len(queued) >= self.max_waiting_per_sandbox:
                raise Refused("sandbox", f"{len(queued)} calls of this sandbox already wait "
                                         "for the one running (at most "
                                         f"{self.max_waiting_per_sandbox})")
            if queued is None:
                queued = self._waiting[key] = collections.deque()
                if key not in self._running:
                    self._ready.append(key)
            queued.append(call)
            self._count += 1
            self._update()
            self._cond.notify()

    def get(self, timeout: float | None = None) -> tuple[Slot, T] | None:
        """The next call to run, waiting up to `timeout` seconds (None: until there is
        one); its sandbox is held until `done(slot)`. None when the timeout passed, or
        once closed with nothing left to run (the worker then ends)."""
        with self._cond:
            deadline = None if timeout is None else time.monotonic() + timeout
            while not self._ready:
                if self._closed and not self._count:
                    return None
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._cond.wait(left)
            key = self._ready.popleft()
            queued = self._waiting[key]
            call = queued.popleft()
            if not queued:
                del self._waiting[key]
            self._count -= 1
            self._running.add(key)
            self._update()
            if self._closed and not self._count:
                self._cond.notify_all()  # the idle workers end
            return Slot(key), call

    def done(self, slot: Slot) -> None:
        """The call of `slot` ended: its sandbox's next call, if one waits, is ready."""
        with self._cond:
            self._running.discard(slot.key)
            if slot.key in self._waiting:
                self._ready.append(slot.key)
                self._cond.notify()
            self._update()

    def close(self) -> None:
        """Admit nothing more; `get` returns what waits, then None to every worker."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def waiting(self) -> int:
        """Calls waiting, for a worker or for their sandbox's call running."""
        with self._cond:
            return self._count

    def running(self) -> int:
        """Calls running (held slots)."""
        with self._cond:
            return len(self._running)

    def saturated_for(self) -> float:
        """Seconds the pool has been saturated (module doc), 0.0 when it is not."""
        with self._cond:
            since = self._saturated_since
            return 0.0 if since is None else max(0.0, self._clock() - since)

    def _update(self) -> None:
        """Start or end the saturation (under the lock)."""
        saturated = bool(self._ready) and len(self._running) >= self.workers
        if not saturated:
            self._saturated_since = None
        elif self._saturated_since is None:
            self._saturated_since = self._clock()
