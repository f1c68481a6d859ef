"""Hot-plug (issue 13): the node daemon attaches and detaches networks of a running pod
when its `k8s.v1.cni.cncf.io/networks` annotation changes.

Which sandboxes: those whose ADD the daemon served with `hotplug` true in netattach's
configuration; that ADD saved what a later change needs (state.HotplugContext: the
configuration, CNI_PATH, the pod's default-network annotation, the network-status;
and each element's identity, SavedAttachment.selection). A pod opts out with the
annotation `netattach.io/hotplug: "false"`. Sandboxes whose cniDir is not the daemon's
`--cni-dir` are found while this daemon runs (it saw their ADD), not after a restart.

When: the watch of this node's pods reports a change of the selection (or of the
default-network or opt-out annotation), once for every such sandbox when the daemon
starts (a change made while it was down, or one it was killed in), and when the
backoff of a failed step ends. At most one change per pod every `interval` seconds;
the annotation as it is when its turn comes is applied (later edits in between are
coalesced).

Bounded work (issue 21): the queue holds at most one entry per pod (`notify`
coalesces: a pod already queued keeps its entry, moved earlier if need be), so it is
never longer than the number of pods with a tracked sandbox on this node. A step that
fails (an element's ADD: its NAD missing or refused, its child failing; an
attachment's DEL) is not tried again before its backoff ends (daemon/backoff.py:
`backoff_initial` s, doubling at each failure in a row up to `backoff_max`, the
kubelet's CrashLoopBackOff rule), whatever edits of the annotation come in between:
such a look skips it (counted "deferred") and the pod is looked at again when the
backoff ends. The key is the container and the element's NAD (for a DEL, the
attachment's NAD and interface), so renaming the interface does not start it anew; a
success forgets it, and so does the sandbox's DEL.

What a change does (under the container's lock, each step recorded before its child
runs, an interrupted one undone at the next look, the network-status synced): the
command, commands/hotplug.py (`cmd_hotplug`), which returns its `Outcome`; this worker
acts on it: each step's backoff, the metrics, the Events (a standing refusal reported
once), forgetting a sandbox found gone. The command never calls back into the worker.
"""
from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..cni import invoke
from ..commands.hotplug import OPT_OUT_ANNOTATION, Outcome, StepKey, cmd_hotplug
from ..commands.orchestrator import Orchestrator
from ..kube.api import PodApi
from ..node.state import StateError
from ..node.statestore import StateStore
from ..spec.netconf import NetConf
from ..spec.selection import DEFAULT_NETWORK_ANNOTATION, NETWORKS_ANNOTATION
from .backoff import Backoff
from .cache import WatchCache

log = logging.getLogger("netattach.daemon")

WATCHED = (NETWORKS_ANNOTATION, DEFAULT_NETWORK_ANNOTATION, OPT_OUT_ANNOTATION)
"""The annotations whose change makes the pod's sandboxes be looked at."""

PodKey = tuple[str, str]


def _annotations(obj: dict[str, Any] | None) -> dict[str, Any]:
    return ((obj or {}).get("metadata") or {}).get("annotations") or {}


class Hotplugger:
    """The daemon's hot-plug worker (module doc).

    pods: the cache of this node's pods (its listener feeds `pod_changed`); cni_dir:
    the daemon's --cni-dir, scanned at start; make_api: (environ, conf) -> the API seam
    of one operation on a container (Daemon._api: cached reads, queued writes);
    drop_writes: the orchestrator's (Publisher.cancel); interval: seconds between two
    changes of one pod; clock: monotonic seconds (injectable: the rate limit and the
    backoff read it); executor: runs the children (the daemon's:
    chroot.ChrootExecutor with --chroot-dir); backoff: the failed steps' backoff
    (daemon/backoff.py; default: 10 s doubling up to 300 s).
    Counters for the metrics (under `lock`): changes by result ("added", "removed",
    "failed", "refused", "deferred": a failed step skipped while its backoff runs).
    """

    def __init__(self, pods: WatchCache, cni_dir: str,
                 make_api: Callable[[dict[str, str], NetConf], PodApi],
                 drop_writes: Callable[[str], None], interval: float = 2.0,
                 clock: Callable[[], float] = time.monotonic,
                 executor: invoke.Executor = invoke.PROCESS_EXECUTOR,
                 backoff: Backoff | None = None):
        self.pods, self.cni_dir = pods, cni_dir
        self.executor = executor
        self.make_api, self.drop_writes = make_api, drop_writes
        self.interval, self.clock = interval, clock
        self.backoff = backoff if backoff is not None else Backoff()
        self.lock = threading.Lock()
        self.changes: dict[str, int] = {"added": 0, "removed": 0, "failed": 0, "refused": 0,
                                        "deferred": 0}
        self._sandboxes: dict[PodKey, dict[str, str]] = {}  # pod -> {container ID: cni dir}
        self._due: list[tuple[float, PodKey]] = []  # heap of (when, pod), one per pod
        self._queued: dict[PodKey, float] = {}  # pod -> when it is due (its heap entry)
        self._retry: dict[str, float] = {}  # container -> when its first backoff ends
        self._last: dict[PodKey, float] = {}
        self._refused: dict[str, set[str]] = {}  # container -> reasons last reported
        self._wake = threading.Condition(self.lock)
        self.exclusive = threading.Lock()
        """Held by each reconcile and by the daemon's GC (Daemon.serve): GC tells the
        delegates which attachments are valid from the states it read, so no hot-plug
        ADD may come between its reading and its delegates' GC (they would free the
        new attachment's IP)."""
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="hotplug", daemon=True)

    # -- what the daemon tells it

    def track(self, cni_dir: str, container_id: str, pod: PodKey) -> None:
        """A sandbox of `pod` was ADDed with `hotplug` (Daemon.serve): looked at now,
        for a change made while its ADD ran."""
        with self.lock:
            self._sandboxes.setdefault(pod, {})[container_id] = cni_dir
        self.notify(pod)

    def untrack(self, container_id: str) -> None:
        """The sandbox was DELed (by the runtime; found gone at a reconcile: GC's)."""
        with self.lock:
            self._refused.pop(container_id, None)
            self._retry.pop(container_id, None)
            self.backoff.forget(container_id)
            for pod, ids in list(self._sandboxes.items()):
                if ids.pop(container_id, None) is not None and not ids:
                    del self._sandboxes[pod]
                    self._last.pop(pod, None)

    def pod_changed(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        """The pod cache's listener: a pod whose watched annotations changed (WATCHED)."""
        if new is None:
            return
        before, after = _annotations(old), _annotations(new)
        if old is not None and all(before.get(k) == after.get(k) for k in WATCHED):
            return
        meta = new.get("metadata") or {}
        pod = (meta.get("namespace", ""), meta.get("name", ""))
        with self.lock:
            tracked = pod in self._sandboxes
        if tracked:
            self.notify(pod)

    def notify(self, pod: PodKey, at: float | None = None) -> None:
        """Look at `pod`'s sandboxes as soon as its rate limit allows (`at`: not before
        that time of the clock, a backoff's end). Coalesced: a pod has one entry in the
        queue at most; one already queued is moved earlier, never later, so the queue
        never holds more entries than there are pods (module doc, "Bounded work")."""
        with self.lock:
            due = max(self.clock(), self._last.get(pod, float("-inf")) + self.interval,
                      at if at is not None else float("-inf"))
            queued = self._queued.get(pod)
            if queued is not None:
                if queued <= due:
                    return
                self._due.remove((queued, pod))
                heapq.heapify(self._due)
            heapq.heappush(self._due, (due, pod))
            self._queued[pod] = due
            self._wake.notify()

    def queued(self) -> int:
        """Entries in the work queue now (one per pod at most; a metric)."""
        with self.lock:
            return len(self._due)

    # -- lifecycle

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self.lock:
            self._stop = True
            self._wake.notify()

    def _run(self) -> None:
        self.pods.synced.wait()
        try:
            self._scan()
        except Exception:  # a bug: logged; later ADDs are still tracked
            log.exception("hot-plug: scanning %s failed", self.cni_dir)
        while True:
            with self.lock:
                while not self._stop and (not self._due or self._due[0][0] > self.clock()):
                    self._wake.wait(None if not self._due
                                    else max(0.0, self._due[0][0] - self.clock()))
                if self._stop:
                    return
                _, pod = heapq.heappop(self._due)
                del self._queued[pod]
                self._last[pod] = self.clock()
                self.backoff.gc(self._last[pod])
                sandboxes = dict(self._sandboxes.get(pod, {}))
            for cid, cni_dir in sandboxes.items():
                try:
                    self.reconcile(StateStore(cni_dir), cid)
                except Exception:  # a bug: logged, the next change is looked at anyway
                    log.exception("hot-plug of pod %s/%s, container %s failed", *pod, cid)
            with self.lock:
                retry = [self._retry.pop(cid) for cid in sandboxes if cid in self._retry]
            if retry and pod in self._sandboxes:
                self.notify(pod, at=min(retry))

    def _scan(self) -> None:
        """At start: every sandbox of --cni-dir ADDed with `hotplug` is tracked and looked
        at (a change made while the daemon was down, or one it was killed in)."""
        store = StateStore(self.cni_dir)
        found = 0
        for cid in store.container_ids():
            try:
                state = store.load(cid)
            except StateError:
                continue
            if state is None or state.hotplug is None or state.pod is None:
                continue
            pod = (state.pod.namespace, state.pod.name)
            with self.lock:
                self._sandboxes.setdefault(pod, {})[cid] = self.cni_dir
            self.notify(pod)
            found += 1
        log.info("hot-plug: %d sandbox(es) in %s can be changed", found, self.cni_dir)

    # -- one sandbox

    def _count(self, result: str, n: int = 1) -> None:
        with self.lock:
            self.changes[result] += n

    def _waiting(self, container_id: str) -> set[StepKey]:
        """The steps of the container in backoff now (Step.key: the key without the
        container ID), which the command skips."""
        with self.lock:
            return {key[1:] for key in self.backoff.waiting_keys(container_id, self.clock())}

    def _defer(self, container_id: str, key: tuple[str, ...]) -> None:
        """The command skipped the step `key` (the container's, in backoff): counted
        "deferred"; the pod is looked at again when the backoff ends."""
        with self.lock:
            self.changes["deferred"] += 1
            self._retry_at(container_id, key)
        log.debug("hot-plug: container %s: %s not tried before its backoff ends", container_id,
                  " ".join(key[1:]))

    def _outcome(self, container_id: str, key: tuple[str, ...], ok: bool) -> None:
        """Record the step `key` succeeded (its backoff forgotten) or failed (its backoff
        grows; the pod is looked at again when it ends)."""
        with self.lock:
            if ok:
                self.backoff.reset(key)
                return
            delay = self.backoff.failed(key, self.clock())
            self._retry_at(container_id, key)
        log.info("hot-plug: container %s: %s failed; tried again in %g s at the earliest "
                 "(backoff)", container_id, " ".join(key[1:]), delay)

    def _retry_at(self, container_id: str, key: tuple[str, ...]) -> None:
        due = self.backoff.due(key)  # the lock is held
        if due is not None:
            self._retry[container_id] = min(due, self._retry.get(container_id, due))

    def reconcile(self, store: StateStore, container_id: str) -> None:
        """Bring the sandbox `container_id` in line with its pod's selection now: the
        command (commands/hotplug.py, `cmd_hotplug`) under `exclusive`, with this
        daemon's seams (the API seam of one operation, the executor, drop_writes) and
        the steps in backoff, then act on its Outcome (`_act`). A child's failure is
        logged and reported as an event; what stopped the command (a state that cannot
        be read or written: StateError; a bug) is raised after its steps are acted on
        (the worker logs it)."""
        apis: list[PodApi] = []

        def orchestrator(environ: dict[str, str]) -> Orchestrator:
            def api(conf: NetConf) -> PodApi:
                apis.append(self.make_api(environ, conf))
                return apis[-1]
            return Orchestrator(api=api, executor=self.executor, drop_writes=self.drop_writes)

        with self.exclusive:  # the backoffs as they are once the worker may run the steps
            outcome = cmd_hotplug(orchestrator, store, container_id, self.pods.get,
                                  self._waiting(container_id))
        self._act(container_id, outcome, apis[-1] if apis else None)
        if outcome.error is not None:
            raise outcome.error

    def _act(self, container_id: str, outcome: Outcome, api: PodApi | None) -> None:
        """What the worker does with a command's Outcome: forget a sandbox gone; each
        deferred step counted, each step's backoff reset or grown; the metrics; the
        Events through `api` (the seam the change went through): the steps', each
        refusal not reported at the sandbox's last look, the AddedInterface ones."""
        if outcome.gone:
            self.untrack(container_id)  # DELed (GC's, or before it was tracked)
            return
        for key in outcome.deferred:
            self._defer(container_id, (container_id, *key))
        for step in outcome.steps:
            self._outcome(container_id, (container_id, *step.key), step.ok)
        for result, n in (("removed", len(outcome.removed)), ("added", len(outcome.added)),
                          ("failed", len(outcome.failed))):
            if n:
                self._count(result, n)
        pod = outcome.pod
        if pod is None or api is None:
            return
        pod_doc = {"namespace": pod.namespace, "name": pod.name, "uid": pod.uid}

        def event(type_: str, reason: str, message: str) -> None:
            api.create_event(pod_doc, type_, reason, message)

        for e in outcome.events:
            event(*e)
        if outcome.refused is not None:
            self._refuse(container_id, outcome.refused, pod, event)
        for e in outcome.status_events:
            event(*e)

    def _refuse(self, container_id: str, reasons: list[str], pod: Any,
                event: Callable[[str, str, str], None]) -> None:
        """Report each refusal once while it stands: a Warning event and the metric for a
        reason not reported at the sandbox's last look (`reasons`: all that stand now;
        one no longer there is forgotten, and reported again if it comes back)."""
        with self.lock:
            before = self._refused.get(container_id, set())
            self._refused[container_id] = set(reasons)
        for reason in reasons:
            if reason in before:
                continue
            log.warning("pod %s: hot-plug refused: %s", pod, reason)
            self._count("refused")
            event("Warning", "HotplugRefused", reason)
