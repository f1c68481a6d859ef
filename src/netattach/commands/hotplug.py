"""Hot-plug's command (issues 13 and 22): apply one change of a running pod's selection
to one sandbox, finishing first a change a killed daemon left half-done.

The node daemon's worker (daemon/hotplug.py) decides when a sandbox is looked at
(the pod watch, its queue, the rate limit, the backoff of failed steps) and calls
`cmd_hotplug`; this module does the change and returns what happened (`Outcome`): it
never calls back into the daemon, which then records the steps' backoff, the metrics
and the Events. The change goes through the orchestrator's seams as ADD and DEL do
(the API seam of the sandbox's ADD, the executor, the state store), with their
one-attachment steps (add.attach_one, delete.delete_attachment), so its recovery is
table-tested with fakes (tests/unit/test_commands_hotplug.py).

Which sandboxes: those whose ADD the daemon served with `hotplug` true in netattach's
configuration; that ADD saved what a later change needs (state.HotplugContext: the
configuration, CNI_PATH, the pod's default-network annotation, the network-status;
and each element's identity, SavedAttachment.selection). A pod opts out with the
annotation `netattach.io/hotplug: "false"` (OPT_OUT_ANNOTATION).

What (`cmd_hotplug`, under the container's lock, spec §7.3, so it never races the
runtime's calls): `hotplug.diff` of the saved attachments and the elements selected now
gives what to remove, add and refuse. Removed attachments are DELed in reverse order,
then new ones ADDed in the pod's netns with the same delegate resolution, name
injection, runtimeConfig and capability checks as ADD (networks.resolve_element,
plan.element_attachment). Each step is recorded in the state before its child runs
(SavedAttachment.change, fsync'ed): a daemon killed mid-change leaves a state the
runtime's DEL fully cleans (the attachment is in it, attempted), and the next look
undoes the interrupted step (its DEL; one whose DEL fails keeps its mark and is undone
again at the next look), then applies the annotation anew. A child that fails rolls
back that attachment only (its DEL; when that DEL fails too, the attachment stays,
without its mark, for the runtime's DEL), and a Warning event names the network and
the child's message. Refused, with a Warning event: a changed
`v1.multus-cni.io/default-network` (the cluster default network is the runtime's
interface), an element whose parameters changed in place, an interface name already in
use, a NAD with a device resource (devices are given at pod creation), an element
naming a `deviceID` (it is checked against the kubelet's allocation at pod creation
only), the removal of an element that chose the default route.
Afterwards the network-status is brought in line with the state (`synced_status`),
recorded pending and PATCHed through the API seam (the daemon's queue), as an ADD's,
and each interface it gained gets an `AddedInterface` event.

The log lines are the node daemon's logger's ("netattach.daemon"), as they were when
this code lived in the daemon: operators and tests read them under that name.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from ..cni.errors import CniError
from ..cni.request import CniRequest, parse_request
from ..kube.api import PodApi
from ..node import netnsinfo
from ..node.devices import nad_resource_name
from ..node.logsetup import log_context
from ..node.state import PendingStatus, SavedAttachment, SavedState
from ..node.statestore import StateStore, is_missing_netns
from ..spec import hotplug, policy, status
from ..spec import plan as planning
from ..spec.netconf import NetConf, parse_netconf
from ..spec.pod import PodRef
from ..spec.selection import (
    DEFAULT_NETWORK_ANNOTATION,
    NETWORKS_ANNOTATION,
    NetworkSelectionElement,
)
from . import networks
from .add import attach_one
from .delete import delete_attachment
from .orchestrator import Orchestrator

log = logging.getLogger("netattach.daemon")

OPT_OUT_ANNOTATION = "netattach.io/hotplug"
"""A pod with this annotation "false" is never changed by hot-plug."""

StepKey = tuple[str, ...]
"""What a step's backoff is keyed by, with the container (Step.key)."""
Event = tuple[str, str, str]
"""An Event for the pod: (type, reason, message)."""


@dataclass(frozen=True)
class Step:
    """One step a change ran: `kind` "undo" (an interrupted change of the attachment,
    DELed), "remove" or "add"; `network`: the attachment's network-status name (an
    add's: its element's NAD reference, `ns/name`); `ifname`; `ok`: it succeeded (a
    failed add was rolled back when `ok` is False)."""
    kind: str
    network: str
    ifname: str
    ok: bool

    @property
    def key(self) -> StepKey:
        """Its backoff's key (the daemon adds the container ID in front): an add by its
        element's NAD, so renaming the interface does not start it anew; an undo and a
        removal by the attachment's NAD and interface."""
        if self.kind == "add":
            return ("add", self.network)
        return (self.kind, self.network, self.ifname)


@dataclass
class Outcome:
    """What one `cmd_hotplug` did, for the daemon's worker to act on.

    gone: the sandbox has no state (DELed: the runtime's or GC's): forget it.
    pod: the pod the sandbox was looked at for; None when it was not (gone, not a
      sandbox whose ADD completed, its DEL began, its netns is gone, the pod is not in
      the cache with its UID or is being deleted): nothing else is set then.
    steps: the steps run, in order (their backoff: a success forgets it, a failure
      grows it).
    deferred: the keys of the steps skipped because they were in `waiting` (their
      backoff runs).
    refused: every refusal standing now, one message each; None when the selection
      was not looked at (the pod opted out, or not looked at all): the refusals last
      reported stand as they were.
    events: the steps' Events in order (RemovedInterface, ErrorRemovingNetwork,
      ErrorAddingNetwork); refusals are in `refused`.
    status_events: an AddedInterface Event per interface the network-status gained
      (after the refusals' Events).
    error: what stopped the command (a state that cannot be read or written:
      StateError; a saved context that does not parse: CniError; a bug), after
      `steps`; None when it ran to its end.
    """
    gone: bool = False
    pod: PodRef | None = None
    steps: list[Step] = field(default_factory=list)
    deferred: list[StepKey] = field(default_factory=list)
    refused: list[str] | None = None
    events: list[Event] = field(default_factory=list)
    status_events: list[Event] = field(default_factory=list)
    error: Exception | None = None

    @property
    def added(self) -> list[tuple[str, str]]:
        """(network, interface) of each attachment added."""
        return [(s.network, s.ifname) for s in self.steps if s.kind == "add" and s.ok]

    @property
    def removed(self) -> list[tuple[str, str]]:
        """(network, interface) of each attachment removed (undone steps not counted)."""
        return [(s.network, s.ifname) for s in self.steps if s.kind == "remove" and s.ok]

    @property
    def failed(self) -> list[tuple[str, str]]:
        """(network, interface) of each removal or addition that failed (an undo that
        failed is retried, not counted)."""
        return [(s.network, s.ifname) for s in self.steps
                if s.kind in ("remove", "add") and not s.ok]

    @property
    def retry(self) -> bool:
        """Whether a step failed or was deferred: the sandbox is to be looked at again
        when its backoff ends, edits or not."""
        return bool(self.deferred) or any(not s.ok for s in self.steps)


def cmd_hotplug(orchestrator: Callable[[dict[str, str]], Orchestrator], store: StateStore,
                container_id: str, pods: Callable[[str, str], dict[str, Any] | None],
                waiting: Collection[StepKey] = ()) -> Outcome:
    """Bring the sandbox `container_id` of `store` in line with its pod's selection now
    (module doc), under the container's lock.

    orchestrator: the seams of one operation on the sandbox, given the CNI variables of
      its ADD as rebuilt from the saved context (environ: CNI_COMMAND ADD,
      CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME, CNI_ARGS, CNI_PATH), as the daemon builds
      one per CNI call; its `api(conf)` is asked for the NADs, and takes the
      network-status PATCH; its executor runs the children.
    pods: (namespace, name) -> the pod as the daemon's watch cache has it now, or None;
      read once the lock is held, so edits made while a runtime call held it are
      applied together.
    waiting: the keys (Step.key) of steps in backoff: skipped, listed in
      Outcome.deferred.
    Returns the Outcome. Never raises an Exception: one that stops the command is
    Outcome.error, after the steps it ran (the state saved as each step left it). The
    rule's source: multi-net spec §7.3 (one operation per container at a time), §7.2
    (undo in reverse); issue 13 (what a change may do), issue 22 (its shape).
    """
    outcome = Outcome()
    try:
        with store.lock(container_id):
            state = store.load(container_id)
            if state is None:
                outcome.gone = True
                return outcome
            _Change.begin(orchestrator, store, state, pods, frozenset(waiting), outcome)
    except Exception as e:
        outcome.error = e
    return outcome


def _identity(att: SavedAttachment) -> hotplug.Attached:
    """What hotplug.diff knows of a saved element attachment."""
    assert att.selection is not None
    return hotplug.Attached(att.network, att.ifname, att.selection["requested"],
                            att.selection["params"])


def saved_request(state: SavedState) -> tuple[dict[str, str], CniRequest, NetConf]:
    """The runtime's ADD of `state`'s sandbox as it was (state.HotplugContext): (its CNI
    variables, the request and configuration parsed from them and the saved stdin as
    the ADD parsed them). Raises CniError when they no longer parse."""
    assert state.hotplug is not None
    environ = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": state.container_id,
               "CNI_NETNS": state.netns, "CNI_IFNAME": state.ifname,
               "CNI_ARGS": ";".join(f"{k}={v}" for k, v in state.cni_args),
               "CNI_PATH": state.hotplug.cni_path}
    req = parse_request(environ, json.dumps(state.hotplug.netconf).encode())
    assert req.config is not None
    return environ, req, parse_netconf(req.config)


def synced_status(state: SavedState, fresh: Collection[tuple[str, str]] = (),
                  cidr: bool = False) -> str | None:
    """The network-status of `state` after a change: the entries the sandbox had (as
    last recorded) of attachments it still has, in order, then one per element
    attachment it has without an entry (hot-plugged; MTU read from the netns).
    `fresh`: (network, interface) of attachments added by this change: an entry
    recorded under the same key is an earlier attachment's (removed, then added again
    before the status was sent) and is made anew. `cidr`: new entries' `ips` in CIDR
    form (status.status_entry; the sandbox's configuration's networkStatusIPFormat, the
    ADD's: recorded entries are kept as they are). None when nothing was recorded (the
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
    keep = {(a.network, a.ifname) for a in present} - set(fresh)
    kept: list[dict[str, Any] | status.NetworkStatusEntry] = [
        e for e in entries if isinstance(e, dict) and (e.get("name"), e.get("interface")) in keep]
    have = {(e.get("name"), e.get("interface")) for e in kept}
    new = [a for a in present if a.selection is not None and (a.network, a.ifname) not in have]
    mtus = netnsinfo.link_mtus(state.netns, [a.ifname for a in new]) if new else {}
    kept += [status.status_entry(a.network, a.result, ifname=a.ifname, default=False,
                                 mtu=mtus.get(a.ifname), cidr=cidr) for a in new]
    return status.encode_status(kept)


@dataclass
class _Change:
    """One change of one sandbox, its lock held: the state, the seams and what happened."""
    orch: Orchestrator
    req: CniRequest
    conf: NetConf
    api: PodApi
    store: StateStore
    state: SavedState
    pod: PodRef
    waiting: frozenset[StepKey]
    outcome: Outcome

    @classmethod
    def begin(cls, orchestrator: Callable[[dict[str, str]], Orchestrator], store: StateStore,
              state: SavedState, pods: Callable[[str, str], dict[str, Any] | None],
              waiting: frozenset[StepKey], outcome: Outcome) -> None:
        """cmd_hotplug on a loaded state: skip a sandbox not to change now, else finish
        an interrupted step, apply the selection, publish the network-status."""
        if (state.hotplug is None or not state.hotplug.network_status or state.pod is None
                or state.del_pending is not None or is_missing_netns(state.netns)):
            # not a sandbox whose ADD completed (network_status is recorded last), or
            # one whose DEL began (it drops the context first)
            return
        with log_context(pod=f"{state.pod.namespace}/{state.pod.name}",
                         sandbox=state.container_id):
            cls._begin(orchestrator, store, state, pods, waiting, outcome)

    @classmethod
    def _begin(cls, orchestrator: Callable[[dict[str, str]], Orchestrator], store: StateStore,
               state: SavedState, pods: Callable[[str, str], dict[str, Any] | None],
               waiting: frozenset[StepKey], outcome: Outcome) -> None:
        """begin's work, in the sandbox's log_context."""
        ref = state.pod
        assert ref is not None  # begin returned on None
        obj = pods(ref.namespace, ref.name)
        meta = (obj or {}).get("metadata") or {}
        if obj is None or (ref.uid and meta.get("uid") != ref.uid) \
                or meta.get("deletionTimestamp"):
            log.debug("pod %s: not hot-plugged: not in the cache with UID %s (a static "
                      "pod's mirror has another), or being deleted", ref, ref.uid)
            return  # the pod is gone, re-created or being deleted: its DEL comes
        log.debug("hot-plug: pod %s (resourceVersion %s): looking at container %s", ref,
                  meta.get("resourceVersion"), state.container_id)
        environ, req, conf = saved_request(state)
        orch = orchestrator(environ)
        outcome.pod = ref
        change = cls(orch, req, conf, orch.api(conf), store, state, ref, waiting, outcome)
        change.finish_interrupted()
        annotations = ((obj or {}).get("metadata") or {}).get("annotations") or {}
        fresh: set[tuple[str, str]] = set()
        if str(annotations.get(OPT_OUT_ANNOTATION, "")).strip().lower() == "false":
            log.debug("pod %s: %s is \"false\": not hot-plugged", ref, OPT_OUT_ANNOTATION)
        else:
            fresh = change.apply(annotations)
        change.publish(meta.get("uid") or ref.uid, fresh)

    def _deferred(self, key: StepKey) -> bool:
        """True when the step `key` is in backoff: skipped now (Outcome.deferred)."""
        if key not in self.waiting:
            return False
        self.outcome.deferred.append(key)
        return True

    def _event(self, type_: str, reason: str, message: str) -> None:
        self.outcome.events.append((type_, reason, message))

    def finish_interrupted(self) -> None:
        """Undo each step a killed daemon left recorded (an ADD or a DEL begun): DEL it and
        drop it from the state; one whose DEL fails keeps its mark (undone again at the
        next look)."""
        for att in [a for a in self.state.attachments if a.change]:
            if self._deferred(("undo", att.network, att.ifname)):
                continue
            log.info("pod %s: hot-plug %s of %s (%s) was interrupted: undoing it", self.pod,
                     att.change, att.network, att.ifname)
            ok = self.delete(att, keep_mark=True)
            self.outcome.steps.append(Step("undo", att.network, att.ifname, ok))

    def delete(self, att: SavedAttachment, keep_mark: bool = False) -> bool:
        """DEL one attachment (delete.delete_attachment) and drop it from the state
        (saved). False when its DEL failed: it stays for the runtime's DEL, without its
        change mark (a removal refused by its child: the attachment is as it was), or
        with it (`keep_mark`: an interrupted step or a failed ADD's undo, undone again
        at the next look)."""
        error = delete_attachment(self.orch, self.req, self.conf, att) if att.attempted \
            else None
        if error is not None:
            if not keep_mark:
                att.change = None
            self.store.save(self.state)
            log.error("pod %s: hot-plug DEL of %s failed: %s", self.pod, att.network, error)
            return False
        self.state.attachments.remove(att)
        self.store.save(self.state)
        return True

    def apply(self, annotations: dict[str, Any]) -> set[tuple[str, str]]:
        """The change itself (module doc); sets Outcome.refused. Returns (network,
        interface) of each attachment it added."""
        state, pod = self.state, self.pod
        assert state.hotplug is not None
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
                self.conf, pod, annotations, claims=sum(1 for a in state.attachments if a.claim))
        except CniError as e:
            self.outcome.refused = refused + [e.msg]
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
            if self._deferred(("remove", att.network, att.ifname)):
                continue
            att.change = "remove"
            self.store.save(state)  # recorded before the child runs
            removed = self.delete(att)
            self.outcome.steps.append(Step("remove", att.network, att.ifname, removed))
            if removed:
                self._event("Normal", "RemovedInterface", f"Remove {att.ifname} from {att.network}")
            else:
                self._event("Warning", "ErrorRemovingNetwork",
                            f"network {att.network} (interface {att.ifname}) could not be "
                            "removed; it stays until the pod's sandbox is deleted")
        fresh = set()
        for element, ifname in change.add:
            holder = next((a for a in state.attachments if a.ifname == ifname), None)
            if holder is not None:  # a removal above failed: the name is still in use
                refused.append(f"network {element.ref}: interface {ifname} is still held by "
                               f"{holder.network}, whose removal failed")
            elif element.default_route is not None:
                refused.append(f"network {element.ref}: default-route is chosen when the pod "
                               "is created; add the element without it")
            elif not self._deferred(("add", element.ref)) \
                    and self.add(element, ifname, refused):
                fresh.add((element.ref, ifname))
        self.outcome.refused = refused
        return fresh

    def add(self, element: NetworkSelectionElement, ifname: str, refused: list[str]) -> bool:
        """ADD one element's attachment as `ifname` (add.attach_one, its mark being the
        whole state saved with change "add"); a failure DELs it. A refusal is appended to
        `refused` (no step). True when it was added; a failure (its NAD or config could
        not be resolved, or its child failed) is a failed step and a Warning event."""
        state, pod, conf = self.state, self.pod, self.conf
        try:
            nad, config = networks.resolve_element(conf, pod, self.api, element)
            if element.device_id is not None:
                # checked against the kubelet's allocation when the sandbox is created
                # (networks._assign_devices), never here: refused, not run unchecked
                refused.append(f"network {element.ref}: {NETWORKS_ANNOTATION}: deviceID "
                               f"{element.device_id!r} is honoured at pod creation only, "
                               "where it is checked against the devices the kubelet "
                               "allocated to the pod")
                return False
            resource = nad_resource_name(nad) if nad is not None else None
            if resource:
                refused.append(f"network {element.ref}: its NetworkAttachmentDefinition asks "
                               f"for device resource {resource}, which the "
                               "kubelet allocates at pod creation only")
                return False
            att = planning.element_attachment(element, config, ifname)
            policy.check_delegate(att.config, conf, policy.from_tenant(att.config),
                                  self.orch.executor, (conf.bin_dir, *self.req.path))
        except CniError as e:
            self.outcome.steps.append(Step("add", element.ref, ifname, False))
            self._event("Warning", "ErrorAddingNetwork", f"hot-plug of {element.ref}: {e.msg}")
            return False
        saved = networks.saved_attachment(att, attempted=True, identity=True)
        saved.change = "add"
        state.attachments.append(saved)
        with log_context(network=att.network):
            try:
                result = attach_one(self.orch, self.req, conf, att, saved,
                                    lambda: self.store.save(state))  # recorded before the child
            except CniError as e:
                log.error("pod %s: hot-plug ADD of %s (%s) failed: %s", pod, att.network, ifname,
                          e)
                # an undo that fails keeps the "add" mark: the next look undoes it again, as
                # an interrupted ADD, rather than taking the half-made attachment for one made
                self.delete(saved, keep_mark=True)
                self.outcome.steps.append(Step("add", element.ref, ifname, False))
                self._event("Warning", "ErrorAddingNetwork",
                            f"hot-plug of {att.network} (interface {ifname}) failed: {e.msg}")
                return False
            saved.result, saved.change = result, None
            self.store.save(state)
            self.outcome.steps.append(Step("add", element.ref, ifname, True))
            log.info("pod %s: hot-plug attached network %s as %s", pod, att.network, ifname)
        return True

    def publish(self, uid: str, fresh: set[tuple[str, str]]) -> None:
        """network-status in line with the state (recorded pending, then PATCHed through
        the API seam: the daemon's queue) onto the pod of UID `uid` only, and an
        AddedInterface event per interface it gained (`fresh`: (network, interface)
        added now, whose recorded entry, if any, is an earlier attachment's)."""
        state = self.state
        assert state.hotplug is not None
        text = synced_status(state, fresh, cidr=self.conf.network_status_cidr)
        if text is None or text == state.hotplug.network_status:
            return
        before = {(e.get("name"), e.get("interface"))
                  for e in json.loads(state.hotplug.network_status)}
        annotations = {status.NETWORK_STATUS_ANNOTATION: text}
        state.hotplug.network_status = text
        state.status_pending = PendingStatus(uid, annotations)
        self.store.save(state, durable=False)
        self.api.patch_pod_annotations(self.pod.namespace, self.pod.name, annotations, uid)
        for entry in json.loads(text):
            key = (entry.get("name"), entry.get("interface"))
            if key not in before or key in fresh:
                self.outcome.status_events.append(("Normal", "AddedInterface",
                                                   status.added_interface_message(
                                                       entry.get("interface"), entry,
                                                       entry.get("name"))))
