"""GC (CNI 1.1.0): DEL what the runtime no longer knows, then let the children collect.

The runtime sends GC with netattach's own configuration plus
`cni.dev/valid-attachments` (older libcni drafts: `cni.dev/attachments`): the
(containerID, ifname) pairs still in use *as the runtime sees them*, i.e.
netattach's container IDs with the runtime's CNI_IFNAME (eth0).

1. Every saved state (`<cniDir>/<id>.json`) whose (containerID, ifname) is not
   valid is stale and is DEL-ed exactly as a runtime DEL would (`attach.cmd_del`,
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

Failures do not stop the collection; they are reported together in one CniError.
"""
from __future__ import annotations

import json
import logging

from . import attach
from .cni import chain
from .cni.errors import (CniError, INCOMPATIBLE_VERSION, INVALID_CONFIG, IO_FAILURE,
                         UNKNOWN_CONTAINER)
from .cni.request import CniRequest
from .cni.result import version_at_least
from .delegates import DelegateError
from .netconf import NetConf
from .state import StateError, StateStore

log = logging.getLogger("netattach.gc")

Pair = tuple[str, str]  # (containerID, ifname)


def valid_attachments(config: dict) -> set[Pair]:
    """The (containerID, ifname) pairs of `cni.dev/valid-attachments` in a GC stdin object
    (`cni.dev/attachments` when only the older key is given).

    A missing key or a malformed list raises CniError INVALID_CONFIG (7): read as
    "nothing is valid" it would DEL every container on the node.
    """
    for key in (chain.GC_ATTACHMENTS_KEY, chain.GC_ATTACHMENTS_KEY_COMPAT):
        if key in config:
            entries = config[key]
            break
    else:
        raise CniError(INVALID_CONFIG, f"GC without {chain.GC_ATTACHMENTS_KEY!r}: refusing to "
                       "treat every attachment on the node as stale")
    if not isinstance(entries, list):
        raise CniError(INVALID_CONFIG, f"GC: {key!r} must be a list, not {type(entries).__name__}")
    pairs: set[Pair] = set()
    for i, entry in enumerate(entries):
        if not (isinstance(entry, dict) and isinstance(entry.get("containerID"), str)
                and isinstance(entry.get("ifname"), str)):
            raise CniError(INVALID_CONFIG, f"GC: {key}[{i}] must be an object with string "
                           f"'containerID' and 'ifname', got {entry!r}")
        pairs.add((entry["containerID"], entry["ifname"]))
    return pairs


def del_request(state: dict, cni_path: tuple[str, ...]) -> CniRequest:
    """The DEL request a runtime would send for a saved state: its container ID, netns,
    ifname and CNI_ARGS as the ADD saved them; `cni_path` is the GC's CNI_PATH (the ADD's
    is not saved)."""
    return CniRequest(
        command="DEL", container_id=state["containerID"], netns=state.get("netns") or "",
        ifname=state["ifname"], args=tuple((k, v) for k, v in state.get("cniArgs", ())),
        path=cni_path, stdin=b"", config=None)


def _load_locked(store: StateStore, container_id: str) -> dict | None:
    """The saved state, read under the container's lock so that an ADD or DEL running
    now is finished first. Raises StateError (also for a state without the keys DEL needs:
    StateStore.load checks them)."""
    with store.lock(container_id):
        try:
            state = store.load(container_id)
        except OSError as e:  # e.g. `<id>.json` is a directory
            raise StateError(f"cannot read the state of container {container_id}: "
                             f"{e.strerror or e}") from None
    return state


def cmd_gc(req: CniRequest, conf: NetConf) -> None:
    """GC (CNI SPEC.md "GC", 1.1.0): DEL stale containers, then GC every 1.1.0+ delegate.

    Needs netattach's cniVersion >= 1.1.0, else CniError INCOMPATIBLE_VERSION (1).
    Makes no API request. Raises one CniError listing every failure (code of the
    first one); everything that could be collected was collected.
    """
    if not version_at_least(conf.cni_version, "1.1.0"):
        raise CniError(INCOMPATIBLE_VERSION, f"GC needs cniVersion 1.1.0 or later, the "
                       f"configuration says {conf.cni_version}")
    valid = valid_attachments(req.config or {})
    store = StateStore(conf.cni_dir)
    errors: list[CniError] = []
    try:
        ids = store.container_ids()
    except StateError as e:
        raise CniError(IO_FAILURE, f"GC: {e}") from None

    kept: dict[str, dict] = {}  # container ID -> state still saved after step 1
    for cid in ids:
        try:
            state = _load_locked(store, cid)
        except StateError as e:
            errors.append(CniError(IO_FAILURE, f"container {cid}: {e}"))
            continue
        if state is None:  # DEL-ed since the listing
            continue
        if (cid, state["ifname"]) in valid:
            kept[cid] = state
            continue
        log.info("GC: container %s (%s) is not valid any more: DEL", cid, state["ifname"])
        try:
            attach.cmd_del(del_request(state, req.path), conf)
        except CniError as e:
            errors.append(CniError(e.code, f"DEL of stale container {cid}: {e.msg}", e.details))
            kept[cid] = state  # its delegates still get the GC below

    unknown = sorted(p for p in valid if p[0] not in kept or kept[p[0]]["ifname"] != p[1])
    if unknown:
        errors.append(CniError(UNKNOWN_CONTAINER, "GC not forwarded to any delegate: valid "
                               f"attachment(s) without saved state on this node: "
                               f"{', '.join(f'{c}/{i}' for c, i in unknown)}",
                               "their delegates' interfaces are unknown, so a delegate's GC "
                               "could free resources still in use"))
    else:
        errors += _forward(req, conf, kept, valid)

    if len(errors) == 1:
        e = errors[0]
        raise CniError(e.code, f"GC: {e.msg}", e.details)
    if errors:
        raise CniError(errors[0].code, f"GC: {len(errors)} failures: "
                       + "; ".join(e.msg for e in errors),
                       "; ".join(e.details for e in errors if e.details))


def child_attachments(states: dict[str, dict], valid: set[Pair]) -> list[dict]:
    """[{"containerID", "ifname"}] of every attachment of every state whose runtime pair is
    valid, in container then attachment order."""
    out, seen = [], set()
    for cid, state in states.items():
        if (cid, state["ifname"]) not in valid:
            continue
        for att in state["attachments"]:
            pair = (cid, att.get("ifname"))
            if isinstance(pair[1], str) and pair not in seen:
                seen.add(pair)
                out.append({"containerID": cid, "ifname": pair[1]})
    return out


def _delegates(conf: NetConf, states: dict[str, dict]) -> tuple[list[chain.NetworkConfig],
                                                                   list[CniError]]:
    """Distinct delegate configs (by content): the cluster default network as configured
    now, then those of the saved states in order."""
    found: dict[str, chain.NetworkConfig] = {}
    errors: list[CniError] = []
    try:
        _, default = attach.resolve_cluster_network(conf, None)
        found[json.dumps(default.raw, sort_keys=True)] = default
    except (DelegateError, CniError) as e:
        # e.g. clusterNetwork names a NAD (needs the API): every live container's state
        # holds the config it was attached with, so GC still reaches that delegate.
        log.warning("GC: cluster default network %s not resolved without the API (%s); "
                    "using the configs saved with each container", conf.cluster_network, e)
    for cid, state in states.items():
        for att in state["attachments"]:
            key = json.dumps(att.get("config"), sort_keys=True)
            if key in found:
                continue
            try:
                found[key] = attach.saved_config(att)
            except CniError as e:
                errors.append(CniError(e.code, f"container {cid}: network {att.get('network')}: "
                                       f"saved config: {e.msg}", e.details))
    return list(found.values()), errors


def _forward(req: CniRequest, conf: NetConf, states: dict[str, dict],
             valid: set[Pair]) -> list[CniError]:
    """GC every distinct 1.1.0+ delegate (not disableGC) with the children's valid pairs."""
    nets, errors = _delegates(conf, states)
    attachments = child_attachments(states, valid)
    rt = chain.RuntimeConf(container_id="", netns="", ifname="", cni_path=req.path,
                           bin_dirs=(conf.bin_dir,), timeout=conf.delegate_timeout)
    for net in nets:
        if not version_at_least(net.cni_version, "1.1.0") or net.disable_gc:
            log.debug("GC: skipping %s (cniVersion %s%s)", net.source, net.cni_version,
                      ", disableGC" if net.disable_gc else "")
            continue
        try:
            chain.gc(net, rt, attachments)
            log.info("GC: forwarded to %s with %d valid attachment(s)", net.source,
                     len(attachments))
        except CniError as e:
            errors.append(CniError(e.code, f"network {net.name} ({net.source}): {e.msg}",
                                   e.details))
    return errors
