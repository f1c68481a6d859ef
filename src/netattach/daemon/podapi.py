"""The node daemon's side of the API seam (api.PodApi): reads from the watch caches, and
writes (network-status PATCH, Events) through queues that the runtime's answer does not
wait for.

Reads (`CachedPodApi`, one per CNI operation):
* get_pod: the pod from the cache of this node's pods. A pod not in it (created
  moments ago, or the cache not listed yet), or cached with another UID than the
  runtime's K8S_POD_UID (re-created under the same name; a mirror pod excepted,
  networks._check_uid), is read live, within the operation's `apiTimeout` budget.
* get_nad: the NetworkAttachmentDefinition from its cache. One missing there is
  asked for live too: a NAD created just before the pod is then never reported
  missing while its watch event is on the way; a NAD that does not exist costs one
  GET on an ADD that fails anyway. A NAD whose spec.config is over the daemon's
  bound (`--max-nad-config-bytes`; cache.REFUSED in the cache, or read live) is
  refused: code 7 naming the NAD and the bound (`nad_refused`).
Every live read is counted (`misses`, by kind) for the metrics.

Writes (`Publisher`): the ADD's PATCH of network-status and its Events are queued per
container and sent by a worker: each AddedInterface Event as soon as its attachment is up
(add._added_interface), the PATCH once the runtime has its answer. A container has three
queues, each sent in order: its status writes (the network-status, a claim's status:
STATUS), its Events (EVENTS) and its Warning Events (WARNINGS), so a failing Event
waiting for its retry never holds the network-status back. A failure
is retried (RETRY_PAUSES) and logged, never lost silently; an answer that says the pod
is gone or was re-created (404, 422) ends it. Every DEL of a container (the runtime's,
and GC's of a stale one: Orchestrator.drop_writes) first drops what it still has
queued, but for its Warnings, and waits for a network-status or claim status write in
progress (`Publisher.cancel`); an Event being sent is not waited for (it changes
nothing a DEL undoes, and the DEL would pay its round trip). The Warnings are kept: a
failed ADD's ErrorAddingNetwork is what tells the pod's owner why, and the runtime
DELs the failed sandbox at once, while the Events of the interfaces rolled back may
still be queued before it.

The network-status survives the daemon (`status_sender`, `republish`): ADD saves it in
the container's state as pending before answering (add._record_status,
state.PendingStatus); the PATCH is sent under the container's lock and only while the
state still holds that same pending status, which it then clears (also when the pod
is gone or re-created: 404, 422; a PATCH given up after its retries, or refused with
401/403, stays pending). A DEL clears it under the same lock before it releases
anything, so no PATCH reaches a pod after its sandbox's DEL began, whatever the order
of the queue, a restart and the DEL. When the daemon starts, once its pod cache is
listed, `republish` queues the PATCH of every state still pending whose pod is in the
cache (this node's) with the same UID and not being deleted, and clears the others.
Events are not saved: those queued when the daemon dies are lost.
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..kube.api import MIRROR_POD_ANNOTATION
from ..kube.client import Kube, KubeError
from ..node.state import PendingStatus, SavedState, StateError
from ..node.statestore import StateStore, is_missing_netns
from ..spec.delegates import DelegateError
from .cache import DEFAULT_MAX_NAD_CONFIG, NADS, PODS, REFUSED, WatchCache, config_size
from .events import EventRecorder, pod_object

log = logging.getLogger("netattach.daemon")

RETRY_PAUSES = (1.0, 2.0, 4.0, 8.0, 16.0)
"""Seconds before each retry of a queued write that failed (about half a minute in
all, beyond each try's own apiTimeout and its 429/5xx retries: kube/session.py)."""
FINAL_STATUSES = frozenset({401, 403, 404, 409, 422})
"""Answers no retry can change: credentials or RBAC, the pod gone, re-created."""
POD_GONE = frozenset({404, 422})
"""Answers to the status PATCH that end its pending record: the pod is gone, or was
re-created under its name (kube.Kube.patch_pod_annotations). After 401, 403 or the
last retry it stays pending, and the next start of the daemon sends it again."""


class NotSent(Exception):
    """A queued write that must not be sent any more (its container's state no longer
    holds it): dropped, without a retry."""


def status_sender(store: StateStore, container_id: str, namespace: str, name: str,
                  pending: PendingStatus) -> Callable[[Kube], None]:
    """The queued write of a container's network-status (module doc): under the
    container's lock, PATCH `pending` onto pod namespace/name only while the saved state
    still holds it, then clear it. Raises NotSent when the state no longer holds it (a
    DEL began, or it was sent), KubeError from the PATCH (retried by the Publisher)."""
    def send(kube: Kube) -> None:
        with store.lock(container_id):
            try:
                state = store.load(container_id)
            except StateError as e:
                raise NotSent(f"the container's state cannot be read: {e}") from None
            if state is None:
                raise NotSent("the container's state is gone (DEL)")
            if state.status_pending != pending:
                raise NotSent("the container's state no longer holds it (DEL, or sent)")
            try:
                kube.patch_pod_annotations(namespace, name, pending.annotations,
                                           pending.uid or None)
            except KubeError as e:
                if e.status in POD_GONE:
                    _clear(store, state)
                raise
            _clear(store, state)
    return send


def _clear(store: StateStore, state: SavedState) -> None:
    """Save `state` without its pending status (the lock is held). A failure is logged:
    the status stays pending and is sent again (idempotent) when the daemon starts."""
    state.status_pending = None
    try:
        store.save(state, durable=False)  # after a power loss, its netns is gone: not re-sent
    except StateError as e:
        log.warning("container %s: network-status sent, but it cannot be marked so (it is "
                    "sent again when the daemon starts): %s", state.container_id, e)


def stale_reason(pending: PendingStatus, pod: dict[str, Any] | None) -> str | None:
    """Why a network-status left pending by an earlier daemon must not be sent now, given
    its pod as the synced cache of this node's pods holds it (None: not there); None
    when it may be sent."""
    if pod is None:
        return "the pod is gone (or no longer on this node)"
    meta = pod.get("metadata") or {}
    if pending.uid and meta.get("uid") != pending.uid:
        return f"the pod was re-created (UID {meta.get('uid')}, the status is for {pending.uid})"
    if meta.get("deletionTimestamp"):
        return "the pod is being deleted"
    return None


def republish(store: StateStore, ids: list[str], pods: WatchCache,
              submit: Callable[[str, str, Callable[[Kube], None]], None]) -> int:
    """At the daemon's start, once `pods` is synced: queue (`submit(container_id, what,
    send)`) the network-status PATCH of every state of `ids` (the containers saved
    before this daemon served a call) still pending (module doc), and clear the pending
    status of those whose pod is gone, re-created or being deleted. Returns how many
    were queued. A state that cannot be read is skipped (its DEL deals with it)."""
    queued = 0
    for cid in ids:
        try:
            with store.lock(cid):
                state = store.load(cid)
                if state is None or state.status_pending is None or state.pod is None:
                    continue
                pending, pod = state.status_pending, state.pod
                why = ("the sandbox's netns is gone (the node restarted, or the sandbox "
                       "stopped)" if is_missing_netns(state.netns) else
                       stale_reason(pending, pods.get(pod.namespace, pod.name)))
                if why is not None:
                    log.info("container %s: the network-status of pod %s left unsent by an "
                             "earlier daemon is dropped: %s", cid, pod, why)
                    _clear(store, state)
                    continue
        except StateError as e:
            log.warning("container %s: network-status not re-sent: %s", cid, e)
            continue
        log.info("container %s: re-sending the network-status of pod %s that an earlier "
                 "daemon left unsent", cid, pod)
        submit(cid, f"patch pod {pod} status (re-sent)",
               status_sender(store, cid, pod.namespace, pod.name, pending))
        queued += 1
    return queued


def nad_refused(namespace: str, name: str, size: int, limit: int) -> DelegateError:
    """The error of a NAD whose spec.config (`size` bytes) is over the daemon's bound
    (`limit` bytes, --max-nad-config-bytes): code 7 (a DelegateError, ConfigError),
    naming the NAD, both sizes and the flag."""
    return DelegateError(f"{namespace}/{name}", (
        f"NetworkAttachmentDefinition {namespace}/{name}: its spec.config is {size} bytes, "
        f"more than the node daemon's bound of {limit} bytes (--max-nad-config-bytes); "
        "the daemon does not keep or use it"))


class CachedPodApi:
    """api.PodApi for one CNI operation of the daemon.

    pods, nads: the caches; live: the operation's Kube (its apiTimeout budget), made on
    first use by `make_live`; expected_uid: the runtime's K8S_POD_UID (""): a cached
    pod with another UID is read live; publish: queues a write for this operation's
    container (Publisher.submit bound to it); store, container_id: the operation's
    state files and container (the status PATCH is sent only while its state holds it,
    `status_sender`); misses: kind -> live reads (shared counter of the daemon, updated
    under `lock`); events: the daemon's EventRecorder (daemon/events.py: an Event seen
    before raises its count), None: each Event created as is; max_nad_config: bytes, a
    NAD's spec.config read live is refused over it (as the cache refuses it).
    """

    WRITES_AFTER_ANSWER = True
    """api.writes_after_answer: ADD records the network-status as pending first."""
    PODS_CACHED = True
    """api.pods_cached: ADD reads the pod (spec.resourceClaims included) from the cache,
    not its annotations from the runtime."""

    def __init__(self, pods: WatchCache, nads: WatchCache, make_live: Callable[[], Kube],
                 expected_uid: str, publish: Callable[[str, Callable[[Kube], None], str], None],
                 store: StateStore, container_id: str,
                 misses: collections.Counter[str], lock: threading.Lock,
                 events: EventRecorder | None = None,
                 max_nad_config: int = DEFAULT_MAX_NAD_CONFIG):
        self.pods, self.nads = pods, nads
        self.max_nad_config = max_nad_config
        self.events = events
        self.store, self.container_id = store, container_id
        self._make_live = make_live
        self._live: Kube | None = None
        self.expected_uid = expected_uid
        self._publish = publish
        self._misses, self._lock = misses, lock

    def _kube(self, kind: str) -> Kube:
        """The live client for a cache miss of `kind` (counted)."""
        with self._lock:
            self._misses[kind] += 1
        return self._uncached()

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod from the cache, else live (module doc). Raises KubeError."""
        obj = self.pods.get(namespace, name) if self.pods.synced.is_set() else None
        if obj is not None:
            meta = obj["metadata"]
            if (not self.expected_uid or meta.get("uid") == self.expected_uid
                    or MIRROR_POD_ANNOTATION in (meta.get("annotations") or {})):
                return obj
        return self._kube(PODS).get_pod(namespace, name)

    def get_nad(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The NetworkAttachmentDefinition from the cache, else live (module doc).
        Raises DelegateError (code 7, `nad_refused`) for one whose config is over the
        bound, KubeError when a live read fails."""
        obj = self.nads.get(namespace, name) if self.nads.synced.is_set() else None
        if obj is None:
            obj = self._kube(NADS).get_nad(namespace, name)
            spec = (obj or {}).get("spec")
            if isinstance(spec, dict) and "config" in spec:
                size = config_size(spec["config"])
                if size > self.max_nad_config:
                    raise nad_refused(namespace, name, size, self.max_nad_config)
            return obj
        refused = obj.get(REFUSED)
        if refused is not None:
            raise nad_refused(namespace, name, refused["bytes"], refused["limit"])
        return obj

    def patch_pod_annotations(self, namespace: str, name: str, annotations: dict[str, str],
                              uid: str | None = None) -> None:
        """Queued (Publisher), sent while the container's state holds it as pending
        (add._record_status saved it; `status_sender`); never raises."""
        self._publish(f"patch pod {namespace}/{name} status", status_sender(
            self.store, self.container_id, namespace, name, PendingStatus(uid or "", annotations)),
            STATUS)

    def create_event(self, pod: dict[str, str], type_: str, reason: str, message: str) -> None:
        """Queued (Publisher; a Warning in the container's WARNINGS queue, which a DEL
        keeps), aggregated by `events` (daemon/events.py); never raises."""
        recorder = self.events

        def send(kube: Kube) -> None:
            if recorder is None:
                kube.create_event(pod, type_, reason, message)
            else:
                recorder.send(kube, pod_object(pod), type_, reason, message)
        self._publish(f"event {reason} on pod {pod['namespace']}/{pod['name']}", send,
                      WARNINGS if type_ == "Warning" else EVENTS)

    def _uncached(self) -> Kube:
        """The operation's live client for what no cache holds (not a cache miss)."""
        if self._live is None:
            self._live = self._make_live()
        return self._live

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ResourceClaim, live (not cached: only pods with claims ask)."""
        return self._uncached().get_resource_claim(namespace, name)

    def list_resource_slices(self, driver: str) -> list[dict[str, Any]]:
        """The driver's ResourceSlices, live (only an argument from a device asks)."""
        return self._uncached().list_resource_slices(driver)

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ConfigMap, live (only an argument from a ConfigMap asks)."""
        return self._uncached().get_configmap(namespace, name)

    def apply_claim_devices(self, namespace: str, name: str, devices: list[dict[str, Any]],
                            uid: str = "", resource_version: str = "",
                            after_answer: bool = False) -> None:
        """`after_answer`: queued (Publisher; a DEL of the container drops it), never
        raises; otherwise sent live now (a failed ADD's Ready False, which the runtime's
        DEL right after it would drop from the queue; DEL's clearing)."""
        if not after_answer:
            self._uncached().apply_claim_devices(namespace, name, devices, uid,
                                                 resource_version)
            return
        self._publish(f"apply ResourceClaim {namespace}/{name} status.devices",
                      lambda kube: kube.apply_claim_devices(namespace, name, devices, uid,
                                                            resource_version), STATUS)

    def pause(self, seconds: float) -> bool:
        """Out of the live budget (kube.Kube.pause)."""
        return self._uncached().pause(seconds)


STATUS = "status"
"""Publisher queue of a container's status writes (network-status, a claim's status): a
DEL drops those queued and waits for the one being sent (module doc)."""
EVENTS = "events"
"""Publisher queue of a container's Events: a DEL drops those queued, never waits."""
WARNINGS = "warnings"
"""Publisher queue of a container's Warning Events: sent whatever DEL comes (module doc)."""


class Publisher:
    """The queues of writes the runtime's answer does not wait for (module doc).

    make_kube: a Kube for one try (its own apiTimeout budget). workers: threads
    sending; each queue of a container (STATUS, EVENTS, WARNINGS) is sent in order, by
    one worker at a time (module doc).
    Counters (read by the metrics): sent, failed (tries that failed), dropped (given
    up or cancelled by a DEL).
    """

    def __init__(self, make_kube: Callable[[], Kube], workers: int = 2):
        self.make_kube = make_kube
        self.sent = self.failed = self.dropped = 0
        # (container, STATUS | EVENTS | WARNINGS) -> that queue of (what, send)
        self._queues: dict[tuple[str, str], collections.deque[
            tuple[str, Callable[[Kube], None]]]] = {}
        self._ready: collections.deque[tuple[str, str]] = collections.deque()
        self._busy: set[tuple[str, str]] = set()  # the queues whose write is being sent
        self._cond = threading.Condition()
        self._stopping = False
        self._threads = [threading.Thread(target=self._work, name=f"publish-{i}", daemon=True)
                         for i in range(workers)]
        for t in self._threads:
            t.start()

    def pending(self) -> int:
        with self._cond:
            return sum(len(q) for q in self._queues.values()) + len(self._busy)

    def submit(self, container_id: str, what: str, send: Callable[[Kube], None],
               queue: str = STATUS) -> None:
        """Queue `send` (one write, described by `what`) for `container_id`, at the end of
        its `queue`: STATUS, a write a DEL of the container that begins while it is
        being sent waits for (`cancel`; the network-status and a claim's status must not
        land after the DEL's own writes); EVENTS, an Event a DEL drops; WARNINGS, a
        Warning Event a DEL keeps (module doc)."""
        key = (container_id, queue)
        with self._cond:
            self._queues.setdefault(key, collections.deque()).append((what, send))
            if key not in self._busy and key not in self._ready:
                self._ready.append(key)
            self._cond.notify()

    def cancel(self, container_id: str) -> None:
        """Drop the container's queued writes but its Warnings, and wait until none of its
        STATUS writes is being sent (a DEL of it begins: Orchestrator.drop_writes).
        Never called with the container's lock held: a status write being sent holds
        it."""
        with self._cond:
            dropped = [*self._queues.pop((container_id, STATUS), ()),
                       *self._queues.pop((container_id, EVENTS), ())]
            self._cond.notify_all()  # a worker pausing before a retry of it stops
            if dropped:
                self.dropped += len(dropped)
                log.info("container %s: DEL: %d queued write(s) not sent: %s", container_id,
                         len(dropped), "; ".join(w for w, _ in dropped))
            while (container_id, STATUS) in self._busy:
                self._cond.wait()

    def drain(self, timeout: float) -> bool:
        """Wait up to `timeout` s until nothing is queued or being sent (shutdown)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._queues or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._ready:
                    self._cond.wait()
                key = self._ready.popleft()
                queue = self._queues.get(key)
                if not queue:
                    self._queues.pop(key, None)
                    continue
                what, send = queue.popleft()
                self._busy.add(key)
            try:
                self._send(key, what, send)
            finally:
                with self._cond:
                    self._busy.discard(key)
                    if self._queues.get(key):
                        self._ready.append(key)
                    else:
                        self._queues.pop(key, None)
                    self._cond.notify_all()

    def _send(self, key: tuple[str, str], what: str, send: Callable[[Kube], None]) -> None:
        """Try `send` (of the queue `key`: (container, STATUS | EVENTS | WARNINGS)) until
        it succeeds, fails for good, or RETRY_PAUSES are spent; a DEL of the container
        (cancel) stops the retries but a Warning's. Logs every failure."""
        cid = key[0]
        for attempt, pause in enumerate((*RETRY_PAUSES, None), 1):
            try:
                send(self.make_kube())
                self.sent += 1
                if attempt > 1:
                    log.info("container %s: %s: sent on try %d", cid, what, attempt)
                return
            except KubeError as e:
                self.failed += 1
                final = e.status in FINAL_STATUSES
                if final or pause is None:
                    self.dropped += 1
                    log.error("container %s: %s failed%s: %s", cid, what,
                              "" if final else f" {attempt} times; giving up", e)
                    return
                log.warning("container %s: %s failed (try %d; again in %g s): %s", cid, what,
                            attempt, pause, e)
            except NotSent as e:
                self.dropped += 1
                log.info("container %s: %s: not sent: %s", cid, what, e)
                return
            except Exception:  # a bug: logged with its traceback, not retried
                self.dropped += 1
                log.exception("container %s: %s failed", cid, what)
                return
            with self._cond:
                deadline = time.monotonic() + pause
                while key in self._queues and (left := deadline - time.monotonic()) > 0:
                    self._cond.wait(left)
                if key not in self._queues:  # a DEL cancelled the container's writes
                    log.info("container %s: %s: not retried (DEL)", cid, what)
                    self.dropped += 1
                    return
