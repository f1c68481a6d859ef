"""`netattach validate --cluster`: the migration pre-flight. Reads a running cluster's
NetworkAttachmentDefinitions and pods with the operator's kubeconfig and lists what would
behave differently once netattach, not Multus, attaches them (docs/migration.md, "These
are different"; docs/tools.md says how to run it).

The checks are the plugin's own code, run on the listed objects instead of an ADD's
reads, so the pre-flight agrees with what an ADD will do: the selection through
`selection.parse_network_selection` (§4.1), `namespaceIsolation` through
`networks.check_isolation`, the caps through `networks.check_caps`, a NAD's config through
`delegates.config_from_nad` and `policy.check_delegate` (allowedPluginTypes, no
meta-plugin), capabilities through `plan.runtime_args_for`, interface names through
`plan.interface_names`, `default-route` through `routes.plan_default_routes`, the node's
conf through `netconf.parse_netconf`. The messages are the plugin's own, with what Multus
did instead where it differs.

Findings (`Finding`): severity `error` when the pod would fail to start under netattach
(its ADD fails), `warning` when it would start but behave differently (or a NAD or conf
key that any pod using it would feel), `note` for information (what cannot be checked
from the cluster, what stays as in Multus but may surprise). Each names the object (the
pod, the NAD, or the conf file), the key and what changes.

Which pods: those with a `k8s.v1.cni.cncf.io/networks` or
`v1.multus-cni.io/default-network` annotation, not hostNetwork (no CNI call), not
finished (phase Succeeded or Failed: never started again); the others are passed over
after a look at their annotations. Pods of one controller (ownerReference with
controller true) with the same annotations are checked once; the finding names the
first and counts the others (`Finding.also`).

Pure but for `read_cluster` (the LISTs) and `run`: `check_cluster` takes the objects and
the conf and returns findings, for tables of cases.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml

from ..cni import invoke
from ..cni.chain import NetworkConfig
from ..cni.errors import CniError
from ..commands import networks
from ..node.devices import RESOURCE_NAME_ANNOTATION, nad_resource_name
from ..spec import delegates, plan, policy, routes, selection
from ..spec.netconf import DEFAULT_GLOBAL_NAMESPACES, NetConf, parse_netconf
from ..spec.pod import PodRef
from .shared import CHUNK_SIZE, ERROR, NOTE, WARNING, plugin_types, summary

__all__ = ["Finding", "ConfError", "load_conf", "check_conf", "check_nads", "check_pod",
           "check_cluster", "read_cluster", "run"]


RUNTIME_IFNAME = "eth0"
"""The CNI_IFNAME kubelet gives the cluster default network (plan.plan_attachments)."""

OLD_STATUS_ANNOTATION = "k8s.v1.cni.cncf.io/networks-status"
"""The deprecated network-status annotation, which netattach does not write."""

SHOWN_ALSO = 5
"""How many of the other pods of a group the text line names (JSON has them all)."""

# The keys of a JSON selection element Multus reads (its NetworkSelectionElement's json
# tags, net-attach-def-client types.go), all of which netattach reads too. Go's JSON
# decoder matches a key to them case-insensitively; netattach's parser does not
# (selection.py, "Unknown keys").
ELEMENT_KEYS = ("name", "namespace", "ips", "mac", "infiniband-guid", "interface",
                "interfaceRequest", "portMappings", "bandwidth", "deviceID", "cni-args",
                "default-route", "ipam-claim-reference")

# Selection element attribute -> its key in the annotation (§4.1.2.1).
_KEY_OF = {"ips": "ips", "mac": "mac", "port_mappings": "portMappings",
           "bandwidth": "bandwidth", "infiniband_guid": "infiniband-guid"}


class ConfError(Exception):
    """The conf given with --conf cannot be read or is refused by netattach (exit 2)."""


@dataclass(frozen=True)
class Finding:
    """One difference found.

    kind: "Pod", "NetworkAttachmentDefinition" or "NetConf" (the --conf file);
    namespace: the object's (None for the conf); name: the object's (the conf's path);
    key: the field, e.g. `metadata.annotations[k8s.v1.cni.cncf.io/networks][0].ips`,
    `spec.config`, `logFile` (None for the object as a whole); severity: ERROR, WARNING
    or NOTE; message: what changes; also: the names of the other pods of the same
    controller with the same annotations, which the same finding holds for.
    """
    kind: str
    namespace: str | None
    name: str
    key: str | None
    severity: str
    message: str
    also: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: every field under its own name, `also` a list."""
        out = dataclasses.asdict(self)
        out["also"] = list(self.also)
        return out

    def text(self) -> str:
        """`Kind ns/name: severity: key: message (also N other pods: a, b, ...)`."""
        ref = f"{self.namespace}/{self.name}" if self.namespace else self.name
        key = f"{self.key}: " if self.key else ""
        line = f"{self.kind} {ref}: {self.severity}: {key}{self.message}"
        if self.also:
            shown = ", ".join(self.also[:SHOWN_ALSO])
            more = len(self.also) - SHOWN_ALSO
            line += (f" (also {len(self.also)} other pod{'s' if len(self.also) > 1 else ''} "
                     f"of the same controller and annotations: {shown}"
                     + (f" and {more} more" if more > 0 else "") + ")")
        return line


# ---------------------------------------------------------------- the node's conf

CONF_DEFAULTS = {"type": "netattach", "clusterNetwork": "(the node's)"}
"""What a conf given as keys only (the ConfigMap's netconf.yaml, deploy/components/netconf)
lacks to be parsed: the installer writes `type` and `clusterNetwork` itself."""


def load_conf(data: bytes, label: str) -> NetConf:
    """The conf netattach would run with, from the content of a --conf file: a conflist
    (00-netattach.conflist from a node, or Multus' own: its entry whose type is a
    delegating meta-plugin's), a single conf (00-multus.conf included), or a YAML/JSON
    mapping of conf keys (netconf.yaml of deploy/components/netconf), through
    `netconf.parse_netconf` with CONF_DEFAULTS for what is missing. `label`: the path,
    for messages. Raises ConfError naming the file and the key refused."""
    try:
        doc = yaml.load(data, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as e:
        raise ConfError(f"conf {label}: neither JSON nor YAML: {' '.join(str(e).split())}") \
            from None
    if not isinstance(doc, dict):
        raise ConfError(f"conf {label}: must be a conf, a conflist or a mapping of conf keys, "
                        f"not {type(doc).__name__}")
    if isinstance(doc.get("plugins"), list):
        entries = [p for p in doc["plugins"]
                   if isinstance(p, dict) and p.get("type") in invoke.META_PLUGIN_TYPES]
        if not entries:
            raise ConfError(f"conf {label}: a conflist without a netattach or multus entry "
                            f"(a plugin whose type is one of "
                            f"{', '.join(sorted(invoke.META_PLUGIN_TYPES))})")
        doc = {**({"cniVersion": doc["cniVersion"]} if "cniVersion" in doc else {}),
               **entries[0]}
    try:
        return parse_netconf({**CONF_DEFAULTS, **doc})
    except CniError as e:
        raise ConfError(f"conf {label}: {e}") from None


def check_conf(conf: NetConf, label: str, nads: dict[tuple[str, str], _Nad]) -> list[Finding]:
    """The differences a node's conf itself makes (docs/migration.md): a Multus `type`,
    the keys netattach reads but does not honour, `logFile` rotation, the auxiliary
    chain, and `defaultNetworks` naming a NAD that is missing or unusable (every pod
    outside systemNamespaces would fail). `label`: the conf's path."""
    out: list[Finding] = []

    def report(severity: str, key: str | None, message: str) -> None:
        out.append(Finding("NetConf", None, label, key, severity, message))

    raw = conf.raw
    if raw.get("type") in ("multus", "multus-shim"):
        report(NOTE, "type", f"{raw['type']!r}: in a hand-written conf it becomes "
               "\"netattach\"; `netattach install` writes its own conflist")
    for key, why in conf.unhonoured.items():
        report(WARNING, key, f"read but not honoured ({why}); netattach logs a WARNING "
               "naming it at every call")
    if conf.log_file and conf.log_options is None:
        report(WARNING, "logFile", "Multus rotates it even without logOptions (100 MB, 5 "
               "backups, 5 days, gzip); netattach only with logOptions: add \"logOptions\": {} "
               "to keep Multus' behaviour")
    if conf.auxiliary_chain:
        report(NOTE, "auxiliaryCNIChainName", "runs as in Multus, without its passthru binary")
    for i, element in enumerate(_default_elements(conf)):
        nad = nads.get((element.namespace, element.name))
        problem = _nad_problem(nad, element)
        if problem:
            report(ERROR, f"defaultNetworks[{i}]", f"{problem}: every pod outside "
                   f"systemNamespaces ({', '.join(conf.system_namespaces)}) fails its ADD")
    return out


def _default_elements(conf: NetConf) -> list[selection.NetworkSelectionElement]:
    """defaultNetworks' elements (parse_netconf checked they parse)."""
    if not conf.default_networks:
        return []
    return selection.parse_network_selection(",".join(conf.default_networks),
                                             conf.multus_namespace)


# ---------------------------------------------------------------- NADs

@dataclass
class _Nad:
    """A NAD of the cluster as netattach reads it: its config (None when it has no
    spec.config, or an invalid one), why every pod selecting it would fail (None when
    it would not), and its `k8s.v1.cni.cncf.io/resourceName` (None without one)."""
    config: NetworkConfig | None
    problem: str | None
    resource_name: str | None
    on_disk: bool = False


def check_nads(objects: Iterable[dict[str, Any]], conf: NetConf
               ) -> tuple[dict[tuple[str, str], _Nad], list[Finding]]:
    """Each NAD read as an ADD reads it: spec.config through delegates.config_from_nad
    (JSON, a conf or conflist, a supported cniVersion, §3.4.2 name), then
    policy.check_delegate as a tenant's config (no delegating meta-plugin, the conf's
    allowedPluginTypes). Returns ((namespace, name) -> _Nad, findings): a warning for a
    NAD every pod selecting it would fail on (the pods get the error), a note for one
    without spec.config (its config is on the nodes' disk, not checkable here)."""
    nads: dict[tuple[str, str], _Nad] = {}
    out: list[Finding] = []
    for obj in objects:
        meta = obj.get("metadata") or {}
        ns, name = meta.get("namespace") or "", meta.get("name") or ""
        if not (isinstance(ns, str) and isinstance(name, str) and name):
            continue

        def report(severity: str, key: str | None, message: str, ns: str = ns,
                   name: str = name) -> None:
            out.append(Finding("NetworkAttachmentDefinition", ns, name, key, severity, message))

        resource = nad_resource_name(obj)
        try:
            config = delegates.config_from_nad(obj, default_name=name)
        except CniError as e:
            nads[(ns, name)] = _Nad(None, e.msg, resource)
            report(WARNING, "spec.config", f"{e.msg}: every pod selecting it fails its ADD")
            continue
        if config is None:
            nads[(ns, name)] = _Nad(None, None, resource, on_disk=True)
            report(NOTE, "spec.config", "absent: netattach, like Multus, uses the CNI config "
                   f"named {name!r} on each node's disk (confDir: {' then '.join(conf.conf_dirs)}"
                   "), which the cluster does not show; a node without it fails the ADD")
            continue
        try:
            policy.check_delegate(config, conf, tenant=True)
        except CniError as e:
            nads[(ns, name)] = _Nad(config, e.msg, resource)
            report(WARNING, "spec.config", f"{e.msg}: every pod selecting it fails its ADD "
                   "(Multus runs it)")
            continue
        nads[(ns, name)] = _Nad(config, None, resource)
    return nads, out


def _nad_problem(nad: _Nad | None, element: selection.NetworkSelectionElement) -> str | None:
    """Why the element's NAD fails the ADD (None when it does not): missing, or refused."""
    if nad is None:
        return f"NetworkAttachmentDefinition {element.ref} not found"
    if nad.problem:
        return (nad.problem if f"NetworkAttachmentDefinition {element.ref}" in nad.problem
                else f"NetworkAttachmentDefinition {element.ref}: {nad.problem}")
    return None


# ---------------------------------------------------------------- pods

def _annotations(pod: dict[str, Any]) -> dict[str, Any]:
    meta = pod.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    return annotations if isinstance(annotations, dict) else {}


def selects(pod: dict[str, Any]) -> bool:
    """True when the pod is one the pre-flight checks: it has a networks or
    default-network annotation, is not hostNetwork (no CNI call) and has not finished
    (phase Succeeded or Failed)."""
    annotations = _annotations(pod)
    if not any(str(annotations.get(a) or "").strip() for a in
               (selection.NETWORKS_ANNOTATION, selection.DEFAULT_NETWORK_ANNOTATION)):
        return False
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    if isinstance(spec, dict) and spec.get("hostNetwork") is True:
        return False
    return not (isinstance(status, dict) and status.get("phase") in ("Succeeded", "Failed"))


def check_pod(pod: dict[str, Any], nads: dict[tuple[str, str], _Nad],
              conf: NetConf) -> list[Finding]:
    """The findings of one pod (`selects` it): its networks annotation parsed, capped,
    isolated, named and routed as the ADD does, each element against its NAD (found,
    usable, capabilities, deviceID, keys Multus read differently), its default-network
    annotation, and the deprecated networks-status annotation. `nads`: check_nads'."""
    meta = pod.get("metadata") or {}
    ref = PodRef(str(meta.get("namespace") or ""), str(meta.get("name") or ""),
                 str(meta.get("uid") or ""))
    out: list[Finding] = []
    akey = "metadata.annotations"

    def report(severity: str, key: str | None, message: str) -> None:
        out.append(Finding("Pod", ref.namespace, ref.name, key, severity, message))

    annotations = _annotations(pod)
    value = annotations.get(selection.NETWORKS_ANNOTATION)
    if isinstance(value, str) and value.strip():
        _check_networks(value, f"{akey}[{selection.NETWORKS_ANNOTATION}]", ref, nads, conf,
                        report)
    value = annotations.get(selection.DEFAULT_NETWORK_ANNOTATION)
    if isinstance(value, str) and value.strip():
        _check_default_network(value, f"{akey}[{selection.DEFAULT_NETWORK_ANNOTATION}]", ref,
                               nads, conf, report)
    if OLD_STATUS_ANNOTATION in annotations:
        report(NOTE, f"{akey}[{OLD_STATUS_ANNOTATION}]", "deprecated, and netattach does not "
               "write it: whatever reads it should read "
               "k8s.v1.cni.cncf.io/network-status, which netattach writes as Multus does")
    return out


def _element_key(key: str, index: int | None, field: str | None) -> str:
    return key + (f"[{index}]" if index is not None else "") + (f".{field}" if field else "")


def _check_networks(value: str, key: str, pod: PodRef, nads: dict[tuple[str, str], _Nad],
                    conf: NetConf, report: Any) -> None:
    """The networks annotation, as networks.build_plan reads it."""
    try:
        own = selection.parse_network_selection(value, pod.namespace)
    except selection.SelectionError as e:
        report(ERROR, _element_key(key, e.index, e.key),
               f"{e}: the ADD fails (code 7); Multus may have read it (its comma format "
               "passes empty items on, its JSON keys match in any case)")
        return
    _check_element_keys(value, key, report)
    defaults = [] if pod.namespace in conf.system_namespaces else _default_elements(conf)
    elements = defaults + own
    try:
        networks.check_caps(conf, pod, elements, len(defaults))
    except CniError as e:
        report(ERROR, key, f"{e.msg}: the ADD fails (code 7); Multus has no such cap")
    try:
        ifnames = plan.interface_names(RUNTIME_IFNAME, elements)
    except CniError as e:
        bad = next(i for i in range(len(elements)) if _ifnames_fail(elements[:i + 1]))
        where = (_element_key(key, own[bad - len(defaults)].index, "interface")
                 if bad >= len(defaults) else key)
        report(ERROR, where, f"{e.msg}: the ADD fails (code 7); the runtime's "
               f"{RUNTIME_IFNAME} is the cluster default network's")
        return
    try:
        routes.plan_default_routes([(RUNTIME_IFNAME, None, "the cluster default network")]
                                   + [(n, e.default_route, e.ref)
                                      for n, e in zip(ifnames, elements)])
    except CniError as e:
        at = next((el.index for el in own if el.default_route is not None), None)
        report(ERROR, _element_key(key, at, "default-route"), f"{e.msg}: the ADD fails")
    failed: set[str] = set()  # a NAD that fails is named once (§4.2: a,a is fine)
    for element in own:
        _check_element(element, _element_key(key, element.index, None), pod, nads, conf,
                       report, failed)


def _ifnames_fail(elements: list[selection.NetworkSelectionElement]) -> bool:
    try:
        plan.interface_names(RUNTIME_IFNAME, elements)
    except CniError:
        return True
    return False


def _check_element(element: selection.NetworkSelectionElement, ekey: str, pod: PodRef,
                   nads: dict[tuple[str, str], _Nad], conf: NetConf, report: Any,
                   failed: set[str]) -> None:
    """One element of the pod's networks annotation against the conf and its NAD;
    `failed`: the NADs of the pod already reported missing or refused (added to)."""
    try:
        networks.check_isolation(conf, pod, element, selection.NETWORKS_ANNOTATION)
    except CniError as e:
        report(ERROR, f"{ekey}.namespace", f"{e.msg}: the ADD fails (code 7), as in Multus "
               "with the same namespaceIsolation and globalNamespaces")
        return
    if (conf.namespace_isolation and element.namespace != pod.namespace
            and "globalNamespaces" not in conf.raw
            and element.namespace in DEFAULT_GLOBAL_NAMESPACES):
        report(NOTE, f"{ekey}.namespace", f"{element.ref}: allowed under namespaceIsolation "
               f"only because globalNamespaces defaults to {', '.join(DEFAULT_GLOBAL_NAMESPACES)}"
               ", as in Multus")
    nad = nads.get((element.namespace, element.name))
    problem = _nad_problem(nad, element)
    if problem or nad is None:
        if element.ref not in failed:
            failed.add(element.ref)
            report(ERROR, f"{ekey}.name", f"{problem}: the ADD fails")
        return
    asked = [attr for attr, _, section in plan.RUNTIME_KEYS
             if section and getattr(element, attr) is not None]
    if nad.config is not None:
        for attr in asked:  # one at a time: every missing capability is named
            others: dict[str, Any] = {a: None for a, _, _ in plan.RUNTIME_KEYS if a != attr}
            only = dataclasses.replace(element, **others)
            try:
                plan.runtime_args_for(only, nad.config)
            except CniError as e:
                report(ERROR, f"{ekey}.{_KEY_OF[attr]}", f"{e.msg}: the ADD fails (code 7); "
                       "Multus ignored the request")
    elif asked:
        report(NOTE, ekey, f"capabilities for {', '.join(_KEY_OF[a] for a in asked)} not "
               f"checked: {element.ref} has its config on the nodes' disk; without the "
               "capability the ADD fails, where Multus ignored the request")
    if element.device_id is not None:
        if nad.resource_name is None:
            report(ERROR, f"{ekey}.deviceID", f"{element.ref} has no "
                   f"{RESOURCE_NAME_ANNOTATION} annotation, so the kubelet allocates the pod no "
                   "device of it and the deviceID cannot be verified: the ADD fails (code 7); "
                   "Multus passed it to the plugin unchecked")
        else:
            report(WARNING, f"{ekey}.deviceID", f"used only when the kubelet allocated the pod "
                   f"device {element.device_id!r} for {nad.resource_name}, else the ADD fails "
                   "(code 7); Multus ignored it (docs/selection.md)")


def _check_element_keys(value: str, key: str, report: Any) -> None:
    """Keys of JSON elements that Multus read and netattach does not: a known key in
    another case (Go's decoder matches keys case-insensitively)."""
    if not value.lstrip().startswith("["):
        return
    try:
        items = json.loads(value)
    except ValueError:
        return
    lower = {k.lower(): k for k in ELEMENT_KEYS}
    for i, item in enumerate(items if isinstance(items, list) else []):
        for k in item if isinstance(item, dict) else ():
            if not isinstance(k, str) or k in ELEMENT_KEYS or "." in k:
                continue
            known = lower.get(k.lower())
            if known is not None and known not in item:
                report(WARNING, f"{key}[{i}].{k}", f"Multus read it as {known!r} (Go's JSON "
                       f"decoder matches keys in any case); netattach ignores it: write "
                       f"{known!r}")


def _check_default_network(value: str, key: str, pod: PodRef,
                           nads: dict[tuple[str, str], _Nad], conf: NetConf,
                           report: Any) -> None:
    """Multus' default-network annotation, as networks._pod_default_network reads it."""
    try:
        elements = selection.parse_network_selection(value, conf.multus_namespace)
    except selection.SelectionError as e:
        report(ERROR, _element_key(key, e.index, e.key), f"{e}: the ADD fails (code 7)")
        return
    if len(elements) != 1:
        report(ERROR, key, f"must name exactly one network, not {len(elements)}: the ADD fails "
               "(code 7)")
        return
    element = elements[0]
    try:
        networks.check_isolation(conf, pod, element, selection.DEFAULT_NETWORK_ANNOTATION)
    except CniError as e:
        report(ERROR, key, f"{e.msg}: the ADD fails (code 7); Multus does not apply "
               "namespaceIsolation to this annotation (docs/selection.md)")
        return
    problem = _nad_problem(nads.get((element.namespace, element.name)), element)
    if problem:
        report(ERROR, key, f"{problem}: the ADD fails")


# ---------------------------------------------------------------- the whole cluster

@dataclass
class _Group:
    """Pods checked once: the first pod's findings hold for the others."""
    findings: list[Finding]
    also: list[str] = field(default_factory=list)


def _group_key(pod: dict[str, Any]) -> tuple[Any, ...] | None:
    """(namespace, controller UID, annotations read) of a pod with a controller, None
    for a pod without one (checked alone)."""
    meta = pod.get("metadata") or {}
    owner = next((o for o in meta.get("ownerReferences") or []
                  if isinstance(o, dict) and o.get("controller") is True), None)
    if owner is None:
        return None
    a = _annotations(pod)
    return (meta.get("namespace"), owner.get("uid"),
            *(str(a.get(k)) for k in (selection.NETWORKS_ANNOTATION,
                                      selection.DEFAULT_NETWORK_ANNOTATION)),
            OLD_STATUS_ANNOTATION in a)


def check_cluster(nad_objects: Iterable[dict[str, Any]], pods: Iterable[dict[str, Any]],
                  conf: NetConf, conf_label: str | None = None) -> tuple[list[Finding], int]:
    """All findings: the conf's (`conf_label` its path; None: netattach's defaults, no
    conf findings), the NADs', then the pods' in the order listed (the pods of a group
    once). Returns (findings, number of pods checked). Never raises for any object."""
    nads, nad_findings = check_nads(nad_objects, conf)
    out = check_conf(conf, conf_label, nads) if conf_label is not None else []
    out += nad_findings
    groups: dict[Any, _Group] = {}
    order: list[_Group] = []
    checked = 0
    for pod in pods:
        if not selects(pod):
            continue
        checked += 1
        gkey = _group_key(pod)
        if gkey is not None and gkey in groups:
            groups[gkey].also.append(str((pod.get("metadata") or {}).get("name")))
            continue
        group = _Group(check_pod(pod, nads, conf))
        order.append(group)
        if gkey is not None:
            groups[gkey] = group
    for group in order:
        out += [dataclasses.replace(f, also=tuple(group.also)) for f in group.findings]
    return out, checked


# ---------------------------------------------------------------- reading the cluster

def read_cluster(kube: Any, namespace: str | None, chunk: int = 500
                 ) -> tuple[list[dict[str, Any]], Iterator[dict[str, Any]]]:
    """(every NAD of the cluster, the pods of `namespace` or of all namespaces (None) as
    an iterator over the pages of a paginated LIST of `chunk` objects a page:
    kube.reads.ObjectReads.list_pages). Only a page of pods is held at a time.
    Raises KubeError (from the NAD LIST at once, from the pods' while iterated)."""
    from ..kube.reads import NAD_GROUP, NAD_PLURAL, NAD_VERSION
    nads = [n for page in kube.list_pages(f"/apis/{NAD_GROUP}/{NAD_VERSION}/{NAD_PLURAL}",
                                          "NetworkAttachmentDefinitions in all namespaces",
                                          f"{NAD_PLURAL}.{NAD_GROUP}", chunk) for n in page]
    path = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
    what = f"pods in namespace {namespace}" if namespace else "pods in all namespaces"
    return nads, (p for page in kube.list_pages(path, what, "pods", chunk) for p in page)


def settings(conf: NetConf) -> dict[str, Any]:
    """The conf's settings the pod findings depend on, as the summary shows them."""
    return {"namespaceIsolation": conf.namespace_isolation,
            "globalNamespaces": list(conf.global_namespaces),
            "multusNamespace": conf.multus_namespace,
            "allowedPluginTypes": (None if conf.allowed_plugin_types is None
                                   else sorted(conf.allowed_plugin_types)),
            "maxNetworksPerPod": conf.max_networks_per_pod,
            "maxSameNetworkPerPod": conf.max_same_network_per_pod,
            "defaultNetworks": list(conf.default_networks)}


CLUSTER_TIMEOUT = 300.0
"""Seconds all the pre-flight's API requests may take together (kube/session.py's
budget): a big cluster's pods are many pages."""


def run(args: argparse.Namespace) -> int:
    """`netattach validate --cluster`: findings on stdout (text, or JSON with --output
    json), a count on stderr. Returns 1 when a pod would fail (an error finding), 0
    otherwise, 2 when the conf or the cluster cannot be read (the message on stderr,
    401/403 explained)."""
    from ..kube.client import Kube, KubeError
    from .podstatus import kubeconfig_path
    label = args.conf
    try:
        if label is not None:
            with open(label, "rb") as fh:
                conf = load_conf(fh.read(), label)
        else:
            conf = parse_netconf(dict(CONF_DEFAULTS))
    except (OSError, ConfError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        print(f"netattach validate: --conf {label}: {reason}" if isinstance(e, OSError)
              else f"netattach validate: {reason}", file=sys.stderr)
        return 2
    allowed = plugin_types(args.allowed_plugin_types)
    if allowed is not None:
        conf = dataclasses.replace(conf, allowed_plugin_types=allowed)
    kube = Kube(kubeconfig_path(args.kubeconfig, os.environ), timeout=CLUSTER_TIMEOUT,
                rbac=None)
    try:
        nads, pods = read_cluster(kube, args.namespace, args.chunk_size or CHUNK_SIZE)
        findings, checked = check_cluster(nads, pods, conf, label)
    except KubeError as e:
        hint = ""
        if e.status == 403:
            where = (f"in namespace {args.namespace}" if args.namespace
                     else "in all namespaces")
            hint = (f"\nnetattach validate: the kubeconfig's user needs `list` on pods "
                    f"{where} and on network-attachment-definitions.k8s.cni.cncf.io in all "
                    "namespaces")
        print(f"netattach validate: {e}{hint}", file=sys.stderr)
        return 2
    counts = summary(findings)
    used = settings(conf)
    if args.output == "json":
        json.dump({"findings": [f.to_dict() for f in findings],
                   "summary": {**counts, "nads": len(nads), "pods": checked,
                               "conf": label, "settings": used}}, sys.stdout,
                  indent=2, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        sys.stdout.write("".join(f.text() + "\n" for f in findings))
        shown = ", ".join(f"{k} {json.dumps(v)}" for k, v in used.items())
        print(f"netattach validate: {counts['errors']} error(s), {counts['warnings']} "
              f"warning(s), {counts['notes']} note(s); {len(nads)} "
              f"NetworkAttachmentDefinition(s), {checked} pod(s) with a selection checked; "
              f"judged with {shown} ({f'from {label}' if label else 'netattach defaults'})",
              file=sys.stderr)
    return 1 if counts["errors"] else 0
