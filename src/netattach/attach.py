"""Orchestration of ADD / DEL / CHECK over the pieces: kube, delegates, plan, state, chain, status.

Every failure leaves here as one CniError whose message names the pod
(`ns/name`), the network and the cause.
"""
from __future__ import annotations

import copy
import dataclasses
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

from . import delegates, devices, netnsinfo, plan as planning, routes, selection, status
from .cni import chain, invoke
from .cni.errors import (CniError, INCOMPATIBLE_VERSION, INVALID_CONFIG, INVALID_ENV, IO_FAILURE,
                         NOT_AVAILABLE, TRY_AGAIN, UNKNOWN_CONTAINER)
from .cni.request import CniRequest
from .cni.result import convert_result, version_at_least
from .kube import Kube, KubeError
from .netconf import NetConf
from .state import CorruptState, StateError, StateStore, is_missing_netns, salvage

log = logging.getLogger("netattach")

MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"
# Backoff (seconds) while a pod is not yet visible in the API (informer lag on a fresh pod).
POD_RETRY_DELAYS = (0.1, 0.2, 0.4, 0.8)
# DEL without a usable saved state while the API server cannot be asked: for this many
# seconds after the first such DEL, it fails with code 11 so that the runtime retries
# until the API answers; after that it succeeds with what it could do
# (docs/architecture.md "Decisions").
DEL_RETRY_WINDOW = 600.0


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def pod_ref(req: CniRequest) -> PodRef | None:
    """The pod named by CNI_ARGS (K8S_POD_NAMESPACE, K8S_POD_NAME, K8S_POD_UID), if any.

    Raises CniError INVALID_ENV (4) when the namespace is not a DNS-1123 label or the name
    not a DNS-1123 subdomain: both become API request paths ("../..", "?", "#" would
    reach other resources than the pod).
    """
    ns, name = req.arg("K8S_POD_NAMESPACE"), req.arg("K8S_POD_NAME")
    if not ns or not name:
        return None
    if not selection.is_dns1123_label(ns) or not selection.is_dns1123_subdomain(name):
        raise CniError(INVALID_ENV, f"CNI_ARGS K8S_POD_NAMESPACE={ns!r} K8S_POD_NAME={name!r} "
                       "is not a pod", "a namespace is a DNS-1123 label, a pod name a DNS-1123 "
                       "subdomain")
    return PodRef(ns, name, req.arg("K8S_POD_UID") or "")


def child_args(req: CniRequest) -> tuple[tuple[str, str], ...]:
    """CNI_ARGS for every child: IgnoreUnknown=1 first, then the runtime's own pairs.

    CONVENTIONS.md "CNI_ARGS": plugins reject unknown keys unless IgnoreUnknown is set;
    the K8S_* keys the runtime passed reach the children unchanged.
    """
    return (("IgnoreUnknown", "1"),) + tuple((k, v) for k, v in req.args if k != "IgnoreUnknown")


def runtime_conf(req: CniRequest, conf: NetConf, att: dict | planning.Attachment,
                 netns: str | None = None) -> chain.RuntimeConf:
    """The RuntimeConf of one attachment (saved-state dict or plan Attachment)."""
    if isinstance(att, planning.Attachment):
        ifname, cap = att.ifname, att.capability_args
    else:
        ifname, cap = att["ifname"], att.get("capabilityArgs", {})
    return chain.RuntimeConf(
        container_id=req.container_id, netns=req.netns if netns is None else netns, ifname=ifname,
        args=child_args(req), capability_args=cap, cni_path=req.path,
        bin_dirs=(conf.bin_dir,), timeout=conf.delegate_timeout)


def error_code(e: Exception, default: int) -> int:
    """The documented CNI code of a failure kind (docs/architecture.md "Errors"): a CniError
    keeps its own (a child's included), the API server 11, state and OS-level I/O 5,
    anything else `default`."""
    if isinstance(e, CniError):
        return e.code
    if isinstance(e, KubeError):
        return TRY_AGAIN
    if isinstance(e, (StateError, OSError)):
        return IO_FAILURE
    return default


class ApiUnavailable(CniError):
    """The API server could not be asked: unreachable, too slow, or it refused (401, 403,
    5xx). Unlike an answer ("not found"), a later try may succeed. Code 11."""


def _fail(pod: PodRef | None, network: str | None, e: Exception, code: int = INVALID_CONFIG) -> CniError:
    """Wrap any error into one CniError naming pod, network and cause (child code kept)."""
    where = f"pod {pod}" if pod else "request"
    if network:
        where += f": network {network}"
    if isinstance(e, CniError):
        kind = ApiUnavailable if isinstance(e, ApiUnavailable) else CniError
        return kind(e.code, f"{where}: {e.msg}", e.details)
    if isinstance(e, KubeError):
        return ApiUnavailable(TRY_AGAIN, f"{where}: {e}")
    return CniError(error_code(e, code), f"{where}: {e}")


# ---------------------------------------------------------------- resolution

def _is_own(config: chain.NetworkConfig, conf: NetConf) -> bool:
    """True when a plugin of `config` is netattach itself (its own `type`)."""
    own = conf.raw.get("type", "netattach")
    return any(p.get("type") == own for p in config.plugins)


def saved_config(att: dict) -> chain.NetworkConfig:
    """The delegate of a saved attachment, as the ADD ran it. Raises CniError (7)."""
    return chain.NetworkConfig.from_dict(att["config"], att.get("source", att["network"]))


def resolve_cluster_network(conf: NetConf, kube: Kube | None) -> tuple[str, chain.NetworkConfig]:
    """(status name, delegate) of the cluster default network, from `clusterNetwork`.

    An absolute path is a conf/conflist file or a directory (its first config in
    sorted order, skipping netattach's own); otherwise the `name` of a config in
    `confDir`; otherwise a NetworkAttachmentDefinition `[ns/]name` (namespace
    defaults to `multusNamespace`). Disk is tried before the API so that the
    common case needs no request. Raises DelegateError, KubeError, CniError.
    """
    value = conf.cluster_network
    if value.startswith("/"):
        if os.path.isdir(value):
            for path in delegates.list_conf_files(value):
                try:
                    config = delegates.load_conf_file(path)
                except (CniError, delegates.DelegateError) as e:
                    log.warning("skipping %s: %s", path, e)
                    continue
                if not _is_own(config, conf):
                    return config.name, config
            raise delegates.DelegateError(value, f"no CNI config for the cluster default network in {value}")
        return (c := delegates.load_conf_file(value)).name, c
    on_disk = delegates.find_on_disk(conf.conf_dir, value)
    if on_disk is not None and not _is_own(on_disk, conf):
        return on_disk.name, on_disk
    ns, _, name = value.rpartition("/")
    ns = ns or conf.multus_namespace
    if not (selection.is_dns1123_label(ns) and selection.is_dns1123_label(name)):
        raise delegates.DelegateError(value, f"cluster default network {value!r} is neither an "
                                      f"absolute path, nor the name of a config in {conf.conf_dir}, "
                                      "nor a NetworkAttachmentDefinition [namespace/]name of "
                                      "DNS-1123 labels (§3.3)")
    if kube is None:
        raise delegates.DelegateError(value, f"cluster default network {value!r} is neither a file "
                                      f"nor a config in {conf.conf_dir}, and no pod API access")
    return f"{ns}/{name}", delegates.resolve_delegate(kube.get_nad(ns, name), ns, name, conf.conf_dir)


def _get_pod(kube: Kube, pod: PodRef) -> dict:
    """The pod, asked again after each of POD_RETRY_DELAYS while it is not found; the
    pauses count against the API budget (apiTimeout) like the requests."""
    waited = 0.0
    for delay in POD_RETRY_DELAYS + (None,):
        obj = kube.get_pod(pod.namespace, pod.name)
        if obj is not None:
            return obj
        if delay is None or not kube.pause(delay):
            break
        waited += delay
    raise CniError(TRY_AGAIN, f"pod {pod}: not found in the API server (retried for {waited:.1f}s)")


def _check_uid(pod: PodRef, obj: dict) -> None:
    meta = obj.get("metadata", {})
    if not pod.uid or MIRROR_POD_ANNOTATION in meta.get("annotations", {}):
        return  # static pods: the kubelet's UID differs from the mirror pod's
    if meta.get("uid") != pod.uid:
        raise CniError(UNKNOWN_CONTAINER, f"pod {pod}: UID mismatch: the runtime asked for "
                       f"{pod.uid} but the API server has {meta.get('uid')} (pod was recreated)")


@dataclass(frozen=True)
class Plan:
    """Everything an ADD will do, decided before any child runs.

    attachments: in order, the cluster default network first.
    devices: attachment index -> (resourceName, deviceID) for NADs annotated
      k8s.v1.cni.cncf.io/resourceName (devices from the kubelet's PodResources API).
    default_route: the validated default-route choice (spec §4.1.2.1.9), if any.
    pod_uid: the UID of the pod as the API server showed it ("" if not read); the
      network-status PATCH is for that pod only (a mirror pod's differs from the
      runtime's K8S_POD_UID).
    """
    attachments: list[planning.Attachment]
    devices: dict[int, tuple[str, str]]
    default_route: routes.DefaultRoutePlan | None
    pod_uid: str = ""


def _with_device_id(config: chain.NetworkConfig, device_id: str) -> chain.NetworkConfig:
    """The delegate with `deviceID` set in every plugin's config, as Multus injects it
    (SR-IOV-style plugins read it there; runtimeConfig.deviceID carries it too)."""
    raw = copy.deepcopy(config.raw)
    for plugin in raw["plugins"] if config.is_list else [raw]:
        plugin["deviceID"] = device_id
    return chain.NetworkConfig.from_dict(raw, config.source)


class InvalidSelection(CniError):
    """The pod's selection annotation is invalid (code 7); the ADD records a Warning event."""


def _pod_default_network(conf: NetConf, pod: PodRef | None, kube: Kube | None,
                         annotations: dict) -> tuple[str, chain.NetworkConfig] | None:
    """The pod's `v1.multus-cni.io/default-network` choice, replacing the cluster default
    network for this pod (Multus-compatible): exactly one network selection element,
    resolved in `multusNamespace` unless namespaced. None when the pod has none."""
    value = annotations.get(selection.DEFAULT_NETWORK_ANNOTATION, "").strip()
    if not value or kube is None:
        return None
    try:
        elements = selection.parse_network_selection(value, conf.multus_namespace)
    except selection.SelectionError as e:
        raise InvalidSelection(INVALID_CONFIG, f"pod {pod}: {selection.DEFAULT_NETWORK_ANNOTATION}: "
                               f"{e}") from None
    if len(elements) != 1:
        raise InvalidSelection(INVALID_CONFIG, f"pod {pod}: {selection.DEFAULT_NETWORK_ANNOTATION} "
                               f"must name exactly one network, not {len(elements)}")
    element = elements[0]
    try:
        nad = kube.get_nad(element.namespace, element.name)
        return element.ref, delegates.resolve_delegate(nad, element.namespace, element.name,
                                                       conf.conf_dir)
    except (delegates.DelegateError, KubeError, CniError) as e:
        raise _fail(pod, f"{element.ref} (pod's default network)", e) from None


def build_plan(req: CniRequest, conf: NetConf, pod: PodRef | None,
               kube: Kube | None) -> Plan:
    """Fetch what is needed (pod, NADs, devices) and plan all attachments. Raises CniError."""
    pod_obj = None
    if pod and kube:
        try:
            pod_obj = _get_pod(kube, pod)
        except KubeError as e:
            raise _fail(pod, None, e) from None
        _check_uid(pod, pod_obj)
    annotations = (pod_obj or {}).get("metadata", {}).get("annotations") or {}
    default = _pod_default_network(conf, pod, kube, annotations)
    if default is None:
        try:
            default = resolve_cluster_network(conf, kube)
        except (delegates.DelegateError, KubeError, CniError) as e:
            raise _fail(pod, f"{conf.cluster_network} (cluster default network)", e) from None

    secondaries: list[tuple[selection.NetworkSelectionElement, chain.NetworkConfig]] = []
    resources: list[str | None] = []
    elements: list[selection.NetworkSelectionElement] = []
    if conf.default_networks and not (pod and pod.namespace in conf.system_namespaces):
        elements += selection.parse_network_selection(",".join(conf.default_networks),
                                                      conf.multus_namespace)
    n_defaults = len(elements)
    if pod_obj is not None:
        try:
            elements += selection.parse_network_selection(
                annotations.get(selection.NETWORKS_ANNOTATION, ""), pod.namespace)
        except selection.SelectionError as e:
            raise InvalidSelection(INVALID_CONFIG, f"pod {pod}: {e}") from None
    for i, element in enumerate(elements):
        if (i >= n_defaults and conf.namespace_isolation and element.namespace != pod.namespace
                and element.namespace not in conf.global_namespaces):
            raise CniError(INVALID_CONFIG, f"pod {pod}: network {element.ref}: namespace isolation "
                           f"forbids pods in namespace {pod.namespace} to use "
                           f"NetworkAttachmentDefinitions in namespace {element.namespace} "
                           f"(allowed: {', '.join((pod.namespace,) + conf.global_namespaces)})")
        try:
            nad = kube.get_nad(element.namespace, element.name) if kube else None
            config = delegates.resolve_delegate(nad, element.namespace, element.name, conf.conf_dir)
            if _is_own(config, conf):
                raise delegates.DelegateError(element.ref, f"{config.source} names netattach "
                                              "itself as a plugin; a delegate must be another plugin")
        except (delegates.DelegateError, KubeError, CniError) as e:
            raise _fail(pod, element.ref, e) from None
        secondaries.append((element, config))
        resources.append(devices.nad_resource_name(nad) if nad and element.device_id is None
                         else None)
    device_map = _assign_devices(conf, pod, resources, secondaries)
    try:
        attachments = planning.plan_attachments(default, req.ifname, conf.runtime_config,
                                                secondaries)
        route_plan = routes.plan_default_routes(
            [(a.ifname, a.default_route, a.network) for a in attachments])
    except (planning.PlanError, routes.RouteError, CniError) as e:
        raise _fail(pod, None, e) from None
    for a in attachments:  # a type naming a path: refused before any state or child
        try:
            for plugin in a.config.plugins:
                invoke.check_plugin_type(plugin.get("type"))
        except CniError as e:
            raise _fail(pod, a.network, e) from None
    for index, (resource, device_id) in device_map.items():
        attachments[index].capability_args[devices.DEVICE_INFO_CAPABILITY] = \
            devices.cni_device_info_path(req.container_id, attachments[index].ifname,
                                         conf.device_info_dir)
    return Plan(attachments, device_map, route_plan,
                (pod_obj or {}).get("metadata", {}).get("uid") or "")


def _assign_devices(conf: NetConf, pod: PodRef | None, resources: list[str | None],
                    secondaries: list) -> dict[int, tuple[str, str]]:
    """Give each secondary whose NAD names a resource one of the pod's devices of it (in
    place, into its selection element and config). Returns attachment index (secondary
    position + 1) -> (resourceName, deviceID). Raises CniError TRY_AGAIN naming the
    resource when the kubelet cannot be asked or allocated too few devices."""
    if not any(resources) or pod is None:
        return {}
    try:
        allocated = devices.pod_devices(conf.pod_resources_socket, pod.namespace, pod.name,
                                        {r for r in resources if r}, conf.api_timeout)
        ids = devices.assign_device_ids(resources, allocated)
    except devices.DeviceError as e:
        raise CniError(TRY_AGAIN, f"pod {pod}: devices: {e}") from None
    out = {}
    for i, (resource, device_id) in enumerate(zip(resources, ids)):
        if resource and device_id:
            element, config = secondaries[i]
            secondaries[i] = (dataclasses.replace(element, device_id=device_id),
                              _with_device_id(config, device_id))
            out[i + 1] = (resource, device_id)
    return out


# ---------------------------------------------------------------- ADD

def _state_of(req: CniRequest, conf: NetConf, pod: PodRef | None, plan: Plan) -> dict[str, Any]:
    return {
        "containerID": req.container_id,
        "netns": req.netns,
        "ifname": req.ifname,
        "cniArgs": [list(kv) for kv in req.args],
        "pod": {"namespace": pod.namespace, "name": pod.name, "uid": pod.uid} if pod else None,
        "cniVersion": conf.cni_version,
        "attachments": [{
            "network": a.network,
            "ifname": a.ifname,
            "default": a.default,
            "source": a.config.source,
            "config": a.config.raw,
            "capabilityArgs": a.capability_args,
            "attempted": False,
            "result": None,
            **({"device": {"resourceName": plan.devices[i][0], "deviceID": plan.devices[i][1]}}
               if i in plan.devices else {}),
        } for i, a in enumerate(plan.attachments)],
    }


def cmd_add(req: CniRequest, conf: NetConf) -> dict:
    """ADD: attach the cluster default network, then every selected network.

    Returns the cluster default network's result converted to the
    configuration's cniVersion (multi-net spec §6, CNI SPEC.md "ADD").
    Raises CniError; on failure every attempted attachment was DEL-ed (§7.2).
    """
    pod = pod_ref(req)
    kube = Kube(conf.kubeconfig, conf.api_timeout, "apiTimeout") if pod else None
    store = StateStore(conf.cni_dir)
    try:
        wait_ready(conf)
        with store.lock(req.container_id):
            return _add_locked(req, conf, pod, kube, store)
    except StateError as e:
        error = _fail(pod, None, e)
    except InvalidSelection as e:
        _event(kube, pod, "Warning", "InvalidNetworkSelection", e.msg)
        raise
    except CniError as e:
        error = e
    _event(kube, pod, "Warning", "ErrorAddingNetwork", error.msg)
    raise error


def wait_ready(conf: NetConf) -> None:
    """Block until `readinessindicatorfile` exists, at most `readinessTimeout` seconds
    (multi-net spec §6.1.2: operations wait for the cluster default network).
    Raises CniError TRY_AGAIN naming the file."""
    path = conf.readiness_indicator_file
    if not path or os.path.exists(path):
        return
    deadline = time.monotonic() + conf.readiness_timeout
    log.info("waiting up to %.0f s for readiness indicator file %s", conf.readiness_timeout, path)
    while time.monotonic() < deadline:
        time.sleep(0.25)
        if os.path.exists(path):
            return
    raise CniError(TRY_AGAIN, f"cluster default network not ready: readiness indicator file "
                   f"{path} did not appear within {conf.readiness_timeout:.0f} s")


def _event(kube: Kube | None, pod: PodRef | None, type_: str, reason: str, message: str) -> None:
    """Record an Event on the pod; best effort (a failure is logged, never fatal)."""
    if kube is None or pod is None:
        return
    try:
        kube.create_event({"namespace": pod.namespace, "name": pod.name, "uid": pod.uid},
                          type_, reason, message)
    except KubeError as e:
        log.warning("pod %s: cannot record event %s: %s", pod, reason, e)


def _add_locked(req: CniRequest, conf: NetConf, pod: PodRef | None, kube: Kube | None,
                store: StateStore) -> dict:
    plan = build_plan(req, conf, pod, kube)
    state = _state_of(req, conf, pod, plan)
    store.save(req.container_id, state)  # before any child runs
    results: list[dict | None] = []
    for i, att in enumerate(plan.attachments):
        state["attachments"][i]["attempted"] = True
        try:
            store.save(req.container_id, state)
            if i in plan.devices:
                devices.copy_device_info(*plan.devices[i], req.container_id, att.ifname,
                                         conf.device_info_dir)
            result = chain.add(att.config, runtime_conf(req, conf, att))
        except (CniError, StateError, devices.DeviceError) as e:
            log.error("pod %s: ADD of network %s (%s) failed: %s", pod, att.network, att.ifname, e)
            state["attachments"][i]["addFailed"] = True
            _rollback(req, conf, state, store)
            raise _fail(pod, f"{att.network} (interface {att.ifname})", e) from None
        results.append(result)
        state["attachments"][i]["result"] = result
        try:
            store.save(req.container_id, state)
        except StateError as e:
            log.warning("pod %s: cannot save result of %s: %s", pod, att.network, e)
        log.info("pod %s: attached network %s as %s", pod, att.network, att.ifname)
    if plan.default_route is not None:
        results = _apply_default_route(req, conf, plan, results, state, store, pod)
    if pod and kube:
        entries = _status_entries(req, conf, plan, results)
        _publish_status(kube, pod, entries, plan.pod_uid)
        for att, entry in zip(plan.attachments, entries):
            _event(kube, pod, "Normal", "AddedInterface", f"Add {att.ifname} "
                   f"{entry.get('ips', [])} from {att.network}")
    default_result = results[0] or {"cniVersion": conf.cni_version}
    return convert_result(default_result, conf.cni_version)


def _rollback(req: CniRequest, conf: NetConf, state: dict, store: StateStore) -> None:
    """DEL the attempted attachments in reverse (spec §7.2); state is removed only when all
    succeeded, so the runtime's following DEL retries whatever is left."""
    errors = _delete_attachments(req, conf, state)
    for e in errors:
        log.error("rollback: %s", e)
    if errors:
        store.save(req.container_id, state)
    else:
        store.remove(req.container_id)


def _status_entries(req: CniRequest, conf: NetConf, plan: Plan,
                    results: list[dict | None]) -> list[dict]:
    """network-status entries (spec §5): MTUs read from the pod netns in one visit,
    `default-route` on the chosen attachment, `device-info` for attachments with a device."""
    mtus = netnsinfo.link_mtus(req.netns, [a.ifname for a in plan.attachments])
    chosen = plan.default_route
    entries = []
    for i, (a, r) in enumerate(zip(plan.attachments, results)):
        info = None
        if i in plan.devices:
            info = devices.read_device_info(*plan.devices[i], req.container_id, a.ifname,
                                            conf.device_info_dir)
        entries.append(status.status_entry(
            a.network, r, ifname=a.ifname, default=a.default, mtu=mtus.get(a.ifname),
            default_route=list(chosen.gateways) if chosen and chosen.index == i else None,
            device_info=info))
    return entries


def _apply_default_route(req: CniRequest, conf: NetConf, plan: Plan, results: list,
                         state: dict, store: StateStore, pod: PodRef | None) -> list:
    """Install the chosen default route(s) in the pod netns and save the rewritten results
    (so CHECK and DEL see what the netns holds). On failure every attachment is rolled
    back and CniError INVALID_CONFIG names the gateway problem."""
    targets = [routes.RouteTarget(a.ifname, r, a.default_route, a.network)
               for a, r in zip(plan.attachments, results)]
    try:
        results = routes.apply_default_routes(req.netns, targets)
    except routes.RouteError as e:
        _rollback(req, conf, state, store)
        raise _fail(pod, f"{plan.default_route.network} (default-route)", e) from None
    for att_state, result in zip(state["attachments"], results):
        att_state["result"] = result
    store.save(req.container_id, state)
    return results


def _publish_status(kube: Kube, pod: PodRef, entries: list[dict], uid: str) -> None:
    """PATCH network-status (spec §5) onto the pod of UID `uid` only. A failure is logged,
    not fatal: every interface is up and the runtime's sandbox works; failing the ADD
    here would tear down a working pod network over a report. docs/architecture.md
    records this decision."""
    try:
        kube.patch_pod_annotations(pod.namespace, pod.name,
                                   {status.NETWORK_STATUS_ANNOTATION: status.encode_status(entries)},
                                   uid)
    except KubeError as e:
        log.warning("pod %s: attachments are up but the %s annotation could not be written: %s",
                    pod, status.NETWORK_STATUS_ANNOTATION, e)


# ---------------------------------------------------------------- DEL

def _delete_attachments(req: CniRequest, conf: NetConf, state: dict) -> list[str]:
    """DEL every attempted attachment in reverse order, past failures (spec §7.2).

    Returns one message per failed DEL; the DEL failure of an attachment whose
    ADD itself returned an error is logged only. A netns already gone is passed as ""
    so children release IPAM and skip the namespace (CNI SPEC.md: DEL must
    succeed when resources are already gone).
    """
    netns = "" if is_missing_netns(req.netns) else req.netns
    errors = []
    for att in reversed(state["attachments"]):
        if not att.get("attempted", True):
            continue
        try:
            chain.delete(saved_config(att), runtime_conf(req, conf, att, netns), att.get("result"))
            if att.get("device"):
                devices.remove_device_info(req.container_id, att["ifname"], conf.device_info_dir)
        except (CniError, devices.DeviceError) as e:
            message = f"network {att['network']} (interface {att['ifname']}): {e}"
            if att.get("addFailed"):
                # Its ADD returned an error, so the child already undid what it could; a
                # DEL that fails the same way (e.g. macvlan's master is missing) would
                # otherwise fail every DEL of the sandbox forever.
                log.warning("DEL of an attachment whose ADD failed also failed (ignored): %s",
                            message)
                continue
            errors.append(message)
    return errors


def cmd_del(req: CniRequest, conf: NetConf) -> None:
    """DEL: detach everything from saved state; needs neither the pod nor the API server.

    Without a usable saved state, `_load_or_rebuild` says what DEL works from.
    Raises CniError listing every attachment whose DEL failed (what DEL worked from
    is saved then, so the runtime's retry finds it), or code 11 while only part of
    the pod is known and the API server may still answer (`_settle_pending`).
    """
    pod = pod_ref(req)
    store = StateStore(conf.cni_dir)
    try:
        with store.lock(req.container_id):
            state, as_saved = _load_or_rebuild(req, conf, pod, store)
            errors = _delete_attachments(req, conf, state)
            if errors:
                if not as_saved:
                    store.save(req.container_id, state)
                raise CniError(TRY_AGAIN, f"pod {pod or req.container_id}: DEL failed for "
                               f"{len(errors)} attachment(s): " + "; ".join(errors))
            if "delPending" in state:
                _settle_pending(req, pod, state, store)
            store.remove(req.container_id)
            log.info("pod %s: detached %d attachment(s)", pod, len(state["attachments"]))
    except StateError as e:
        raise _fail(pod, None, e) from None


def _names(attachments: list[dict]) -> str:
    return ", ".join(f"{a['network']} ({a['ifname']})" for a in attachments) or "nothing"


def _load_or_rebuild(req: CniRequest, conf: NetConf, pod: PodRef | None,
                     store: StateStore) -> tuple[dict, bool]:
    """The state DEL works from, and whether it is the saved file as it is. In order:

    1. the saved state, when it is whole;
    2. a damaged file is moved aside as `<id>.json.corrupt` and the attachments still
       readable in it are kept (state.salvage); when that is all of them, DEL uses them;
    3. else the plan rebuilt from the pod and its NADs, where an attachment read from
       the file replaces the rebuilt one of the same interface (it is what the ADD ran);
    4. else `_best_effort`.
    A state saved by a best-effort DEL (`delPending`) is read as in 2, so each retry
    asks the API server again. Every case but 1 is logged, naming the container.
    """
    cid = req.container_id
    who = f"container {cid} (pod {pod or '?'})"
    known: list[dict] = []
    since = None
    lost = True  # a state existed and is not (all) usable
    try:
        state = store.load(cid)
    except CorruptState as e:
        known, complete = salvage(e.raw, cid)
        try:
            where = f"moved to {store.set_aside(cid)}"
        except StateError as e2:
            where = f"left in place: {e2}"
        log.error("%s: %s; %s; %d attachment(s) readable in it (%s)", who, e, where, len(known),
                  "all of them: DEL uses them" if complete else "the rest is lost")
        if complete:
            return {**_state_of(req, conf, pod, Plan([], {}, None)), "attachments": known}, False
    except StateError as e:
        log.error("%s: %s", who, e)
    else:
        if state is None:
            lost = False
        elif not isinstance(state.get("delPending"), dict):
            return state, True
        else:
            known = [a for a in state["attachments"] if not a.get("fromConfig")]
            since = state["delPending"].get("since")
            since = since if isinstance(since, (int, float)) else None
    kube = Kube(conf.kubeconfig, conf.api_timeout, "apiTimeout") if pod else None
    try:
        plan = build_plan(req, conf, pod, kube)
    except CniError as e:
        api_answered = not isinstance(e, ApiUnavailable)
        return _best_effort(req, conf, pod, known, e, since, kube if api_answered else None,
                            lost), False
    state = _state_of(req, conf, pod, plan)
    for att in state["attachments"]:
        att["attempted"] = True
    read = {a["ifname"]: a for a in known}
    state["attachments"] = ([read.pop(a["ifname"], a) for a in state["attachments"]]
                            + list(read.values()))
    log.warning("%s: %s; DEL rebuilt from the API (%d attachments%s)", who,
                "saved state damaged" if lost else "no saved state", len(state["attachments"]),
                f", {len(known)} of them as read from the saved state" if known else "")
    return state, False


def _best_effort(req: CniRequest, conf: NetConf, pod: PodRef | None, known: list[dict],
                 cause: CniError, since: float | None, kube: Kube | None, lost: bool) -> dict:
    """What DEL does when the plan cannot be rebuilt: the attachments read from a damaged
    state, plus the cluster default network as configured now on CNI_IFNAME (the
    runtime named that interface), so that at least the pod's primary IP is released.
    Logs what is DEL-ed and that anything else is unknown and not released. When the
    API server could not be asked (rather than answering that the pod or a NAD is
    gone), the state is marked `delPending`: see `_settle_pending`.
    """
    who = f"container {req.container_id} (pod {pod or '?'})"
    attachments = list(known)
    if not any(a["ifname"] == req.ifname for a in attachments):
        try:
            primary = planning.plan_attachments(resolve_cluster_network(conf, kube), req.ifname,
                                                conf.runtime_config, [])
            attachments.insert(0, {**_state_of(req, conf, pod, Plan(primary, {}, None))
                                   ["attachments"][0], "attempted": True, "fromConfig": True})
        except (delegates.DelegateError, KubeError, CniError) as e:
            log.error("%s: the cluster default network %s cannot be read either: %s", who,
                      conf.cluster_network, e)
    state = {**_state_of(req, conf, pod, Plan([], {}, None)), "attachments": attachments}
    if isinstance(cause, ApiUnavailable):
        state["delPending"] = {"since": since or time.time(), "reason": cause.msg}
    log.log(logging.ERROR if lost or "delPending" in state else logging.WARNING,
            "%s: %s and the plan cannot be rebuilt (%s); DEL releases only what it knows: %s; "
            "any other attachment of the pod is unknown and NOT released", who,
            "saved state damaged" if lost else
            "no saved state (its ADD failed or never ran, or the state was lost)",
            cause.msg, _names(attachments))
    return state


def _settle_pending(req: CniRequest, pod: PodRef | None, state: dict, store: StateStore) -> None:
    """After a best-effort DEL while the API server could not be asked: within
    DEL_RETRY_WINDOW of the first such DEL, save what is known and raise CniError 11,
    so that the runtime retries until the API answers and every attachment can be
    released; after it, log what is given up and return (DEL succeeds)."""
    pending = state["delPending"]
    waited = time.time() - pending["since"]
    done = _names(state["attachments"])
    if waited < DEL_RETRY_WINDOW:
        store.save(req.container_id, state)
        raise CniError(TRY_AGAIN, f"pod {pod or '?'} (container {req.container_id}): DEL "
                       f"incomplete: released {done}, but without saved state the pod's other "
                       f"attachments are known only to the API server, which cannot be asked "
                       f"({pending['reason']}); retry: DEL gives up on them "
                       f"{DEL_RETRY_WINDOW - waited:.0f} s from now")
    log.error("container %s (pod %s): the API server could not be asked for %.0f s (%s); DEL "
              "gives up: released %s; any other attachment of the pod is NOT released and its "
              "addresses stay allocated", req.container_id, pod or "?", waited,
              pending["reason"], done)


# ---------------------------------------------------------------- CHECK

def cmd_check(req: CniRequest, conf: NetConf) -> None:
    """CHECK every attachment with its saved result as prevResult (CNI SPEC.md "CHECK").

    Delegates whose own cniVersion predates CHECK (< 0.4.0) are skipped.
    Raises CniError: netattach's cniVersion below 0.4.0, no saved state, or the
    first failing check.
    """
    pod = pod_ref(req)
    if not version_at_least(conf.cni_version, "0.4.0"):
        raise CniError(INCOMPATIBLE_VERSION, f"CHECK needs cniVersion 0.4.0 or later, "
                       f"the configuration says {conf.cni_version}")
    store = StateStore(conf.cni_dir)
    try:
        with store.lock(req.container_id):
            state = store.load(req.container_id)
    except StateError as e:
        raise _fail(pod, None, e) from None
    if state is None:
        raise CniError(UNKNOWN_CONTAINER, f"pod {pod or '?'}: no saved state for container "
                       f"{req.container_id}: it was never added on this node")
    for att in state["attachments"]:
        try:
            config = saved_config(att)
            if not version_at_least(config.cni_version, "0.4.0"):
                # CHECK does not exist before 0.4.0 (SPEC.md); such a delegate has nothing to check.
                log.debug("CHECK skipped for %s: cniVersion %s", att["network"], config.cni_version)
                continue
            chain.check(config, runtime_conf(req, conf, att), att.get("result"))
        except CniError as e:
            raise _fail(pod, f"{att['network']} (interface {att['ifname']})", e) from None


# ---------------------------------------------------------------- STATUS

def cmd_status(req: CniRequest, conf: NetConf) -> None:
    """STATUS: forward to the cluster default network (CNI SPEC.md "STATUS", 1.1.0).

    Readiness of the node's pod networking is the cluster default network's;
    its error code (50 / 51) reaches the runtime unchanged. No API request.
    Raises CniError.
    """
    if conf.readiness_indicator_file and not os.path.exists(conf.readiness_indicator_file):
        raise CniError(NOT_AVAILABLE, f"cluster default network not ready: readiness indicator file "
                       f"{conf.readiness_indicator_file} does not exist")
    try:
        _, config = resolve_cluster_network(conf, None)
    except (delegates.DelegateError, CniError) as e:
        raise _fail(None, f"{conf.cluster_network} (cluster default network)", e,
                    code=NOT_AVAILABLE) from None
    chain.status(config, chain.RuntimeConf(
        container_id="", netns="", ifname="", args=(), capability_args={}, cni_path=req.path,
        bin_dirs=(conf.bin_dir,), timeout=conf.delegate_timeout))
