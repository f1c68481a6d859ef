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

What (`Hotplugger.reconcile`, under the container's lock, spec §7.3, so it never
races the runtime's calls): `hotplug.diff` of the saved attachments and the elements
selected now gives what to remove, add and refuse. Removed attachments are DELed in
reverse order, then new ones ADDed in the pod's netns with the same delegate
resolution, name injection, runtimeConfig and capability checks as ADD
(networks.resolve_element, plan.element_attachment). Each step is recorded in the
state before its child runs (SavedAttachment.change, fsync'ed): a daemon killed
mid-change leaves a state the runtime's DEL fully cleans (the attachment is in it,
attempted), and the restarted daemon undoes the interrupted step, then applies the
annotation anew. A child that fails rolls back that attachment only (its DEL), and a
Warning event names the network and the child's message. Refused, with a Warning
event: a changed `v1.multus-cni.io/default-network` (the cluster default network is
the runtime's interface), an element whose parameters changed in place, an interface
name already in use, a NAD with a device resource (devices are given at pod creation),
an element naming a `deviceID` (it is checked against the kubelet's allocation at pod
creation only).
Afterwards the network-status is brought in line with the state (`_synced_status`)
and PATCHed through the daemon's queue, as an ADD's (recorded pending first), and
each interface gets an `AddedInterface` or `RemovedInterface` event.
"""
from __future__ import annotations

import heapq
import json
import logging
import threading
import time
from collections.abc import Callable, Collection
from typing import Any

from ..cni import chain, invoke
from ..cni.errors import CniError
from ..cni.request import CniRequest, parse_request
from ..commands import networks
from ..commands.delete import delete_attachments
from ..commands.orchestrator import Orchestrator
from ..kube.api import PodApi
from ..node import netnsinfo
from ..node.devices import nad_resource_name
from ..node.state import (
    PendingStatus,
    SavedAttachment,
    SavedState,
    StateError,
)
from ..node.statestore import StateStore, is_missing_netns
from ..spec import hotplug, policy, status
from ..spec import plan as planning
from ..spec.netconf import NetConf, parse_netconf
from ..spec.selection import DEFAULT_NETWORK_ANNOTATION, NETWORKS_ANNOTATION
from .backoff import Backoff
from .cache import WatchCache

log = logging.getLogger("netattach.daemon")

OPT_OUT_ANNOTATION = "netattach.io/hotplug"
"""A pod with this annotation "false" is never changed by hot-plug."""
WATCHED = (NETWORKS_ANNOTATION, DEFAULT_NETWORK_ANNOTATION, OPT_OUT_ANNOTATION)
"""The annotations whose change makes the pod's sandboxes be looked at."""

PodKey = tuple[str, str]


def _annotations(obj: dict[str, Any] | None) -> dict[str, Any]:
    return ((obj or {}).get("metadata") or {}).get("annotations") or {}


def _identity(att: SavedAttachment) -> hotplug.Attached:
    """What hotplug.diff knows of a saved element attachment."""
    assert att.selection is not None
    return hotplug.Attached(att.network, att.ifname, att.selection["requested"],
                            att.selection["params"])


def _request(state: SavedState) -> tuple[dict[str, str], CniRequest, NetConf]:
    """The runtime's ADD of `state`'s sandbox as it was: (its CNI variables, the request
    and configuration parsed from them and the saved stdin as the ADD parsed them).
    Raises CniError."""
    assert state.hotplug is not None
    environ = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": state.container_id,
               "CNI_NETNS": state.netns, "CNI_IFNAME": state.ifname,
               "CNI_ARGS": ";".join(f"{k}={v}" for k, v in state.cni_args),
               "CNI_PATH": state.hotplug.cni_path}
    req = parse_request(environ, json.dumps(state.hotplug.netconf).encode())
    assert req.config is not None
    return environ, req, parse_netconf(req.config)


def _synced_status(state: SavedState, fresh: Collection[tuple[str, str]] = ()) -> str | None:
    """The network-status of `state` after a change: the entries the sandbox had (as
    last recorded) of attachments it still has, in order, then one per element
    attachment it has without an entry (hot-plugged; MTU read from the netns).
    `fresh`: (network, interface) of attachments added by this change: an entry
    recorded under the same key is an earlier attachment's (removed, then added again
    before the status was sent) and is made anew. None when nothing was recorded (the
    ADD could not record it: there is nothing to edit)."""
    assert state.hotplug is not None
    if not state.hotplug.network_status:
        return None
    try:
        entries = json.loads(state.hotplug.network_status)
    except ValueError:
        return None
    present = [a for a in state.attachments
               if a.attempted and a.result is not None and not a.change and not a.add_failed]
    keys = {(a.network, a.ifname) for a in present}
    kept: list[dict[str, Any] | status.NetworkStatusEntry] = [
        e for e in entries if isinstance(e, dict)
        and (e.get("name"), e.get("interface")) in keys - set(fresh)]
    have = {(e.get("name"), e.get("interface")) for e in kept}
    new = [a for a in present if a.selection is not None and (a.network, a.ifname) not in have]
    mtus = netnsinfo.link_mtus(state.netns, [a.ifname for a in new]) if new else {}
    kept += [status.status_entry(a.network, a.result, ifname=a.ifname, default=False,
                                 mtu=mtus.get(a.ifname)) for a in new]
    return status.encode_status(kept)


class Hotplugger:
    """The daemon's hot-plug worker (module doc).

    pods: the cache of this node's pods (its listener feeds `pod_changed`); cni_dir:
    the daemon's --cni-dir, scanned at start; make_api: (environ, conf) -> the API seam
    of one operation on a container (Daemon._api: cached reads, queued writes);
    drop_writes: the orchestrator's (Publisher.cancel); interval: seconds between two
    changes of one pod; clock: monotonic seconds (injectable: the rate limit and the
    backoff read it); executor: runs the children (the daemon's:
    invoke.ChrootExecutor with --chroot-dir); backoff: the failed steps' backoff
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

    def _deferred(self, container_id: str, key: tuple[str, ...]) -> bool:
        """True when the step `key` of the container is in backoff (skipped now, counted
        "deferred"); the pod is then looked at again when the backoff ends."""
        with self.lock:
            if not self.backoff.waiting(key, self.clock()):
                return False
            self.changes["deferred"] += 1
            self._retry_at(container_id, key)
        log.debug("hot-plug: container %s: %s not tried before its backoff ends", container_id,
                  " ".join(key[1:]))
        return True

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
        """Bring the sandbox `container_id` in line with its pod's selection now (module
        doc), under the container's lock (and `exclusive`). A child's failure is
        logged and reported as an event; a state that cannot be read or written raises
        StateError (the worker logs it)."""
        with self.exclusive, store.lock(container_id):
            state = store.load(container_id)
            if state is None:
                self.untrack(container_id)  # DELed (GC's, or before it was tracked)
                return
            if (state.hotplug is None or not state.hotplug.network_status or state.pod is None
                    or state.del_pending is not None or is_missing_netns(state.netns)):
                # not a sandbox whose ADD completed (network_status is recorded last), or
                # one whose DEL began (it drops the context first)
                return
            ref = state.pod
            obj = self.pods.get(ref.namespace, ref.name)
            meta = (obj or {}).get("metadata") or {}
            if obj is None or (ref.uid and meta.get("uid") != ref.uid) \
                    or meta.get("deletionTimestamp"):
                log.debug("pod %s: not hot-plugged: not in the cache with UID %s (a static "
                          "pod's mirror has another), or being deleted", ref, ref.uid)
                return  # the pod is gone, re-created or being deleted: its DEL comes
            log.debug("hot-plug: pod %s (resourceVersion %s): looking at container %s", ref,
                      meta.get("resourceVersion"), container_id)
            environ, req, conf = _request(state)
            api = self.make_api(environ, conf)
            orch = Orchestrator(api=lambda _conf: api, executor=self.executor,
                                drop_writes=self.drop_writes)
            pod_doc = {"namespace": ref.namespace, "name": ref.name, "uid": ref.uid}

            def event(type_: str, reason: str, message: str) -> None:
                api.create_event(pod_doc, type_, reason, message)

            self._finish_interrupted(orch, req, conf, store, state)
            annotations = _annotations(obj)
            fresh: set[tuple[str, str]] = set()
            if str(annotations.get(OPT_OUT_ANNOTATION, "")).strip().lower() == "false":
                log.debug("pod %s: %s is \"false\": not hot-plugged", ref, OPT_OUT_ANNOTATION)
            else:
                fresh = self._apply(orch, req, conf, store, state, api, annotations, event)
            self._publish(store, state, api, meta.get("uid") or ref.uid, fresh, event)

    def _finish_interrupted(self, orch: Orchestrator, req: CniRequest, conf: NetConf,
                            store: StateStore, state: SavedState) -> None:
        """Undo each step a killed daemon left recorded (an ADD or a DEL begun): DEL it and
        drop it from the state."""
        for att in [a for a in state.attachments if a.change]:
            key = (state.container_id, "undo", att.network, att.ifname)
            if self._deferred(state.container_id, key):
                continue
            log.info("pod %s: hot-plug %s of %s (%s) was interrupted: undoing it", state.pod,
                     att.change, att.network, att.ifname)
            self._outcome(state.container_id, key,
                          self._delete(orch, req, conf, store, state, att, keep_mark=True))

    def _delete(self, orch: Orchestrator, req: CniRequest, conf: NetConf, store: StateStore,
                state: SavedState, att: SavedAttachment, keep_mark: bool = False) -> bool:
        """DEL one attachment and drop it from the state (saved). False when its DEL
        failed: it stays for the runtime's DEL, without its change mark (a removal
        refused by its child: the attachment is as it was), or with it (`keep_mark`: an
        interrupted step, undone again at the next look)."""
        errors = delete_attachments(orch, req, conf, state.with_attachments([att]))
        if errors:
            if not keep_mark:
                att.change = None
            store.save(state)
            log.error("pod %s: hot-plug DEL of %s failed: %s", state.pod, att.network,
                      "; ".join(errors))
            return False
        state.attachments.remove(att)
        store.save(state)
        return True

    def _apply(self, orch: Orchestrator, req: CniRequest, conf: NetConf, store: StateStore,
               state: SavedState, api: PodApi, annotations: dict[str, Any],
               event: Callable[[str, str, str], None]) -> set[tuple[str, str]]:
        """The change itself (module doc). Returns (network, interface) of each
        attachment it added."""
        assert state.hotplug is not None and state.pod is not None
        pod = state.pod
        refused: list[str] = []
        default_now = str(annotations.get(DEFAULT_NETWORK_ANNOTATION, "")).strip()
        if default_now != state.hotplug.default_network:
            refused.append(f"{DEFAULT_NETWORK_ANNOTATION} changed (from "
                           f"{state.hotplug.default_network or 'none'!r} to "
                           f"{default_now or 'none'!r}): the cluster default network of a "
                           "running pod is not changed")
        try:
            # the caps (networks.check_caps) count the sandbox's claim networks too
            elements, _ = networks.selected_elements(
                conf, pod, annotations, claims=sum(1 for a in state.attachments if a.claim))
        except CniError as e:
            self._refuse(state.container_id, refused + [e.msg], pod, event)
            return set()
        saved = [a for a in state.attachments if a.selection is not None and not a.change]
        change = hotplug.diff([_identity(a) for a in saved], elements,
                              [a.ifname for a in state.attachments if a.selection is None])
        refused += change.refused
        for index in change.remove:
            att = saved[index]
            if "default_route" in _identity(att).params:
                refused.append(f"network {att.network} (interface {att.ifname}): its element "
                               "chose the pod's default route (default-route), which "
                               "removing it would leave without one; it is not removed")
                continue
            key = (state.container_id, "remove", att.network, att.ifname)
            if self._deferred(state.container_id, key):
                continue
            att.change = "remove"
            store.save(state)  # recorded before the child runs
            removed = self._delete(orch, req, conf, store, state, att)
            self._outcome(state.container_id, key, removed)
            if removed:
                self._count("removed")
                event("Normal", "RemovedInterface", f"Remove {att.ifname} from {att.network}")
            else:
                self._count("failed")
                event("Warning", "ErrorRemovingNetwork",
                      f"network {att.network} (interface {att.ifname}) could not be removed; "
                      "it stays until the pod's sandbox is deleted")
        fresh = set()
        for element, ifname in change.add:
            holder = next((a for a in state.attachments if a.ifname == ifname), None)
            if holder is not None:  # a removal above failed: the name is still in use
                refused.append(f"network {element.ref}: interface {ifname} is still held by "
                               f"{holder.network}, whose removal failed")
            elif element.default_route is not None:
                refused.append(f"network {element.ref}: default-route is chosen when the pod "
                               "is created; add the element without it")
            else:
                add_key: tuple[str, ...] = (state.container_id, "add", element.ref)
                if self._deferred(state.container_id, add_key):
                    continue
                outcome = self._add(orch, req, conf, store, state, api, element, ifname, event,
                                    refused)
                if outcome != "refused":
                    self._outcome(state.container_id, add_key, outcome == "added")
                if outcome == "added":
                    fresh.add((element.ref, ifname))
        self._refuse(state.container_id, refused, pod, event)
        return fresh

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

    def _add(self, orch: Orchestrator, req: CniRequest, conf: NetConf, store: StateStore,
             state: SavedState, api: PodApi, element: Any, ifname: str,
             event: Callable[[str, str, str], None], refused: list[str]) -> str:
        """ADD one element's attachment as `ifname`, recorded first; a failure DELs it. A
        refusal is appended to `refused`. Returns "added", "failed" (its NAD or config
        could not be resolved, or its child failed: a Warning event says why) or
        "refused"."""
        pod = state.pod
        try:
            nad, config = networks.resolve_element(conf, pod, api, element)
            if element.device_id is not None:
                # checked against the kubelet's allocation when the sandbox is created
                # (networks._assign_devices), never here: refused, not run unchecked
                refused.append(f"network {element.ref}: {NETWORKS_ANNOTATION}: deviceID "
                               f"{element.device_id!r} is honoured at pod creation only, "
                               "where it is checked against the devices the kubelet "
                               "allocated to the pod")
                return "refused"
            if nad is not None and nad_resource_name(nad):
                refused.append(f"network {element.ref}: its NetworkAttachmentDefinition asks "
                               f"for device resource {nad_resource_name(nad)}, which the "
                               "kubelet allocates at pod creation only")
                return "refused"
            att = planning.element_attachment(element, config, ifname)
            policy.check_delegate(att.config, conf, policy.from_tenant(att.config),
                                  orch.executor, (conf.bin_dir, *req.path))
        except CniError as e:
            self._count("failed")
            event("Warning", "ErrorAddingNetwork", f"hot-plug of {element.ref}: {e.msg}")
            return "failed"
        saved = SavedAttachment(network=att.network, ifname=ifname, config=att.config.raw,
                                source=att.config.source, capability_args=att.capability_args,
                                attempted=True, selection=networks.saved_selection(att),
                                change="add")
        state.attachments.append(saved)
        store.save(state)  # recorded before the child runs
        try:
            result = chain.add(att.config, orch.runtime_conf(req, conf, ifname,
                                                             att.capability_args), None)
        except CniError as e:
            log.error("pod %s: hot-plug ADD of %s (%s) failed: %s", pod, att.network, ifname, e)
            saved.mark_add_failed(e)
            self._delete(orch, req, conf, store, state, saved)
            self._count("failed")
            event("Warning", "ErrorAddingNetwork",
                  f"hot-plug of {att.network} (interface {ifname}) failed: {e.msg}")
            return "failed"
        saved.result, saved.change = result, None
        store.save(state)
        self._count("added")
        log.info("pod %s: hot-plug attached network %s as %s", pod, att.network, ifname)
        return "added"

    def _publish(self, store: StateStore, state: SavedState, api: PodApi, uid: str,
                 fresh: set[tuple[str, str]], event: Callable[[str, str, str], None]) -> None:
        """network-status in line with the state (recorded pending, then queued), PATCHed
        onto the pod of UID `uid` only, and an AddedInterface event per interface it
        gained (`fresh`: (network, interface) added now, whose recorded entry, if any,
        is an earlier attachment's)."""
        assert state.hotplug is not None and state.pod is not None
        text = _synced_status(state, fresh)
        if text is None or text == state.hotplug.network_status:
            return
        before = {(e.get("name"), e.get("interface"))
                  for e in json.loads(state.hotplug.network_status)}
        annotations = {status.NETWORK_STATUS_ANNOTATION: text}
        state.hotplug.network_status = text
        state.status_pending = PendingStatus(uid, annotations)
        store.save(state, durable=False)
        api.patch_pod_annotations(state.pod.namespace, state.pod.name, annotations, uid)
        for entry in json.loads(text):
            key = (entry.get("name"), entry.get("interface"))
            if key not in before or key in fresh:
                event("Normal", "AddedInterface", status.added_interface_message(
                    entry.get("interface"), entry, entry.get("name")))
