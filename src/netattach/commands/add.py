"""ADD: attach the cluster default network, then every selected network (spec §6, §7).

The order of what is saved is the contract DEL relies on:
1. a marker (a SavedState without attachments) before the first API request, so that
   a runtime DEL of a container whose ADD failed or died before attaching anything
   succeeds at once, without the API server;
2. the whole plan (every delegate's raw config, ifnames, runtimeConfig, devices)
   before any child runs (`StateStore.save_plan`);
3. each attachment marked attempted before its child runs, its result after: in the
   same append as the next attachment's mark (one write per network, not two), the
   last one's in the final save. Marks and results are records appended to the saved
   plan, not rewrites of the whole state (state.py, "Progress"), so an ADD writes
   O(n) bytes for n attachments, not O(n^2) (issue 21). A crash between a child and
   that append leaves the attachment attempted without its result, which DEL undoes
   like a crash during the child;
4. when the API seam sends its writes after the answer (the node daemon), the
   network-status to publish, before the answer (`_record_status`).
Saves 1 to 3 survive the process (a runtime's timeout kill, a daemon restart), not a
power loss: only the final save, with every result, is fsync'ed (`StateStore.save`'s
`durable`), so an ADD costs two fsyncs, not two per network. After a power loss the
sandbox's netns and interfaces are gone, the children's own stores (host-local's
files) are not fsync'ed either, and DEL works from an older state or rebuilds the plan
from the API (delete.py).
Any failure from the first child on rolls back every attempted attachment in reverse
(spec §7.2), every plugin of each one's conflist in reverse past failures (chain.delete).
A rollback (or an ADD that attached nothing) that leaves nothing behind removes the
state and writes the container's tombstone, so the runtime's cleanup DEL is quiet and
needs no API request; one that leaves something keeps the state, so that DEL retries
it and fails loudly while it fails.

Abandoned (issue 21, "Bounded work per pod"): when the caller stops waiting for the
answer (Orchestrator.abandoned: the node daemon's shim closed its connection, because
the runtime gave up or was killed, or the shim's own answer timeout passed), the ADD
stops at its next step: before its plan is made (its marker saved, so a tombstone
replaces it), before each attachment and after the last one; never while a child runs,
nor while it waits for the readiness indicator file (bounded by `readinessTimeout`,
and the same for every pod of the node). It then fails as a failed ADD does
(Abandoned, code 11, the Warning event): every attempted attachment is rolled back by
the rules above. A runtime that gave up DELs the sandbox anyway; without this, an ADD
nobody waits for would go on holding one of the daemon's workers through every network
its pod selected.
"""
from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from functools import partial

from ..cni import chain, invoke
from ..cni.errors import CniError, InvalidEnv, TryAgain
from ..cni.request import CniRequest
from ..cni.result import convert_result
from ..kube.api import PodApi, pod_ref, where, writes_after_answer
from ..kube.client import KubeError
from ..node import devices, netnsinfo
from ..node.logsetup import log_context
from ..node.state import (
    CorruptState,
    HotplugContext,
    PendingStatus,
    SavedAttachment,
    SavedState,
    StateError,
)
from ..node.statestore import StateStore
from ..spec import status
from ..spec.netconf import NetConf
from ..spec.pod import PodRef
from .delete import delete_attachments
from .networks import InvalidSelection, Plan, build_plan, empty_result

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)
if TYPE_CHECKING:
    from typing import Any

    from ..spec.claims import ClaimRef
    from ..spec.plan import Attachment
    from .orchestrator import Orchestrator

log = logging.getLogger("netattach")


def cmd_add(orch: Orchestrator, req: CniRequest, conf: NetConf) -> dict[str, Any]:
    """ADD: attach the cluster default network, then every selected network.

    Returns the cluster default network's result converted to the configuration's
    cniVersion (multi-net spec §6, CNI SPEC.md "ADD"). Raises CniError naming the
    pod, the network and the cause; every attempted attachment was DEL-ed then
    (§7.2; what that left allocated is in the error's details, and in the state for
    the runtime's DEL), and a Warning event was recorded on the pod when the API answers.
    """
    pod = pod_ref(req)
    api = orch.api(conf) if pod else None
    store = orch.store(conf)
    try:
        wait_ready(conf, orch.executor)
        with store.lock(req.container_id):
            return _add_locked(orch, req, conf, pod, api, store)
    except InvalidSelection as e:
        _event(api, pod, "Warning", "InvalidNetworkSelection", e.msg)
        raise
    except StateError as e:
        error: CniError = e.within(where(pod))
    except CniError as e:
        error = e
    error = _redacted(error)
    _event(api, pod, "Warning", "ErrorAddingNetwork", error.msg)
    raise error


def _redacted(error: CniError) -> CniError:
    """`error` without the ConfigMap values a claim's arguments read (claims.redact),
    when claims.py ran in this process (imported only for a pod with claims)."""
    claims = sys.modules.get("netattach.spec.claims")
    if claims is None:
        return error
    msg, details = claims.redact(error.msg), claims.redact(error.details)
    return error if (msg, details) == (error.msg, error.details) \
        else error.reworded(msg, details)


def wait_ready(conf: NetConf, executor: invoke.Executor | None = None) -> None:
    """Block until `readinessindicatorfile` exists, at most `readinessTimeout` seconds
    (multi-net spec §6.1.2: operations wait for the cluster default network). The file
    is a host path: with `executor` the thick daemon's chroot executor it is looked up
    in the host's root, where the children run (invoke.host_path).
    Raises TryAgain (11) naming the file."""
    path = conf.readiness_indicator_file
    if not path:
        return

    def there() -> bool:
        return os.path.exists(invoke.host_path(executor, path) if executor else path)

    if there():
        return
    deadline = time.monotonic() + conf.readiness_timeout
    log.info("waiting up to %.0f s for readiness indicator file %s", conf.readiness_timeout, path)
    while time.monotonic() < deadline:
        time.sleep(0.25)
        if there():
            return
    raise TryAgain(f"cluster default network not ready: readiness indicator file {path} did "
                   f"not appear within {conf.readiness_timeout:.0f} s")


class Abandoned(TryAgain):
    """The ADD's caller stopped waiting for its answer (Orchestrator.abandoned; module
    doc, "Abandoned"): code 11, as the runtime gave up and will try again."""


def _check_abandoned(orch: Orchestrator, pod: PodRef | None, step: str) -> None:
    """Raise Abandoned, its message naming the pod and the `step` not taken ("before
    network x (interface net1)"), when orch.abandoned() says the caller gave up."""
    if orch.abandoned():
        raise Abandoned(f"{where(pod)}: ADD abandoned {step}: the runtime stopped waiting "
                        "for its answer (its connection to the node daemon closed: it gave "
                        "up, was killed, or the shim's answer timeout passed)",
                        "every attachment it had attempted, if any, was DEL-ed as for a "
                        "failed ADD")


def _event(api: PodApi | None, pod: PodRef | None, type_: str, reason: str,
           message: str) -> None:
    """Record an Event on the pod; best effort (a failure is logged, never fatal)."""
    if api is None or pod is None:
        return
    try:
        api.create_event({"namespace": pod.namespace, "name": pod.name, "uid": pod.uid},
                         type_, reason, message)
    except Exception as e:  # an event never fails the ADD
        log.warning("pod %s: cannot record event %s: %s", pod, reason, e)


def _added_interface(api: PodApi | None, pod: PodRef | None, att: Attachment,
                     entry: status.NetworkStatusEntry) -> None:
    """Record the `AddedInterface` Event of `att`'s interface, its IPs as its
    network-status `entry` gives them (status.added_interface_message).

    The node daemon (its seam queues it: api.writes_after_answer) records it right after
    the attachment's ADD (`_attach_all`), so that it is sent while the next attachments
    run, as Multus records it after each delegate: queued after the last, the Events of
    an ADD met the kubelet starting the pod's containers and delayed the pod's Ready by
    about 30 ms on the real node (docs/bench-node.md, 2026-11-29 14:51-16:05). A later
    failure of the ADD rolls the interface back and records ErrorAddingNetwork (a
    Warning, which the runtime's DEL does not drop: podapi WARNINGS); none is recorded
    once the ADD is abandoned (the runtime's DEL may have begun, and dropped the queued
    Events, and the interface is rolled back). Thin mode records them after the PATCH,
    each a POST the ADD waits for, which must not come between a child and the saving
    of its result."""
    _event(api, pod, "Normal", "AddedInterface",
           status.added_interface_message(att.ifname, entry, att.network))


def _refuse_second_add(store: StateStore, req: CniRequest) -> None:
    """Raise InvalidEnv (4) when the container already has attachments (or a damaged
    state): CNI SPEC.md forbids a second ADD of a container without a DEL in between, and
    overwriting its state would lose what DEL must release. A path that cannot be read
    as a file (a planted symlink) is not a state: the save replaces it."""
    try:
        existing = store.load(req.container_id)
    except CorruptState:
        existing = None
        attached = True
    except StateError:
        return
    else:
        attached = bool(existing and (existing.attempted() or existing.del_pending))
    if attached:
        raise InvalidEnv(f"container {req.container_id} is already attached on this node (an "
                         "ADD without the DEL of an earlier ADD of it): DEL it first",
                         "CNI SPEC.md: the runtime must not call ADD twice for the same "
                         "container and interface without a DEL in between")


def _add_locked(orch: Orchestrator, req: CniRequest, conf: NetConf, pod: PodRef | None,
                api: PodApi | None, store: StateStore) -> dict[str, Any]:
    _refuse_second_add(store, req)
    state = SavedState.for_request(req, pod, conf.cni_version)
    store.save(state, durable=False)  # before the first API request
    store.forget_deleted(req.container_id)
    try:
        _check_abandoned(orch, pod, "before its plan was made")
        plan = build_plan(req, conf, pod, api, executor=orch.executor)
    except BaseException as e:
        store.release(req.container_id)  # nothing was attached
        if isinstance(e, CniError):
            _claims_refused(api, pod, e)
        raise
    hotplug = conf.hotplug and pod is not None and api is not None and writes_after_answer(api)
    state = plan.saved(state, identity=hotplug)
    if hotplug:  # the node daemon may change this sandbox later (commands/hotplug.py)
        state.hotplug = HotplugContext(dict(conf.raw), ":".join(req.path),
                                       plan.default_network)
    store.save_plan(state)  # before any child runs
    try:
        results = _attach_all(orch, req, conf, pod, api, plan, state, store)
        if plan.default_route is not None:
            results = _apply_default_route(req, plan, results, state, store)
        out = convert_result(results[0], conf.cni_version)
        entries = _status_entries(req, conf, plan, results) if pod and api else []
    except _AttachFailed as e:
        left = rollback(orch, req, conf, state, store)
        _claims_failed(api, pod, plan, e.cause)
        raise _rolled_back(e.cause, left) from None
    except BaseException as e:
        # any failure after the children ran (a result that cannot be given in the
        # configuration's version, a default route, a bug) undoes them all
        log.error("%s: ADD failed after its children ran: %s", where(pod), e)
        left = rollback(orch, req, conf, state, store)
        if isinstance(e, CniError):
            error = _rolled_back(e.within(where(pod)), left)
            _claims_failed(api, pod, plan, error)
            raise error from None
        raise
    if pod and api:
        annotations = {status.NETWORK_STATUS_ANNOTATION: status.encode_status(entries)}
        if not writes_after_answer(api) or _record_status(store, state, pod, annotations,
                                                           plan.pod_uid):
            _publish_status(api, pod, annotations, plan.pod_uid)
        if any(a.claim for a in plan.attachments):
            _claims_ready(api, pod, plan, results)
        if not writes_after_answer(api):  # thin mode: each a POST the ADD waits for, after
            # every result is saved and the PATCH sent (the node daemon's: _attach_all)
            for att, entry in zip([a for a in plan.attachments if not a.auxiliary], entries):
                _added_interface(api, pod, att, entry)
    return out


def _claims_ready(api: PodApi, pod: PodRef, plan: Plan, results: list[dict[str, Any]]) -> None:
    """Each claim attachment's status.devices entry, Ready True with its result (seed 004
    "Status"); sent after the answer where the seam does so (the node daemon)."""
    _apply_claims(api, pod, plan, results, None)


def _claims_failed(api: PodApi | None, pod: PodRef | None, plan: Plan, error: CniError) -> None:
    """After a rollback: each claim attachment's status.devices entry Ready False, reason
    NetworkInterfaceNotReady, message the error (seed 004 "Failures"). Sent before the
    answer in both modes: the runtime DELs the failed sandbox at once, and a DEL drops
    the container's queued writes."""
    if api is not None and pod is not None and any(a.claim for a in plan.attachments):
        _apply_claims(api, pod, plan, None, error.msg)


def _claims_refused(api: PodApi | None, pod: PodRef | None, error: CniError) -> None:
    """A plan refused for a claim's config (claims.ClaimConfigRefused: its `refs`, the
    claim's devices; the node's claimConfigSources is "class"): their status.devices
    entries Ready False with the error, as _claims_failed reports a failed ADD (seed 004
    "Failures"), before the answer. Nothing ran, so nothing else is reported."""
    refs = getattr(error, "refs", ())
    if api is None or pod is None or not refs:
        return
    _apply_devices(api, pod, [(ref, "", None) for ref in refs], error.msg)


def _apply_claims(api: PodApi, pod: PodRef, plan: Plan, results: list[dict[str, Any]] | None,
                  error: str | None) -> None:
    """One server-side apply per claim of its attachments' entries (claims.device_status:
    with `results` on success, `error` after a rollback). Best effort: a failure is
    logged, as the network-status PATCH's."""
    _apply_devices(api, pod, [(a.claim, a.ifname, results[i] if results else None)
                              for i, a in enumerate(plan.attachments) if a.claim], error)


def _apply_devices(api: PodApi, pod: PodRef,
                   devices: list[tuple[ClaimRef, str, dict[str, Any] | None]],
                   error: str | None) -> None:
    """_apply_claims for `devices` [(claim device, interface, CNI result or None)]."""
    from ..spec import claims
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    by_claim: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for ref, ifname, result in devices:
        entry = claims.device_status(ref, ifname, result, error, now)
        by_claim.setdefault((ref.namespace, ref.name, ref.uid), []).append(entry)
    for (ns, name, uid), statuses in by_claim.items():
        try:
            api.apply_claim_devices(ns, name, statuses, uid, after_answer=error is None)
        except KubeError as e:
            log.warning("pod %s: the status.devices of ResourceClaim %s/%s could not be "
                        "written: %s", pod, ns, name, e)


class _AttachFailed(Exception):
    """An attachment's ADD failed: `cause` is the CniError for the runtime."""

    def __init__(self, cause: CniError):
        super().__init__(str(cause))
        self.cause = cause


def _attach_all(orch: Orchestrator, req: CniRequest, conf: NetConf, pod: PodRef | None,
                api: PodApi | None, plan: Plan, state: SavedState,
                store: StateStore) -> list[dict[str, Any]]:
    """Run every attachment's ADD in order, recording its progress as it goes (module doc,
    3.), on the plan `store.save_plan` saved; the node daemon queues an interface's
    `AddedInterface` Event as soon as its attachment is up (`_added_interface`). Raises
    _AttachFailed."""
    results: list[dict[str, Any]] = []
    for i, att in enumerate(plan.attachments):
        _abandon_step(orch, pod, state, f"before network {att.network} (interface {att.ifname})")
        saved = state.attachments[i]
        with log_context(network=att.network):
            try:
                # its mark, with the result of the attachment before
                result = attach_one(orch, req, conf, att, saved,
                                    partial(store.record_progress, state,
                                            [i - 1, i] if i else [i]),
                                    plan.devices.get(i))
            except CniError as e:
                log.error("%s: ADD of network %s (%s) failed: %s", where(pod), att.network,
                          att.ifname, e)
                raise _AttachFailed(e.within(where(pod, f"{att.network} (interface "
                                                        f"{att.ifname})"))) from None
            results.append(result)
            saved.result = result
            log.info("%s: attached network %s as %s", where(pod), att.network, att.ifname)
            if not att.auxiliary and api is not None and writes_after_answer(api) \
                    and not orch.abandoned():  # else the DEL may have begun: rolled back
                _added_interface(api, pod, att, status.status_entry(  # queued, not waited for
                    att.network, result, ifname=att.ifname, default=att.default,
                    cidr=conf.network_status_cidr))
    _abandon_step(orch, pod, state, "after its last attachment, before its answer")
    if plan.attachments:
        try:
            store.save(state)  # the last attachment's result: the one fsync'ed
        except CniError as e:
            log.warning("%s: cannot save result of %s: %s", where(pod),
                        plan.attachments[-1].network, e)
    return results


def attach_one(orch: Orchestrator, req: CniRequest, conf: NetConf, att: Attachment,
               saved: SavedAttachment, record: Callable[[], None],
               device: tuple[str, str] | None = None) -> dict[str, Any]:
    """One attachment's ADD, the steps every ADD of netattach takes for one attachment:
    the runtime's ADD for each attachment of its plan (`_attach_all`), a hot-plug change
    for one element's (commands/hotplug.py).

    1. `saved` (the attachment's record in the container's state) marked attempted and
       `record`ed before anything of it runs (module doc, 3.: the caller's save: an ADD
       appends a progress record to its saved plan, a hot-plug change saves the whole
       state with its change mark), so that a DEL after a crash from here on undoes it;
    2. its device-info copied (`device`: (resourceName, deviceID) from the kubelet);
    3. its conf or conflist ADDed (chain.add, every plugin in order with prevResult) in
       the request's netns as `att.ifname`, with its runtimeConfig; the auxiliary chain
       from an empty prevResult (spec §7.1, Multus' auxiliary chain).
    Returns the attachment's CNI result, not saved (the caller saves it with its next
    step). Raises CniError (the record's StateError, a device-info failure, the child's
    own error): `saved` then says where its ADD stopped (mark_add_failed), which its DEL
    needs (delete.delete_attachment), and the caller undoes it (spec §7.2)."""
    saved.attempted = True
    try:
        record()
        if device is not None:
            devices.copy_device_info(*device, req.container_id, att.ifname,
                                     conf.device_info_dir)
        result = chain.add(att.config, orch.runtime_conf(req, conf, att.ifname,
                                                         att.capability_args),
                           empty_result(att.config.cni_version) if att.auxiliary else None)
    except CniError as e:
        saved.mark_add_failed(e)
        raise
    assert result is not None  # chain.add raises when a plugin prints no result
    return result


def _abandon_step(orch: Orchestrator, pod: PodRef | None, state: SavedState, step: str) -> None:
    """_check_abandoned between two steps of _attach_all: raises _AttachFailed (the
    caller rolls back every attempted attachment) when the caller gave up."""
    try:
        _check_abandoned(orch, pod, step)
    except Abandoned as e:
        log.warning("%s; rolling back %d attempted attachment(s)", e.msg,
                    len(state.attempted()))
        raise _AttachFailed(e) from None


def rollback(orch: Orchestrator, req: CniRequest, conf: NetConf, state: SavedState,
             store: StateStore) -> list[str]:
    """DEL the attempted attachments in reverse (spec §7.2), every plugin of each
    (delete.delete_attachments). When all succeeded the state is removed and the
    tombstone written (the runtime's DEL then has nothing to do); otherwise the state
    is saved, so the runtime's DEL retries what is left, and fails while it fails.
    Returns delete_attachments' messages of what is left ([] when nothing)."""
    errors = delete_attachments(orch, req, conf, state)
    for e in errors:
        log.error("%s: rollback: %s", where(state.pod), e)
    if errors:
        store.save(state)
    else:
        store.release(req.container_id)
    return errors


def _rolled_back(error: CniError, left: list[str]) -> CniError:
    """The ADD's `error` for the runtime, its details also saying what the rollback
    could not release (`left`, rollback's messages), which the runtime's DEL retries;
    `error` itself when it released everything."""
    if not left:
        return error
    note = (f"the rollback's DEL failed for {len(left)} attachment(s), kept for the "
            "runtime's DEL to retry: " + "; ".join(left))
    return error.reworded(error.msg, f"{error.details}; {note}" if error.details else note)


def _status_entries(req: CniRequest, conf: NetConf, plan: Plan,
                    results: list[dict[str, Any]]) -> list[status.NetworkStatusEntry]:
    """network-status entries (spec §5): MTUs read from the pod netns in one visit,
    `default-route` on the chosen attachment, `device-info` for attachments with a device.
    The auxiliary chain has none (it adds no interface)."""
    mtus = netnsinfo.link_mtus(req.netns, [a.ifname for a in plan.attachments])
    chosen = plan.default_route
    entries = []
    for i, (a, r) in enumerate(zip(plan.attachments, results)):
        if a.auxiliary:
            continue
        info = None
        if i in plan.devices:
            info = devices.read_device_info(*plan.devices[i], req.container_id, a.ifname,
                                            conf.device_info_dir)
        entries.append(status.status_entry(
            a.network, r, ifname=a.ifname, default=a.default, mtu=mtus.get(a.ifname),
            default_route=list(chosen.gateways) if chosen and chosen.index == i else None,
            device_info=info, cidr=conf.network_status_cidr))
    return entries


def _apply_default_route(req: CniRequest, plan: Plan, results: list[dict[str, Any]],
                         state: SavedState, store: StateStore) -> list[dict[str, Any]]:
    """Install the chosen default route(s) in the pod netns and save the rewritten results
    (so CHECK and DEL see what the netns holds). Raises RouteError (7) naming the
    gateway problem; the caller rolls back."""
    assert plan.default_route is not None
    from ..node import routes  # ipaddress, socket and copy: only for a pod asking a default-route
    targets = [routes.RouteTarget(a.ifname, r, a.default_route, a.network)
               for a, r in zip(plan.attachments, results)]
    try:
        new = routes.apply_default_routes(req.netns, targets)
    except CniError as e:
        raise e.within(f"network {plan.default_route.network} (default-route)") from None
    for saved, result in zip(state.attachments, new):
        saved.result = result
    store.save(state)
    return [r if r is not None else {} for r in new]


def _record_status(store: StateStore, state: SavedState, pod: PodRef,
                   annotations: dict[str, str], uid: str) -> bool:
    """Save the network-status in the state as not yet published (state.PendingStatus),
    before the answer, when the API seam sends it after the answer (the node daemon): a
    daemon killed before it sent the PATCH sends it when it starts again. Thin mode
    sends the PATCH before answering and records nothing (no extra write on its path).
    False when it cannot be saved: the PATCH is then not queued either (the daemon sends
    only what the state holds), and the error says so; the ADD still succeeds."""
    state.status_pending = PendingStatus(uid, annotations)
    if state.hotplug is not None:  # what a hot-plug change edits
        state.hotplug.network_status = annotations[status.NETWORK_STATUS_ANNOTATION]
    try:
        store.save(state, durable=False)  # re-sent only while its netns exists: no power loss
    except StateError as e:
        state.status_pending = None
        log.error("pod %s: attachments are up but the %s annotation is not written: it cannot "
                  "be recorded as pending: %s", pod, status.NETWORK_STATUS_ANNOTATION, e)
        return False
    return True


def _publish_status(api: PodApi, pod: PodRef, annotations: dict[str, str], uid: str) -> None:
    """PATCH network-status (spec §5) onto the pod of UID `uid` only. A failure is logged,
    not fatal: every interface is up and the runtime's sandbox works; failing the ADD
    here would tear down a working pod network over a report. docs/architecture.md
    records this decision."""
    try:
        api.patch_pod_annotations(pod.namespace, pod.name, annotations, uid)
    except KubeError as e:
        log.warning("pod %s: attachments are up but the %s annotation could not be written: %s",
                    pod, status.NETWORK_STATUS_ANNOTATION, e)

