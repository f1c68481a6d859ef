"""GC (CNI 1.1.0): DEL what the runtime no longer knows, then let the children collect.

The runtime sends GC with netattach's own configuration plus
`cni.dev/valid-attachments` (older libcni drafts: `cni.dev/attachments`): the
(containerID, ifname) pairs still in use *as the runtime sees them*, i.e.
netattach's container IDs with the runtime's CNI_IFNAME (eth0).

1. Every saved state (`<cniDir>/<id>.json`) whose (containerID, ifname) is not
   valid is stale and is DEL-ed exactly as a runtime DEL would (`delete.cmd_del`,
   with the netns, ifname and CNI_ARGS the ADD saved), under the container's lock.
2. GC is forwarded to every distinct 1.1.0+ delegate: the cluster default
   network as configured now plus every delegate in the states left. The
   children know their own interfaces (eth0, net1, data0...), not the runtime's
   view, so they get every (containerID, attachment ifname) of every valid
   container's saved state. All delegates get that same list: two delegates can
   share a store (host-local `dataDir` by network name, a cluster-wide IPAM), and
   a pair missing from the list would let a child free a live pod's resources,
   while an extra pair can only keep something a little longer.
   When a valid container has no readable state, its children's pairs are
   unknown, so no child is asked to GC at all (an error says why).

A state file that is damaged goes through DEL's own recovery (`delete`): when its
container is not valid any more it is DEL-ed exactly like a runtime DEL of it
(set aside as `.corrupt`, whole attachments salvaged, the rest rebuilt from the API
server when it answers), with the netns, ifname and CNI_ARGS read before the damage;
when it is still valid, its children's pairs are unknown and no delegate gets GC.
Tombstones older than statestore.TOMBSTONE_SECONDS are pruned (StateStore.prune_tombstones).

With the retired configuration (retired.py, netattach being uninstalled) a valid pair
without saved state is a sandbox netattach did not attach, the cluster default
network's alone: it goes to the delegates as the runtime gave it instead.

A container whose state changes while GC waits for its lock (an ADD or a hot-plug
change running) is never DEL-ed, whatever the runtime's list says: that list was made
before, and a sandbox being ADDed now may not be in it. While any operation runs, or a
state appeared since the listing, GC is not forwarded to the delegates either: an ADD
running may be attaching what their GC would free; the runtime's next GC asks them.

Failures do not stop the collection; they are reported together in one CniError.
GC makes no API request, except where DEL's recovery of a damaged state asks.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..cni import chain, version
from ..cni.errors import CniError, ConfigError, UnknownContainer, VersionError
from ..cni.request import CniRequest
from ..node.state import CorruptState, SavedState, StateError, salvage
from ..node.statestore import StateStore
from ..spec.netconf import NetConf
from . import delete
from .networks import resolve_cluster_network

if TYPE_CHECKING:
    from .orchestrator import Orchestrator

log = logging.getLogger("netattach.gc")

Pair = tuple[str, str]  # (containerID, ifname)


def valid_attachments(config: dict[str, Any]) -> set[Pair]:
    """The (containerID, ifname) pairs of `cni.dev/valid-attachments` in a GC stdin object
    (`cni.dev/attachments` when only the older key is given).

    A missing key or a malformed list raises ConfigError (7): read as "nothing is
    valid" it would DEL every container on the node.
    """
    for key in (chain.GC_ATTACHMENTS_KEY, chain.GC_ATTACHMENTS_KEY_COMPAT):
        if key in config:
            entries = config[key]
            break
    else:
        raise ConfigError(f"GC without {chain.GC_ATTACHMENTS_KEY!r}: refusing to treat every "
                          "attachment on the node as stale")
    if not isinstance(entries, list):
        raise ConfigError(f"GC: {key!r} must be a list, not {type(entries).__name__}")
    pairs: set[Pair] = set()
    for i, entry in enumerate(entries):
        if not (isinstance(entry, dict) and isinstance(entry.get("containerID"), str)
                and isinstance(entry.get("ifname"), str)):
            raise ConfigError(f"GC: {key}[{i}] must be an object with string 'containerID' "
                              f"and 'ifname', got {entry!r}")
        pairs.add((entry["containerID"], entry["ifname"]))
    return pairs


def del_request(state: SavedState, cni_path: tuple[str, ...]) -> CniRequest:
    """The DEL request a runtime would send for a saved state: its container ID, netns,
    ifname and CNI_ARGS as the ADD saved them; `cni_path` is the GC's CNI_PATH (the ADD's
    is not saved)."""
    return CniRequest(command="DEL", container_id=state.container_id, netns=state.netns,
                      ifname=state.ifname, args=state.cni_args, path=cni_path, stdin=b"",
                      config=None)


class Changed(StateError):
    """The container's state changed while GC waited for its lock (`_load_locked`)."""


def _load_locked(store: StateStore, container_id: str) -> SavedState | None:
    """The saved state, read under the container's lock (waited for: an operation
    running now ends first). Raises Changed when the state file changed meanwhile (an
    ADD or a hot-plug change wrote it while GC waited): the container is in use,
    whatever the runtime's list says (the list was made before), so GC leaves it alone.
    Raises StateError (CorruptState for a damaged file)."""
    before = store.file_identity(container_id)
    with store.lock(container_id):
        if store.file_identity(container_id) != before:
            raise Changed(f"container {container_id}: its state changed while GC waited")
        return store.load(container_id)


def cmd_gc(orch: Orchestrator, req: CniRequest, conf: NetConf) -> None:
    """GC (CNI SPEC.md "GC", 1.1.0): DEL stale containers, then GC every 1.1.0+ delegate.

    Needs netattach's cniVersion >= 1.1.0, else VersionError (1). Raises one CniError
    listing every failure (the kind and code of the first one); everything that could
    be collected was collected.
    """
    if not version.at_least(conf.cni_version, "1.1.0"):
        raise VersionError(f"GC needs cniVersion 1.1.0 or later, the configuration says "
                           f"{conf.cni_version}")
    valid = valid_attachments(req.config or {})
    valid_ids = {c for c, _ in valid}
    store = orch.store(conf)
    errors: list[CniError] = []
    try:
        ids = store.container_ids()
    except StateError as e:
        raise e.within("GC") from None

    kept: dict[str, SavedState] = {}  # container ID -> state still saved after step 1
    busy: list[str] = []  # containers an operation ran on: left alone
    for cid in ids:
        try:
            state = _load_locked(store, cid)
        except Changed:
            log.info("GC: container %s changed while GC waited for it (an ADD or a hot-plug "
                     "change ran): not DEL-ed, the runtime's next GC decides", cid)
            busy.append(cid)
            continue
        except CorruptState as e:
            if cid in valid_ids:
                errors.append(e.within(f"container {cid}"))
                continue
            log.info("GC: container %s is not valid any more and its state is damaged: DEL "
                     "recovers what it can", cid)
            _gc_del(orch, del_request(salvage(e.raw, cid).runtime_view(cid), req.path), conf,
                    errors)
            continue
        except StateError as e:
            errors.append(e.within(f"container {cid}"))
            continue
        if state is None:  # DEL-ed since the listing
            continue
        if (cid, state.ifname) in valid:
            kept[cid] = state
            continue
        log.info("GC: container %s (%s) is not valid any more: DEL", cid, state.ifname)
        if not _gc_del(orch, del_request(state, req.path), conf, errors):
            kept[cid] = state  # its delegates still get the GC below
    store.prune_tombstones()

    unknown = sorted(p for p in valid if p[0] not in kept or kept[p[0]].ifname != p[1])
    busy += [c for c in _operations_now(store, set(ids)) if c not in busy]
    if busy:
        # an ADD running may be attaching what the delegates' GC would free: the children
        # are not asked now (the runtime's next GC asks them)
        log.info("GC: not forwarded to the delegates: an operation runs on container(s) %s",
                 ", ".join(sorted(busy)))
    elif unknown and conf.retired_conflist is not None:
        # netattach is being uninstalled (retired.py): a sandbox without state is one it
        # did not attach, the cluster default network's alone under the runtime's pair
        errors += _forward(orch, req, conf, kept, valid, unknown)
    elif unknown:
        errors.append(UnknownContainer(
            "GC not forwarded to any delegate: valid attachment(s) without saved state on "
            f"this node: {', '.join(f'{c}/{i}' for c, i in unknown)}",
            "their delegates' interfaces are unknown, so a delegate's GC could free resources "
            "still in use"))
    else:
        errors += _forward(orch, req, conf, kept, valid)

    if len(errors) == 1:
        raise errors[0].within("GC")
    if errors:
        raise errors[0].reworded(f"GC: {len(errors)} failures: " + "; ".join(e.msg for e in errors),
                                 "; ".join(e.details for e in errors if e.details))


def _operations_now(store: StateStore, listed: set[str]) -> list[str]:
    """Containers in use now: an operation holds their lock, or their state appeared
    after GC listed the states (an ADD that started meanwhile). [] when the dir cannot
    be read (the listing's error was reported already)."""
    try:
        return sorted(set(store.operations_running())
                      | (set(store.container_ids()) - listed))
    except StateError:
        return []


def _gc_del(orch: Orchestrator, request: CniRequest, conf: NetConf,
            errors: list[CniError]) -> bool:
    """DEL one stale container as a runtime would; a failure goes into `errors`.
    Returns whether the DEL succeeded."""
    try:
        delete.cmd_del(orch, request, conf)
        return True
    except CniError as e:
        errors.append(e.within(f"DEL of stale container {request.container_id}"))
        return False


def child_attachments(states: dict[str, SavedState], valid: set[Pair]) -> list[dict[str, str]]:
    """[{"containerID", "ifname"}] of every attachment of every state whose runtime pair is
    valid, in container then attachment order."""
    out, seen = [], set()
    for cid, state in states.items():
        if (cid, state.ifname) not in valid:
            continue
        for att in state.attachments:
            pair = (cid, att.ifname)
            if pair not in seen:
                seen.add(pair)
                out.append({"containerID": cid, "ifname": att.ifname})
    return out


def _delegates(conf: NetConf, states: dict[str, SavedState]
               ) -> tuple[list[chain.NetworkConfig], list[CniError]]:
    """Distinct delegate configs (by content): the cluster default network as configured
    now, then those of the saved states in order."""
    found: dict[str, chain.NetworkConfig] = {}
    errors: list[CniError] = []
    try:
        _, default = resolve_cluster_network(conf, None)
        found[json.dumps(default.raw, sort_keys=True)] = default
    except CniError as e:
        # e.g. clusterNetwork names a NAD (needs the API): every live container's state
        # holds the config it was attached with, so GC still reaches that delegate.
        log.warning("GC: cluster default network %s not resolved without the API (%s); "
                    "using the configs saved with each container", conf.cluster_network, e)
    for cid, state in states.items():
        for att in state.attachments:
            key = json.dumps(att.config, sort_keys=True)
            if key in found:
                continue
            try:
                found[key] = chain.NetworkConfig.from_dict(att.config, att.source)
            except CniError as e:
                errors.append(e.within(f"container {cid}: network {att.network}: saved config"))
    return list(found.values()), errors


def _forward(orch: Orchestrator, req: CniRequest, conf: NetConf, states: dict[str, SavedState],
             valid: set[Pair], unattached: Sequence[Pair] = ()) -> list[CniError]:
    """GC every distinct 1.1.0+ delegate (not disableGC) with the children's valid pairs,
    and `unattached`: valid pairs of sandboxes netattach did not attach (the retired
    configuration's), as the runtime gave them."""
    nets, errors = _delegates(conf, states)
    attachments = child_attachments(states, valid)
    attachments += [{"containerID": c, "ifname": i} for c, i in unattached]
    rt = orch.bare_runtime_conf(req, conf)
    for net in nets:
        if not version.at_least(net.cni_version, "1.1.0") or net.disable_gc:
            log.debug("GC: skipping %s (cniVersion %s%s)", net.source, net.cni_version,
                      ", disableGC" if net.disable_gc else "")
            continue
        try:
            chain.gc(net, rt, attachments)
            log.info("GC: forwarded to %s with %d valid attachment(s)", net.source,
                     len(attachments))
        except CniError as e:
            errors.append(e.within(f"network {net.name} ({net.source})"))
    return errors
