"""Which networks a pod gets: the cluster default network and the selected networks,
resolved through the API seam and planned (spec §3.4 delegates, §4 selection, §6.2
ordering). ADD plans with it; DEL rebuilds a lost plan with it; STATUS and GC resolve
the cluster default network with it, without the API.

Every failure is a CniError (its kind carries the code) whose message names the pod
(`ns/name`), the network and the cause.
"""
from __future__ import annotations

import copy
import dataclasses
import logging
import os
from dataclasses import dataclass

from ..cni import invoke
from ..cni.chain import NetworkConfig
from ..cni.errors import CniError, ConfigError, TryAgain, UnknownContainer
from ..cni.names import is_dns1123_label
from ..cni.request import CniRequest
from ..kube.api import MIRROR_POD_ANNOTATION, PodApi, pods_cached, where
from ..node import devices
from ..node.state import SavedAttachment, SavedState
from ..spec import delegates, policy, selection
from ..spec import plan as planning
from ..spec.netconf import NetConf
from ..spec.pod import PodRef

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)
if TYPE_CHECKING:
    from typing import Any

    from ..spec import claims, routes

log = logging.getLogger("netattach")

POD_RETRY_DELAYS = (0.1, 0.2, 0.4, 0.8)
"""Backoff (seconds) of an ADD while its pod is not yet visible in the API (informer lag
on a fresh pod). DEL does not wait: a pod it cannot find is gone."""


class InvalidSelection(ConfigError):
    """The pod's selection annotation is invalid, or names what the pod may not use
    (code 7); the ADD records a Warning `InvalidNetworkSelection` event."""


class OverCap(InvalidSelection):
    """The pod has more secondary networks than a cap of netattach's configuration allows
    (`check_caps`; code 7, as every invalid selection)."""


class PodNotFound(TryAgain):
    """The API server answered that the pod does not exist (code 11: on ADD the pod may
    not be visible yet)."""


def is_own(config: NetworkConfig, conf: NetConf) -> bool:
    """True when a plugin of `config` is netattach itself: its own `type`, or either of
    its executables (invoke.OWN_TYPES) whatever the mode: a config file of netattach's in a
    conf dir, which is never the cluster default network."""
    own = invoke.OWN_TYPES | {conf.raw.get("type", "netattach")}
    return any(p.get("type") in own for p in config.plugins)


def resolve_cluster_network(conf: NetConf, api: PodApi | None) -> tuple[str, NetworkConfig]:
    """(status name, delegate) of the cluster default network, from `clusterNetwork`.

    An absolute path is a conf/conflist file or a directory (its first config in
    the runtime's order, delegates.list_conf_files, skipping netattach's own);
    otherwise the `name` of a config in `conf_dirs`; otherwise a
    NetworkAttachmentDefinition `[ns/]name` (namespace defaults to `multusNamespace`).
    Disk is tried before the API so that the common case needs no request.
    Raises ConfigError (DelegateError) and KubeError (11).
    """
    value = conf.cluster_network
    if value.startswith("/"):
        if os.path.isdir(value):
            for path in delegates.list_conf_files(value):
                try:
                    config = delegates.load_conf_file(path)
                except CniError as e:
                    log.warning("skipping %s: %s", path, e)
                    continue
                if not is_own(config, conf):
                    return config.name, config
            raise delegates.DelegateError(value, f"no CNI config for the cluster default "
                                                 f"network in {value}")
        config = delegates.load_conf_file(value)
        return config.name, config
    on_disk = delegates.find_on_disk(conf.conf_dirs, value)
    if on_disk is not None and not is_own(on_disk, conf):
        return on_disk.name, on_disk
    ns, _, name = value.rpartition("/")
    ns = ns or conf.multus_namespace
    if not (is_dns1123_label(ns) and is_dns1123_label(name)):
        raise delegates.DelegateError(value, f"cluster default network {value!r} is neither an "
                                      f"absolute path, nor the name of a config in "
                                      f"{' or '.join(conf.conf_dirs)}, nor a "
                                      "NetworkAttachmentDefinition [namespace/]name of "
                                      "DNS-1123 labels (§3.3)")
    if api is None:
        raise delegates.DelegateError(value, f"cluster default network {value!r} is neither a "
                                      f"file nor a config in {' or '.join(conf.conf_dirs)}, "
                                      "and no pod API access")
    return f"{ns}/{name}", delegates.resolve_delegate(api.get_nad(ns, name), ns, name,
                                                      conf.conf_dirs)


def auxiliary_chain(conf: NetConf, cluster_source: str) -> NetworkConfig | None:
    """Multus' auxiliary CNI chain (`auxiliaryCNIChainName`), or None when it is not set
    or its directory holds no plugin config.

    Its plugins are the `*.conf` files of `<dir>/<auxiliaryCNIChainName>/` (libcni's
    subdirectory plugin configs, in name order), where <dir> is the directory of the
    cluster default network's config file when clusterNetwork is a path, else the
    first conf dir. Its cniVersion is netattach's. Where Multus puts its `passthru`
    plugin first, netattach starts the chain from an empty prevResult (the same
    input, without a binary to install). Raises ConfigError (DelegateError).
    """
    name = conf.auxiliary_chain
    if not name:
        return None
    base = os.path.dirname(cluster_source) if cluster_source.startswith("/") else conf.conf_dir
    source = os.path.join(base, name)
    plugins = delegates.side_plugins(base, name, source)
    if not plugins:
        log.debug("auxiliary CNI chain %s: no plugin config in %s", name, source)
        return None
    try:
        return NetworkConfig.from_dict({"cniVersion": conf.cni_version, "name": name,
                                        "plugins": plugins}, source)
    except CniError as e:
        raise delegates.DelegateError(source, f"auxiliary CNI chain {source}: {e}") from None


def empty_result(cni_version: str) -> dict[str, Any]:
    """The result Multus' passthru plugin prints, the start of an auxiliary chain."""
    return {"cniVersion": cni_version, "interfaces": [], "ips": [], "routes": [], "dns": {}}


def get_pod(api: PodApi, pod: PodRef, wait: bool) -> dict[str, Any]:
    """The pod. With `wait` (ADD) a pod not found is asked for again after each of
    POD_RETRY_DELAYS, the pauses counted against the API budget. Raises PodNotFound
    (11) when the API server says it does not exist, KubeError when it cannot be asked."""
    waited = 0.0
    for delay in (POD_RETRY_DELAYS if wait else ()) + (None,):
        obj = api.get_pod(pod.namespace, pod.name)
        if obj is not None:
            return obj
        if delay is None or not api.pause(delay):
            break
        waited += delay
    retried = f" (retried for {waited:.1f}s)" if wait else ""
    raise PodNotFound(f"pod {pod}: not found in the API server{retried}")


RUNTIME_POD_ANNOTATIONS = "io.kubernetes.cri.pod-annotations"
"""The capability under which containerd passes the sandbox's annotations, which the
kubelet copies from the pod, in runtimeConfig (containerd's CRI plugin, go-cni
WithCapability)."""
CONFIG_SOURCE_ANNOTATION = "kubernetes.io/config.source"


def runtime_pod_annotations(conf: NetConf, pod: PodRef | None) -> dict[str, str] | None:
    """The pod's annotations as the runtime passed them (runtimeConfig
    RUNTIME_POD_ANNOTATIONS, when netattach's conflist declares that capability), so
    ADD needs no pod GET (issue 11); None when they cannot stand in for the pod:
    absent or not a string map, no pod UID in CNI_ARGS (the network-status PATCH is
    for that UID only), or a static pod (its mirror pod has another UID: the GET
    finds that one)."""
    annotations = conf.runtime_config.get(RUNTIME_POD_ANNOTATIONS)
    if pod is None or not pod.uid or not isinstance(annotations, dict):
        return None
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in annotations.items()):
        return None
    if MIRROR_POD_ANNOTATION in annotations or \
            annotations.get(CONFIG_SOURCE_ANNOTATION, "api") != "api":
        return None
    return annotations


def _check_uid(pod: PodRef, obj: dict[str, Any]) -> None:
    meta = obj.get("metadata", {})
    if not pod.uid or MIRROR_POD_ANNOTATION in meta.get("annotations", {}):
        return  # static pods: the kubelet's UID differs from the mirror pod's
    if meta.get("uid") != pod.uid:
        raise UnknownContainer(f"pod {pod}: UID mismatch: the runtime asked for {pod.uid} but "
                               f"the API server has {meta.get('uid')} (pod was recreated)")


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
    default_network: the pod's `v1.multus-cni.io/default-network` annotation as read
      ("" for none), which hot-plug keeps (state.HotplugContext).
    """
    attachments: list[planning.Attachment]
    devices: dict[int, tuple[str, str]]
    default_route: routes.DefaultRoutePlan | None
    pod_uid: str = ""
    default_network: str = ""

    def saved(self, base: SavedState, attempted: bool = False,
              identity: bool = False) -> SavedState:
        """`base` (the container as the runtime named it) with every attachment of the
        plan, as ADD saves them before any child runs (`attempted` False) or as DEL
        takes a rebuilt plan (True: each may have been attached). `identity`: each
        element's attachment carries what hot-plug identifies it by
        (`saved_selection`)."""
        return base.with_attachments([
            saved_attachment(a, attempted, identity, self.devices.get(i))
            for i, a in enumerate(self.attachments)])


def saved_attachment(a: planning.Attachment, attempted: bool = False, identity: bool = False,
                     device: tuple[str, str] | None = None) -> SavedAttachment:
    """The SavedAttachment of the planned attachment `a` (Plan.saved: `attempted`,
    `identity`; `device`: (resource name, device ID) the kubelet allocated it, if any)."""
    return SavedAttachment(network=a.network, ifname=a.ifname, default=a.default,
                           source=a.config.source, config=a.config.raw,
                           capability_args=a.capability_args, attempted=attempted,
                           device=device, claim=a.claim.to_dict() if a.claim else None,
                           selection=saved_selection(a) if identity else None)


def saved_selection(attachment: planning.Attachment) -> dict[str, Any] | None:
    """SavedAttachment.selection of an attachment of a network selection element (None
    for the cluster default network, a claim's, the auxiliary chain's): whether the
    element named its interface, and its parameters (hotplug.parameters)."""
    if attachment.element is None:
        return None
    from ..spec.hotplug import parameters
    return {"requested": attachment.element.interface is not None,
            "params": parameters(attachment.element)}


def _with_device_id(config: NetworkConfig, device_id: str) -> NetworkConfig:
    """The delegate with `deviceID` set in every plugin's config, as Multus injects it
    (SR-IOV-style plugins read it there; runtimeConfig.deviceID carries it too)."""
    raw = copy.deepcopy(config.raw)
    for plugin in raw["plugins"] if config.is_list else [raw]:
        plugin["deviceID"] = device_id
    return NetworkConfig.from_dict(raw, config.source)


def _pod_default_network(conf: NetConf, pod: PodRef | None, api: PodApi | None,
                         annotations: dict[str, Any]) -> tuple[str, NetworkConfig] | None:
    """The pod's `v1.multus-cni.io/default-network` choice, replacing the cluster default
    network for this pod (Multus-compatible): exactly one network selection element,
    resolved in `multusNamespace` unless namespaced (as Multus does), and, with
    `namespaceIsolation`, allowed only as an element of the networks annotation is
    (check_isolation; Multus does not check this annotation). None when the pod has
    none. Raises InvalidSelection (7), before the NAD is read, for an invalid value or
    a NAD the pod may not use; CniError naming the pod and the network otherwise."""
    value = annotations.get(selection.DEFAULT_NETWORK_ANNOTATION, "").strip()
    if not value or api is None:
        return None
    try:
        elements = selection.parse_network_selection(value, conf.multus_namespace)
    except selection.SelectionError as e:
        raise InvalidSelection(f"pod {pod}: {selection.DEFAULT_NETWORK_ANNOTATION}: {e}") \
            from None
    if len(elements) != 1:
        raise InvalidSelection(f"pod {pod}: {selection.DEFAULT_NETWORK_ANNOTATION} must name "
                               f"exactly one network, not {len(elements)}")
    element = elements[0]
    if pod is not None:
        check_isolation(conf, pod, element, selection.DEFAULT_NETWORK_ANNOTATION)
    try:
        nad = api.get_nad(element.namespace, element.name)
        return element.ref, delegates.resolve_delegate(nad, element.namespace, element.name,
                                                       conf.conf_dirs)
    except CniError as e:
        raise e.within(where(pod, f"{element.ref} (pod's default network)")) from None


def check_isolation(conf: NetConf, pod: PodRef, element: selection.NetworkSelectionElement,
                    annotation: str) -> None:
    """`namespaceIsolation`: with it on, a network selection element of the pod's
    `annotation` (the `k8s.v1.cni.cncf.io/networks` or the
    `v1.multus-cni.io/default-network` one) may name a NetworkAttachmentDefinition in
    the pod's own namespace or in one of `globalNamespaces`, and no other. Off: any.

    The rule is Multus' (multus-cni pkg/k8sclient/k8sclient.go, GetNetworkDelegates:
    the element's namespace must be the pod's or one of the non-isolated
    `globalNamespaces`; no other exception, not `multusNamespace` either), one spec
    §7.4 allows ("Implementations are free to impose restrictions on which Network
    Attachment Definitions can be selected by a given Pod ... it must fail the pod
    network operation"). Multus applies it to the networks annotation only; netattach
    applies it to the default-network annotation too, whose unqualified name resolves
    in `multusNamespace` (so, isolated, it is refused unless that namespace is global
    or the pod's).

    Pure. Raises InvalidSelection (7) naming the pod, the annotation, the NAD and the
    rule.
    """
    if (not conf.namespace_isolation or element.namespace == pod.namespace
            or element.namespace in conf.global_namespaces):
        return
    allowed = ", ".join(dict.fromkeys((pod.namespace,) + conf.global_namespaces))
    raise InvalidSelection(
        f"pod {pod}: {annotation}: network {element.ref}: namespace isolation "
        f"(namespaceIsolation) forbids pods in namespace {pod.namespace} to use "
        f"NetworkAttachmentDefinitions in namespace {element.namespace} (allowed: the "
        f"pod's namespace and globalNamespaces: {allowed})")


def selected_elements(conf: NetConf, pod: PodRef | None, annotations: dict[str, Any] | None,
                      claims: int = 0) -> tuple[list[selection.NetworkSelectionElement], int]:
    """(the network selection elements of `defaultNetworks`, unless the pod is in a
    system namespace, then of the pod's `k8s.v1.cni.cncf.io/networks` annotation in
    `annotations` (None: the pod was not read); how many came from defaultNetworks).
    claims: how many networks the pod has from ResourceClaims, counted with the elements
    against `maxNetworksPerPod` (`check_caps`). Pure: nothing is read, nothing runs.
    Raises InvalidSelection (7) naming the pod: the annotation does not parse, or the
    pod is over a cap (OverCap)."""
    elements: list[selection.NetworkSelectionElement] = []
    if conf.default_networks and not (pod and pod.namespace in conf.system_namespaces):
        elements += selection.parse_network_selection(",".join(conf.default_networks),
                                                      conf.multus_namespace)
    n_defaults = len(elements)
    if pod is not None and annotations is not None:
        try:
            elements += selection.parse_network_selection(
                annotations.get(selection.NETWORKS_ANNOTATION, ""), pod.namespace)
        except selection.SelectionError as e:
            raise InvalidSelection(f"pod {pod}: {e}") from None
        check_caps(conf, pod, elements, n_defaults, claims)
    return elements, n_defaults


def check_caps(conf: NetConf, pod: PodRef, elements: list[selection.NetworkSelectionElement],
               n_defaults: int, claims: int = 0) -> None:
    """Refuse a pod whose secondary networks exceed a cap of `conf` (issue 21, "Bounded
    work per pod": pod annotations come from tenants and must not cost a node unbounded
    work), before any NetworkAttachmentDefinition is read and any child runs.

    elements: defaultNetworks' elements then the pod's (selected_elements), the first
    `n_defaults` of them from defaultNetworks; claims: the number of the pod's networks
    from ResourceClaims. The caps are counts (netconf.NetConf): `maxNetworksPerPod`
    bounds len(elements) + claims, `maxSameNetworkPerPod` how many elements select one
    NetworkAttachmentDefinition (selection.selection_counts; §4.2 allows repeats).
    Raises OverCap (7) whose message names the pod, the annotation, the conf key and
    its value."""
    total, own = len(elements) + claims, len(elements) - n_defaults
    cap = conf.max_networks_per_pod
    if total > cap:
        others = [f"{n} from {where_from}" for n, where_from in
                  ((n_defaults, "defaultNetworks"), (claims, "ResourceClaims")) if n]
        more = f" (and {' and '.join(others)}: {total} in all)" if others else ""
        raise OverCap(f"pod {pod}: {selection.NETWORKS_ANNOTATION} selects {own} "
                      f"network{'' if own == 1 else 's'}{more}; at most {cap} are allowed "
                      f"per pod (maxNetworksPerPod={cap} in netattach's configuration)")
    cap = conf.max_same_network_per_pod
    counts = selection.selection_counts(elements)
    for ref, count in counts.items():
        if count > cap:
            defaults = selection.selection_counts(elements[:n_defaults]).get(ref, 0)
            more = (f" (and defaultNetworks {defaults} time{'' if defaults == 1 else 's'}: "
                    f"{count} in all)" if defaults else "")
            raise OverCap(f"pod {pod}: {selection.NETWORKS_ANNOTATION} selects network {ref} "
                          f"{count - defaults} times{more}; at most {cap} attachments of one "
                          f"network are allowed per pod (maxSameNetworkPerPod={cap} in "
                          "netattach's configuration)")


def resolve_element(conf: NetConf, pod: PodRef | None, api: PodApi | None,
                    element: selection.NetworkSelectionElement, from_pod: bool = True,
                    resolved: dict[tuple[str, str], tuple[dict[str, Any] | None,
                                                          NetworkConfig]] | None = None
                    ) -> tuple[dict[str, Any] | None, NetworkConfig]:
    """(its NetworkAttachmentDefinition or None, the delegate) of one network selection
    element: `namespaceIsolation` for an element of the pod's annotation (`from_pod`;
    check_isolation), the NAD through the API seam, its config (spec §3.4). `resolved`:
    what this ADD read already, by (namespace, name), filled here: a NAD selected
    twice is read once. Raises InvalidSelection (7) for a NAD the pod may not use, and
    CniError naming the pod and the network."""
    if from_pod and pod is not None:
        check_isolation(conf, pod, element, selection.NETWORKS_ANNOTATION)
    key = (element.namespace, element.name)
    if resolved is not None and key in resolved:
        return resolved[key]
    try:
        nad = api.get_nad(element.namespace, element.name) if api else None
        config = delegates.resolve_delegate(nad, element.namespace, element.name,
                                            conf.conf_dirs)
    except CniError as e:
        raise e.within(where(pod, element.ref)) from None
    if resolved is not None:
        resolved[key] = (nad, config)
    return nad, config


def build_plan(req: CniRequest, conf: NetConf, pod: PodRef | None, api: PodApi | None,
               wait_for_pod: bool = True, executor: invoke.Executor | None = None) -> Plan:
    """Fetch what is needed (pod, NADs, devices) and plan all attachments.

    wait_for_pod: ADD waits for a pod not visible yet (get_pod); DEL does not: a pod
    the API server does not know raises PodNotFound at once (its selection is unknown).
    executor: where ADD will find the children: every delegate is checked with it
    (check_delegate) before any child runs.
    Raises CniError (its kind names the cause: KubeError when the API server could
    not be asked, ConfigError for configs, InvalidSelection for the selection, OverCap
    for a pod over a cap of `conf` (check_caps: its selection before any NAD is read,
    with its ResourceClaim networks once they are known), ...). No child runs here.
    """
    pod_obj: dict[str, Any] | None = None
    # The claims are in the pod's spec, which the runtime does not pass: with
    # resourceClaims, and in the node daemon (its cache holds whole pods), the pod is read.
    from_runtime = None if conf.resource_claims or pods_cached(api) \
        else runtime_pod_annotations(conf, pod)
    if pod and from_runtime is not None:
        log.debug("pod %s: annotations from the runtime (runtimeConfig %s); no pod GET",
                  pod, RUNTIME_POD_ANNOTATIONS)
        pod_obj = {"metadata": {"namespace": pod.namespace, "name": pod.name, "uid": pod.uid,
                                "annotations": from_runtime}}
    elif pod and api:
        try:
            pod_obj = get_pod(api, pod, wait_for_pod)
        except PodNotFound:
            raise
        except CniError as e:
            raise e.within(where(pod)) from None
        _check_uid(pod, pod_obj)
    annotations = (pod_obj or {}).get("metadata", {}).get("annotations") or {}
    default = _pod_default_network(conf, pod, api, annotations)
    if default is None:
        try:
            default = resolve_cluster_network(conf, api)
        except CniError as e:
            raise e.within(where(pod, f"{conf.cluster_network} (cluster default network)")) \
                from None

    secondaries: list[tuple[selection.NetworkSelectionElement, NetworkConfig]] = []
    resources: list[str | None] = []
    elements, n_defaults = selected_elements(conf, pod,
                                             annotations if pod_obj is not None else None)
    resolved: dict[tuple[str, str], tuple[dict[str, Any] | None, NetworkConfig]] = {}
    for i, element in enumerate(elements):  # a NAD selected twice is read once
        nad, config = resolve_element(conf, pod, api, element, i >= n_defaults, resolved)
        secondaries.append((element, config))
        resources.append(devices.nad_resource_name(nad) if nad else None)
        if element.device_id is not None and resources[-1] is None:
            raise _unverifiable_device(pod, element, nad)
    device_map = _assign_devices(conf, pod, resources, secondaries)
    claim_networks = _claim_networks(pod, pod_obj, api, conf.claim_config_sources,
                                     rebuild=not wait_for_pod)
    if pod is not None and claim_networks:  # the elements were checked alone above
        check_caps(conf, pod, elements, n_defaults, len(claim_networks))
    try:
        auxiliary = auxiliary_chain(conf, default[1].source)
        attachments = planning.plan_attachments(default, req.ifname, conf.runtime_config,
                                                secondaries, auxiliary, claim_networks)
        route_plan = None  # what plan_default_routes says when no element has the key
        if any(a.default_route is not None for a in attachments if not a.auxiliary):
            from ..spec import routes  # ipaddress and friends: only for a pod asking for it
            route_plan = routes.plan_default_routes(
                [(a.ifname, a.default_route, a.network) for a in attachments if not a.auxiliary])
    except CniError as e:
        raise e.within(where(pod)) from None
    for a in attachments:  # every delegate's plugins checked before any child runs
        try:
            policy.check_delegate(a.config, conf, policy.from_tenant(a.config, a.claim),
                                  executor, (conf.bin_dir, *req.path))
        except CniError as e:
            raise e.within(where(pod, a.network)) from None
    for index in device_map:
        attachments[index].capability_args[devices.DEVICE_INFO_CAPABILITY] = \
            devices.cni_device_info_path(req.container_id, attachments[index].ifname,
                                         conf.device_info_dir)
    return Plan(attachments, device_map, route_plan,
                (pod_obj or {}).get("metadata", {}).get("uid") or "",
                str(annotations.get(selection.DEFAULT_NETWORK_ANNOTATION, "")).strip())


def _claim_networks(pod: PodRef | None, pod_obj: dict[str, Any] | None,
                    api: PodApi | None, sources: str,
                    rebuild: bool = False) -> list[claims.ClaimNetwork]:
    """The pod's networks from DRA ResourceClaims (claims.resolve, with `sources` the
    node's claimConfigSources), [] for a pod without `spec.resourceClaims` (claims.py is
    not even imported then). Raises CniError naming the pod and the claim
    (claims.ClaimConfigRefused keeps its `refs`). `rebuild` (DEL without state): a
    claim that is gone or no longer valid (deallocated, reserved for no one, its config
    refused by claimConfigSources) is logged and left out, so the pod's other
    attachments are still released; an API that cannot be asked still raises
    (KubeError: DEL's retry window)."""
    if pod_obj is None or api is None or not (pod_obj.get("spec") or {}).get("resourceClaims"):
        return []
    from ..spec import claims  # only for a pod with claims
    try:
        return claims.resolve(pod_obj, api, sources)
    except (claims.ClaimError, claims.ClaimNotReady) as e:
        if not rebuild:
            raise e.within(where(pod)) from None
        log.warning("%s: DEL rebuilds the plan without the pod's claim networks, which are "
                    "not released: %s", where(pod), e)
        return []
    except CniError as e:
        raise e.within(where(pod)) from None


def _unverifiable_device(pod: PodRef | None, element: selection.NetworkSelectionElement,
                         nad: dict[str, Any] | None) -> InvalidSelection:
    """The refusal of an element's `deviceID` whose network has no device resource: with
    no `k8s.v1.cni.cncf.io/resourceName` on the NAD (or no NAD: a config on disk) the
    kubelet allocated the pod no device for it, so the choice cannot be checked, and a
    plugin given it (host-device's runtimeConfig.deviceID, an SR-IOV plugin's deviceID)
    would take whatever device of the node it names."""
    what = (f"its NetworkAttachmentDefinition {element.ref} has no "
            f"{devices.RESOURCE_NAME_ANNOTATION} annotation" if nad is not None
            else f"it is a config on disk, not a NetworkAttachmentDefinition with a "
                 f"{devices.RESOURCE_NAME_ANNOTATION} annotation")
    return InvalidSelection(
        f"{where(pod, element.ref)}: {selection.NETWORKS_ANNOTATION}: deviceID "
        f"{element.device_id!r} cannot be verified: {what}, so the kubelet allocated the "
        "pod no device for this network; a pod may only name a device allocated to it")


def _assign_devices(conf: NetConf, pod: PodRef | None, resources: list[str | None],
                    secondaries: list[tuple[selection.NetworkSelectionElement, NetworkConfig]],
                    ) -> dict[int, tuple[str, str]]:
    """Give each secondary whose NAD names a resource one of the pod's devices of it (in
    place, into its selection element and config): the element's own `deviceID` when it
    names one that the kubelet allocated to the pod for that resource
    (devices.reserve_chosen_devices), else the next one left, in plan order
    (devices.assign_device_ids). Returns attachment index (secondary position + 1) ->
    (resourceName, deviceID).

    Raises InvalidSelection (7) naming the pod, the network and the deviceID for a
    chosen device the pod was not allocated (or chosen twice); DeviceError (11) naming
    the resource when the kubelet cannot be asked (a chosen deviceID is then refused
    too, as unverifiable: its network and ID are named) or allocated too few devices.
    """
    if not any(resources) or pod is None:
        return {}
    chosen = [(r, e.device_id) if r and e.device_id is not None else None
              for r, (e, _) in zip(resources, secondaries)]
    try:
        allocated = devices.pod_devices(conf.pod_resources_socket, pod.namespace, pod.name,
                                        {r for r in resources if r}, conf.api_timeout)
    except CniError as e:
        named = [f"network {secondaries[i][0].ref} deviceID {c[1]!r}"
                 for i, c in enumerate(chosen) if c is not None]
        context = f"pod {pod}: devices"
        if named:
            context += (f": {selection.NETWORKS_ANNOTATION}: {', '.join(named)} cannot be "
                        "verified against the pod's allocation, so it is refused")
        raise e.within(context) from None
    try:
        left = devices.reserve_chosen_devices(chosen, allocated)
    except devices.DeviceNotAllocated as e:
        element = secondaries[e.index][0]
        raise InvalidSelection(f"{where(pod, element.ref)}: {selection.NETWORKS_ANNOTATION}: "
                               f"{e.msg}") from None
    try:
        ids = devices.assign_device_ids([None if c else r for r, c in zip(resources, chosen)],
                                        left)
    except CniError as e:
        raise e.within(f"pod {pod}: devices") from None
    out = {}
    for i, (resource, device_id, choice) in enumerate(zip(resources, ids, chosen)):
        if choice is not None:
            device_id = choice[1]
        if resource and device_id:
            element, config = secondaries[i]
            secondaries[i] = (dataclasses.replace(element, device_id=device_id),
                              _with_device_id(config, device_id))
            out[i + 1] = (resource, device_id)
    return out
