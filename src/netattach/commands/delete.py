"""DEL: undo every attachment of a container from its saved state (spec §7.2), and the
recovery when that state is missing, damaged or only partly known.

What DEL works from, in order (`_load_or_rebuild`):
1. the saved state, whole: no API request;
2. no state but a tombstone (its last DEL completed): nothing to do, at once, quietly;
3. a damaged file: moved aside as `<id>.json.corrupt`, the attachments still whole in
   it salvaged; when that is all of them, DEL uses them (no API request);
3a. no state, and the runtime's libcni cache (cni.libcni_cache) shows that it ADDed the
   sandbox with one network that is no delegating meta-plugin, not with netattach's
   conflist: the sandbox predates netattach (or was ADDed while netattach's conflist was
   absent), so that network is all it has. DEL releases it as cached (config, runtime
   config and result: what the ADD ran), asks the API nothing, logs at INFO, and
   removes the cache entry once done, as libcni's own DEL of that network would have.
   An entry of netattach's retired conflist (retired.py) is one too: that ADD attached
   the cluster default network alone, which its `clusterNetwork` names;
4. otherwise the plan rebuilt from the pod and its NADs, an attachment read from the
   file replacing the rebuilt one of the same interface (it is what the ADD ran);
5. otherwise a best effort (`_best_effort`): what is known, plus the cluster default
   network as configured now, and, while the API server cannot be asked, code 11 for
   DEL_RETRY_WINDOW so that the runtime retries (`_settle_pending`).
A DEL that completes removes the state and writes the tombstone; one that fails
keeps (or saves) what it worked from, so the runtime's retry finds it. Every DEL first
drops the writes still queued for its container (Orchestrator.drop_writes) and a
network-status its state holds as not yet published (state.PendingStatus).
"""
from __future__ import annotations

import dataclasses
import logging
import time

from ..cni import chain
from ..cni.errors import CniError, ConfigError, TryAgain
from ..cni.request import CniRequest
from ..kube.api import PodApi, pod_ref, where
from ..node import devices
from ..node.logsetup import log_context
from ..node.state import (
    CorruptState,
    DelPending,
    SavedAttachment,
    SavedState,
    StateError,
    boot_id,
    salvage,
)
from ..node.statestore import StateStore, is_missing_netns
from ..spec.netconf import NetConf
from ..spec.pod import PodRef

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)
if TYPE_CHECKING:
    from ..node.libcni_cache import CachedAdd
    from .orchestrator import Orchestrator

log = logging.getLogger("netattach")

DEL_RETRY_WINDOW = 600.0
"""DEL without a usable saved state while the API server cannot be asked: for this many
seconds after the first such DEL it fails with code 11, so that the runtime retries until
the API answers; after that it succeeds with what it could do (docs/architecture.md
"Decisions")."""


def delete_attachments(orch: Orchestrator, req: CniRequest, conf: NetConf,
                       state: SavedState) -> list[str]:
    """DEL every attempted attachment in reverse order, past failures (spec §7.2), each
    as `delete_attachment` does.

    Returns one message per attachment whose DEL failed ("network N (interface I):
    plugin type='T' name='N' failed (del): cause"); [] means nothing of `state` is
    allocated any more. A netns already gone is passed as "" so children release IPAM
    and skip the namespace (CNI SPEC.md: DEL must succeed when resources are already
    gone).
    """
    netns = "" if is_missing_netns(req.netns) else req.netns
    errors = []
    for att in reversed(state.attempted()):
        error = delete_attachment(orch, req, conf, att, netns)
        if error is not None:
            errors.append(error)
    return errors


def delete_attachment(orch: Orchestrator, req: CniRequest, conf: NetConf,
                      att: SavedAttachment, netns: str | None = None) -> str | None:
    """DEL one attachment, the step every DEL of netattach takes for one: the runtime's
    DEL and an ADD's rollback (`delete_attachments`, each attempted attachment in
    reverse), a hot-plug change's removal or undo (commands/hotplug.py).

    Every plugin of its conf or conflist in reverse order, past failures (chain.delete:
    every plugin's DEL is attempted, unlike libcni's DelNetworkList), with its saved
    result as prevResult and its saved runtimeConfig; then its device-info file removed.
    A plugin's DEL failure is logged only (WARNING) when it leaves nothing of the ADD
    allocated (chain.AddFailure.excuse, from where the attachment's failed ADD stopped,
    SavedAttachment.failed_add): a plugin whose ADD never ran, or the failing one
    failing as its ADD did (e.g. macvlan's master is missing), which would otherwise
    fail every DEL of the sandbox forever.
    netns: the CNI_NETNS children get; None: the request's, or "" when it is gone.
    Returns None when nothing of the attachment is allocated any more, else what is
    left: "network N (interface I): <the CniError>". Never raises CniError.
    """
    if netns is None:
        netns = "" if is_missing_netns(req.netns) else req.netns
    what = f"network {att.network} (interface {att.ifname})"
    with log_context(network=att.network):
        try:
            excused = chain.delete(chain.NetworkConfig.from_dict(att.config, att.source),
                                   orch.saved_runtime_conf(req, conf, att, netns), att.result,
                                   att.failed_add())
            for x in excused:
                log.warning("DEL of %s: %s; ignored: %s", what, x.error, x.why)
            if att.device:
                devices.remove_device_info(req.container_id, att.ifname,
                                           conf.device_info_dir)
        except CniError as e:
            return f"{what}: {e}"
    return None


def cmd_del(orch: Orchestrator, req: CniRequest, conf: NetConf) -> None:
    """DEL: detach everything from saved state; needs neither the pod nor the API server.

    Without a usable saved state, `_load_or_rebuild` says what DEL works from (module
    doc). Raises TryAgain (11) listing every attachment whose DEL failed (what DEL
    worked from is saved then, so the runtime's retry finds it), or while only part
    of the pod is known and the API server may still answer (`_settle_pending`);
    StateError (5) when the state dir cannot be used.
    """
    pod = pod_ref(req)
    store = orch.store(conf)
    orch.drop_writes(req.container_id)  # before the lock: a write being sent may hold it
    try:
        with store.lock(req.container_id):
            state, as_saved, cached = _load_or_rebuild(orch, req, conf, pod, store)
            if state is None:
                return
            if state.status_pending is not None or state.hotplug is not None:
                _drop_pending(req, pod, state, store)
            errors = delete_attachments(orch, req, conf, state)
            if errors:
                if not as_saved:
                    store.save(state)
                if cached is not None:  # the saved state holds what the entry said now
                    _forget_cached(pod, cached)
                raise TryAgain(f"pod {pod or req.container_id}: DEL failed for {len(errors)} "
                               "attachment(s), kept for the next DEL to retry: "
                               + "; ".join(errors))
            if state.del_pending is not None:
                _settle_pending(orch, req, pod, state, store)
            if any(a.claim for a in state.attempted()):
                clear_claims(orch, conf, pod, state)
            store.release(req.container_id)
            if cached is not None:
                _forget_cached(pod, cached)
            log.info("%s: detached %d attachment(s)", where(pod), len(state.attempted()))
    except StateError as e:
        raise e.within(where(pod)) from None


def clear_claims(orch: Orchestrator, conf: NetConf, pod: PodRef | None,
                 state: SavedState) -> None:
    """Remove netattach's entries from the status.devices of every ResourceClaim the
    state's attachments used (state.SavedAttachment.claim), once they are released:
    best effort, never failing the DEL (logged). An entry whose CNI result names another
    sandbox than this container's netns was written by a later ADD of the pod (a new
    sandbox) and is left alone; the removal is an apply conditional on the
    resourceVersion read, tried twice, so such a write in between is never undone."""
    if conf.retired_conflist is not None:  # no API access while uninstalled (retired.py)
        log.info("%s: the status.devices of its ResourceClaims are not cleared: netattach "
                 "is being uninstalled from this node (its attachments are released)",
                 where(pod))
        return
    from ..kube.client import KubeError
    claims = {}
    for a in state.attempted():
        if a.claim:
            claims[(a.claim["namespace"], a.claim["name"])] = a.claim
    api = orch.api(conf)
    for (ns, name), ref in claims.items():
        try:
            for _ in range(2):
                claim = api.get_resource_claim(ns, name)
                if claim is None:
                    break
                meta = claim.get("metadata") or {}
                if ref.get("uid") and meta.get("uid") != ref["uid"]:
                    break  # re-created: not ours
                ours = [d for d in (claim.get("status") or {}).get("devices") or []
                        if isinstance(d, dict) and d.get("driver") == ref["driver"]]
                if not ours:
                    break
                others = {str(f.get("sandbox")) for d in ours
                          for f in ((d.get("data") or {}).get("interfaces") or [])
                          if isinstance(f, dict) and f.get("sandbox")} - {state.netns}
                if others:
                    log.info("%s: ResourceClaim %s/%s: status.devices written by another "
                             "sandbox (%s); left as it is", where(pod), ns, name,
                             ", ".join(sorted(others)))
                    break
                try:
                    api.apply_claim_devices(ns, name, [], meta.get("uid", ""),
                                            meta.get("resourceVersion", ""))
                    log.info("%s: ResourceClaim %s/%s: status.devices cleared", where(pod),
                             ns, name)
                    break
                except KubeError as e:
                    if e.status != 409:
                        raise
        except KubeError as e:
            log.warning("%s: ResourceClaim %s/%s: status.devices not cleared (its "
                        "attachments are released): %s", where(pod), ns, name, e)


def _drop_pending(req: CniRequest, pod: PodRef | None, state: SavedState,
                         store: StateStore) -> None:
    """Thick mode: the ADD's network-status not published yet (state.PendingStatus) and
    the hot-plug context (state.HotplugContext): the DEL drops both, saved before any
    child runs, so that no status is sent (nor sent again by a daemon that starts) and
    no hot-plug change made for a sandbox whose DEL began, even when this DEL fails or
    is killed."""
    if state.status_pending is not None:
        log.info("%s: the network-status of container %s was not published yet; the DEL "
                 "drops it", where(pod), req.container_id)
    state.status_pending = None
    state.hotplug = None  # nor is the sandbox changed any more (commands/hotplug.py)
    store.save(state, durable=False)  # after a power loss, its netns is gone: not re-sent


def _names(attachments: list[SavedAttachment]) -> str:
    return ", ".join(f"{a.network} ({a.ifname})" for a in attachments) or "nothing"


def _load_or_rebuild(orch: Orchestrator, req: CniRequest, conf: NetConf, pod: PodRef | None,
                     store: StateStore
                     ) -> tuple[SavedState | None, bool, CachedAdd | None]:
    """The state DEL works from (module doc), whether it is the saved file as it is, and
    the libcni cache entry it was taken from (case 3a; None otherwise); (None, True,
    None) when there is nothing to do (a tombstone). Every case but a whole state, a
    marker, a tombstone and a sandbox ADDed without netattach (INFO) is logged at
    WARNING or above, naming the container."""
    cid = req.container_id
    who = f"container {cid} (pod {pod or '?'})"
    base = SavedState.for_request(req, pod, conf.cni_version)
    known: list[SavedAttachment] = []
    previous: DelPending | None = None  # the DEL pending from an earlier try
    without_netattach = ""  # the networks libcni's cache says ADDed the sandbox instead
    try:
        state = store.load(cid)
    except CorruptState as e:
        salvaged = salvage(e.raw, cid)
        try:
            aside = f"moved to {store.set_aside(cid)}"
        except StateError as e2:
            aside = f"left in place: {e2}"
        log.error("%s: %s; %s; %d attachment(s) readable in it (%s)", who, e, aside,
                  len(salvaged.attachments), "all of them: DEL uses them" if salvaged.complete
                  else "the rest is lost")
        if salvaged.complete:
            return base.with_attachments(salvaged.attachments), False, None
        known, situation, loud = salvaged.attachments, "saved state damaged", True
    except StateError as e:
        log.error("%s: %s", who, e)
        situation, loud = "saved state unreadable", True
    else:
        if state is not None and state.del_pending is None:
            return state, True, None
        if state is None:
            deleted = store.deleted_since(cid)
            if deleted is not None:
                log.debug("%s: already released (by a DEL, or by the ADD that failed) at "
                          "%s; nothing to do", who,
                          time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(deleted)))
                return None, True, None
            cached, without_netattach = _added_without_netattach(orch, req, conf)
            if cached is not None:
                primary = _from_libcni_cache(req, base, cached, who)
                if primary is not None:
                    return primary, False, cached
            situation, loud = "no saved state", False
            if without_netattach:
                situation += (f": the runtime ADDed it without netattach (network(s) "
                              f"{without_netattach} in libcni's cache)")
        else:
            assert state.del_pending is not None
            known = [a for a in state.attachments if not a.from_config]
            previous = state.del_pending
            situation = ("a DEL pending since "
                         f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(previous.since))}")
            loud = True
    if conf.retired_conflist is not None:
        # netattach is being uninstalled (retired.py): its token is gone, the API server
        # is not asked, and waiting for it (DEL_RETRY_WINDOW) cannot help
        cause = ConfigError("netattach is being uninstalled from this node, so the API "
                            "server is not asked")
        return (_best_effort(orch, req, conf, base, known, cause, None, None, situation,
                             loud), False, None)
    api = orch.api(conf) if pod else None
    # the rebuild's modules (NADs, planning, the API client) only when a DEL needs them:
    # a DEL from a whole saved state never does
    from .networks import build_plan
    try:
        plan = build_plan(req, conf, pod, api, wait_for_pod=False)
    except CniError as e:
        return (_best_effort(orch, req, conf, base, known, e, previous, api, situation, loud),
                False, None)
    rebuilt = plan.saved(base, attempted=True)
    read = {a.ifname: a for a in known}
    attachments = [read.pop(a.ifname, a) for a in rebuilt.attachments] + list(read.values())
    # a sandbox ADDed without netattach (by Multus, say) lost no state of netattach's: the
    # rebuilt plan is what there is to release, nothing to warn about
    log.log(logging.ERROR if loud else logging.INFO if without_netattach else logging.WARNING,
            "%s: %s; DEL rebuilt from the API (%d attachments%s)", who, situation,
            len(attachments), f", {len(known)} of them as read from the saved state"
            if known else "")
    return rebuilt.with_attachments(attachments), False, None


def _added_without_netattach(orch: Orchestrator, req: CniRequest,
                             conf: NetConf) -> tuple[CachedAdd | None, str]:
    """What libcni's cache (cni.libcni_cache) says of the sandbox of a DEL without saved
    state: (the entry, its network name) when the runtime ADDed CNI_IFNAME with one
    network alone that is no delegating meta-plugin (the sandbox's only attachment is
    that network's); (None, the networks' names) when it ADDed it without netattach
    with something else (Multus, several entries); (None, "") when the cache has no
    entry (another runtime, a wiped cache: nothing is known) or an entry of netattach's
    own conflist (its name, or a plugin of type netattach or netattach-shim: netattach
    ADDed the sandbox, so its state was lost).
    The rule's source: libcni caches every successful ADD under the network name of the
    conflist it ran, and the runtime DELs with the conflist it has now (netattach's), so
    an entry under another name is an ADD by another conflist."""
    from ..cni.invoke import META_PLUGIN_TYPES, OWN_TYPES
    from ..node.libcni_cache import cached_adds
    entries = cached_adds(req.container_id, req.ifname, orch.libcni_cache_dir)
    if len(entries) == 1:
        retired = _retired_add(entries[0])
        if retired is not None:
            return retired, repr(entries[0].network)
    own_types = OWN_TYPES | {conf.raw.get("type")}
    if not entries or any(e.network == conf.name or e.plugin_types & own_types
                          for e in entries):
        return None, ""
    names = ", ".join(repr(e.network) for e in entries)
    if len(entries) == 1 and not entries[0].plugin_types & META_PLUGIN_TYPES:
        return entries[0], names
    return None, names


def _retired_add(entry: CachedAdd) -> CachedAdd | None:
    """An entry of netattach's retired conflist (retired.py: netattach being uninstalled
    ADDed the cluster default network alone, saving no state), as the entry of that
    network: its config as the retired configuration's `clusterNetwork` names it now,
    the runtime config and result cached (the result in that network's version when it
    converts). None for any other entry, or when that network cannot be read."""
    from ..node import nodefiles
    if not nodefiles.is_retired(entry.config):
        return None
    from ..cni.result import convert_result
    from ..spec.netconf import parse_netconf
    from .networks import resolve_cluster_network
    plugins = entry.config.get("plugins")
    plugin = plugins[0] if isinstance(plugins, list) else entry.config
    try:
        retired = parse_netconf({**plugin, "cniVersion": entry.config.get("cniVersion"),
                                 "name": entry.network})
        name, network = resolve_cluster_network(retired, None)
        result = entry.result
        if result is not None:
            result = convert_result(result, network.cni_version, retired.cni_version)
    except CniError as e:
        log.debug("libcni cache entry %s of the retired conflist: %s", entry.path, e)
        return None
    return dataclasses.replace(entry, network=name, config=network.raw, result=result)


def release_added_without_netattach(orch: Orchestrator, req: CniRequest,
                                    conf: NetConf) -> bool:
    """Case 3a for a DEL that keeps no books (the retired configuration's DEL of a sandbox
    without saved state, retired.py: no lock, no tombstone, the state dir never made):
    when libcni's cache shows the runtime ADDed CNI_IFNAME with one network without
    netattach, or with the retired conflist, DEL that network as cached, remove the
    entry and return True; False when the cache says nothing of the kind. Raises
    TryAgain (11) when that DEL fails (the entry stays for the runtime's retry)."""
    pod = pod_ref(req)
    cached, _ = _added_without_netattach(orch, req, conf)
    if cached is None:
        return False
    who = f"container {req.container_id} (pod {pod or '?'})"
    state = _from_libcni_cache(req, SavedState.for_request(req, pod, conf.cni_version),
                               cached, who)
    if state is None:
        return False
    errors = delete_attachments(orch, req, conf, state)
    if errors:
        raise TryAgain(f"pod {pod or req.container_id}: DEL failed: " + "; ".join(errors))
    _forget_cached(pod, cached)
    return True


def _from_libcni_cache(req: CniRequest, base: SavedState, cached: CachedAdd,
                       who: str) -> SavedState | None:
    """The state of a sandbox ADDed by one network without netattach (case 3a): that
    network as the cluster default network on CNI_IFNAME, with the config, runtime
    config and result the ADD ran (libcni's cache entry `cached`); logged at INFO. None
    (logged at DEBUG) when the cached config is no CNI config netattach can run."""
    try:
        chain.NetworkConfig.from_dict(cached.config, f"libcni cache entry {cached.path}")
    except CniError as e:
        log.debug("%s: %s", who, e)
        return None
    log.info("%s: no saved state: the runtime ADDed it with network %r alone, without "
             "netattach (libcni's cache entry %s): DEL releases that network as ADDed",
             who, cached.network, cached.path)
    return base.with_attachments([SavedAttachment(
        network=cached.network, ifname=req.ifname, config=cached.config,
        source=f"libcni cache entry {cached.path}", default=True,
        capability_args=cached.capability_args, attempted=True, result=cached.result)])


def _forget_cached(pod: PodRef | None, cached: CachedAdd) -> None:
    """After a DEL from libcni's cache entry (case 3a) completed, or failed and saved its
    state (which the runtime's retry works from): remove the entry, which no runtime DEL
    will (it removes the entry of its own conflist's name). A failure to remove is
    logged; the DEL goes on."""
    from ..node.libcni_cache import remove
    try:
        remove(cached)
    except OSError as e:
        log.warning("%s: libcni cache entry %s not removed: %s", where(pod), cached.path, e)


def _best_effort(orch: Orchestrator, req: CniRequest, conf: NetConf, base: SavedState,
                 known: list[SavedAttachment], cause: CniError, previous: DelPending | None,
                 api: PodApi | None, situation: str, loud: bool) -> SavedState:
    """What DEL does when the plan cannot be rebuilt: the attachments read from a damaged
    or pending state, plus the cluster default network as configured now on CNI_IFNAME
    (the runtime named that interface), so that at least the pod's primary IP is
    released. Logs what is DEL-ed and that anything else is unknown and not released.
    When the API server could not be asked (KubeError, rather than an answer that the
    pod or a NAD is gone), the state is marked pending (`previous`, the pending mark of
    an earlier try, kept with its first time): see `_settle_pending`.
    """
    from ..kube.client import KubeError
    from ..spec import plan as planning
    from .networks import Plan, resolve_cluster_network
    who = f"container {req.container_id} (pod {base.pod or '?'})"
    attachments = list(known)
    unreachable = isinstance(cause, KubeError)
    if not any(a.ifname == req.ifname for a in attachments):
        try:
            default = resolve_cluster_network(conf, None if unreachable else api)
            plan = Plan(planning.plan_attachments(default, req.ifname, conf.runtime_config, []),
                        {}, None)
            [primary] = plan.saved(base, attempted=True).attachments
            attachments.insert(0, dataclasses.replace(primary, from_config=True))
        except CniError as e:
            log.error("%s: the cluster default network %s cannot be read either: %s", who,
                      conf.cluster_network, e)
    state = base.with_attachments(attachments)
    if unreachable:
        state.del_pending = previous or DelPending(orch.clock(), cause.msg, orch.monotonic(),
                                                   boot_id())
        state.del_pending.reason = cause.msg
    if situation == "no saved state":
        situation += " (its ADD failed or never ran, or the state was lost)"
    log.log(logging.ERROR if loud or unreachable else logging.WARNING,
            "%s: %s and the plan cannot be rebuilt (%s); DEL releases only what it knows: %s; "
            "any other attachment of the pod is unknown and NOT released", who, situation,
            cause.msg, _names(attachments))
    return state


def _settle_pending(orch: Orchestrator, req: CniRequest, pod: PodRef | None,
                    state: SavedState, store: StateStore) -> None:
    """After a best-effort DEL while the API server could not be asked: within
    DEL_RETRY_WINDOW of the first such DEL, save what is known and raise TryAgain (11),
    so that the runtime retries until the API answers and every attachment can be
    released; after it, log what is given up and return (DEL succeeds)."""
    pending = state.del_pending
    assert pending is not None
    waited = pending.waited(orch.clock(), orch.monotonic())
    done = _names(state.attachments)
    if waited < DEL_RETRY_WINDOW:
        store.save(state)
        raise TryAgain(f"pod {pod or '?'} (container {req.container_id}): DEL incomplete: "
                       f"released {done}, but without saved state the pod's other attachments "
                       f"are known only to the API server, which cannot be asked "
                       f"({pending.reason}); retry: DEL gives up on them "
                       f"{DEL_RETRY_WINDOW - waited:.0f} s from now")
    log.error("container %s (pod %s): the API server could not be asked for %.0f s (%s); DEL "
              "gives up: released %s; any other attachment of the pod is NOT released and its "
              "addresses stay allocated", req.container_id, pod or "?", waited,
              pending.reason, done)
