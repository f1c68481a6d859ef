"""`netattach validate FILE...`: lint NetworkAttachmentDefinitions and pod manifests
before `kubectl apply`, with the rules the plugin itself applies at ADD time.

Nothing here reimplements a rule of the plugin: a NAD's config goes through
`delegates.config_from_nad` (spec §3.4.1 step 1, §3.4.2, CNI SPEC.md section 1 via
`NetworkConfig.from_dict`), plugin types through `invoke.check_plugin_type`, network
names through `request.validate_network_name`, the selection annotation through
`selection.parse_network_selection` (§4.1), interface names through
`plan.interface_names` (§4.1.2.1.5), capabilities through `plan.runtime_args_for`
(§4.1.2.1.3.2 and siblings) and `default-route` through `routes.plan_default_routes`
(§4.1.2.1.9). The messages are the plugin's own where it has one. What is added on
top is what only a linter can say (a field the API server would drop, a NAD that is
not among the files, a gateway outside every subnet, a burst too small for a frame).

With --cluster, `run` hands over to tools/preflight.py, the migration pre-flight: the
running cluster's NADs and pods instead of files.

Input: files (`-` is stdin, a directory means the regular files in it named *.yaml,
*.yml and *.json, not its subdirectories), each a YAML stream of documents
separated by `---` (JSON is YAML). Documents checked:
NetworkAttachmentDefinition; Pod and the pod template of Deployment, StatefulSet,
DaemonSet, ReplicaSet, ReplicationController, Job, CronJob and PodTemplate;
ResourceClaim and ResourceClaimTemplate (DRA: their CNI DRA driver configs, `_lint_claim`);
DeviceClass (the CNI DRA driver configs in its spec.config, `_lint_device_class`);
the `items` of a `List` (or any `...List` kind). Other kinds are skipped; empty
documents too.

Findings: severity `error` (the API server refuses it, or the plugin fails the ADD),
`warning` (accepted, but probably not what was meant), `note` (information: e.g. a
selected NAD that is not in the files, which the cluster may have). Each has the
file, the 0-based document index in its file (`None` when the file itself failed),
the object's kind, name and namespace as written, and a key: the path of the field
(`spec.config.plugins[1].type`, `metadata.annotations[k8s.v1.cni.cncf.io/networks][0].mac`;
`items[2].` in front for List items).

Exit status: 0 without errors, 1 with errors, 2 when a file could not be read or on a
usage error (argparse's); a YAML syntax error is a finding (1), not a read failure.
A file that cannot be read, given or in a directory given, is an error finding at
that file naming the OS error, and the other files are still linted; so is an entry
of a directory that is not a regular file (a subdirectory, a FIFO, which would block,
a socket or a device), while a FIFO given by name (`<(kubectl get ...)`) is read.

The checks, by severity (source in brackets):

* error: YAML syntax; a document that is not an object or has no kind; NAD apiVersion
  other than k8s.cni.cncf.io/v1, a kind close to NetworkAttachmentDefinition [§3.1];
  metadata.name missing or not a DNS-1123 label (a dotted subdomain included: the API
  accepts it, no pod can select it), a namespace not a label [§3.3]; annotation
  values that are not strings [the API]; spec not an object, spec.config not a
  string, not JSON, not an object, not a valid conf/conflist (plugins empty, a plugin
  without type, capabilities not an object, unsupported cniVersion), a non-string
  name [delegates.config_from_nad, NetworkConfig.from_dict: §3.4.2, CNI SPEC.md 1];
  an invalid network name [request.validate_network_name]; a plugin or IPAM type that
  is not a plain file name, or outside --allowed-plugin-types, and any `type` naming a
  delegating meta-plugin [invoke.check_plugin_type, policy.plugin_types]. Pods: the
  networks annotation not parsing [selection, §4.1], a requested
  interface already used (eth0 included) [plan.interface_names, §4.1.2.1.5], a bad
  default-route [routes.plan_default_routes, §4.1.2.1.9], each of ips, mac,
  portMappings, bandwidth, infiniband-guid without the capability in the NAD found
  in the files [plan.runtime_args_for, §4.1.2.1.3.2 and siblings]; Multus'
  default-network annotation not one valid element; with --strict a selected NAD
  not in the files.
* warning: unknown fields at the top or under spec [CRD pruning, kubectl strict
  validation]; no cniVersion (read as 0.1.0); "type" next to "plugins"; a capability
  that is not a boolean, or a known one in the wrong case; runtimeConfig or cni.dev/
  keys in a plugin [CNI SPEC.md reserved keys]; a NAD defined twice; a default-route
  gateway outside every subnet of the attachment or equal to its own address; a
  bandwidth burst under one 1500-byte frame [plan.default_burst].
* note: no spec / no or empty spec.config (on-disk config, §3.2.4, §3.4.1); a config
  name that differs from the NAD's [§3.4.3]; a selected NAD not in the files; the
  capabilities of an on-disk NAD not checkable; a network-status annotation in a
  manifest (the plugin writes it, §5); a DRA claim's own CNI config, which nodes with
  claimConfigSources "class" refuse (an error with --claim-config-sources class), and
  a claim's request without a config whose DeviceClass is not in the files (it must
  hold one; an error with --strict) [docs/dra.md].
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import errno
import ipaddress
import json
import os
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from ..cni import invoke, request
from ..cni.chain import NetworkConfig
from ..cni.errors import CniError
from ..cni.jsonutil import json_type
from ..cni.names import is_dns1123_label, is_dns1123_subdomain
from ..cni.version import DEFAULT_VERSION
from ..node.devices import DEVICE_INFO_CAPABILITY
from ..spec import delegates, plan, policy, routes, selection
from ..spec.netconf import CLAIM_CONFIG_SOURCES, DEFAULT_CLAIM_CONFIG_SOURCES
from ..spec.netconf import DEFAULT_NAMESPACE as MULTUS_NAMESPACE
from ..spec.status import NETWORK_STATUS_ANNOTATION
from .shared import CHUNK_SIZE, ERROR, NOTE, WARNING, plugin_types, positive, summary

__all__ = ["Finding", "lint_sources", "format_text", "add_arguments", "run"]


NAD_API_VERSION = "k8s.cni.cncf.io/v1"
NAD_KIND = "NetworkAttachmentDefinition"

RUNTIME_IFNAME = "eth0"
"""CNI_IFNAME kubelet gives the pod's cluster default network, which netattach keeps
for it (plan.plan_attachments); a selection may not request it (§4.1.2.1.5)."""

# Kind -> path from the object to its pod template (the object that has `metadata`
# and `spec` of a pod).
POD_TEMPLATES: dict[str, tuple[str, ...]] = {
    "Pod": (),
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "ReplicationController": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
    "PodTemplate": ("template",),
}

# Kind -> path from the object to its ResourceClaimSpec (DRA, resource.k8s.io).
CLAIM_KINDS: dict[str, tuple[str, ...]] = {
    "ResourceClaim": ("spec",),
    "ResourceClaimTemplate": ("spec", "spec"),
}

RESOURCE_API_PREFIX = "resource.k8s.io/"
"""apiVersion of a DeviceClass (DRA), whatever its version."""

# Selection element attribute -> its key in the annotation (§4.1.2.1).
_SELECTION_KEYS = {"ips": "ips", "mac": "mac", "port_mappings": "portMappings",
                   "bandwidth": "bandwidth", "infiniband_guid": "infiniband-guid",
                   "device_id": "deviceID", "ipam_claim_reference": "ipam-claim-reference"}

# Capabilities of CNI CONVENTIONS.md "Well-known Capabilities", the runtimeConfig keys
# the plan passes, and the device-info file path of devices.py; used only to catch a
# wrong case ("portmappings"), since plugins may define their own.
KNOWN_CAPABILITIES = frozenset(
    {"portMappings", "ipRanges", "bandwidth", "dns", "ips", "mac", "infinibandGUID",
     "deviceID", "aliases", "cgroupPath", DEVICE_INFO_CAPABILITY}
    | {cap for _, cap, _ in plan.RUNTIME_KEYS})

MIN_BURST_BITS = 1500 * 8
"""A bandwidth burst below one 1500-byte frame: tbf drops every larger packet
(plan.default_burst explains the mechanism)."""

_YAML_SUFFIXES = (".yaml", ".yml", ".json")

Report = Callable[[str, "str | None", str], None]
"""report(severity, key, message): records a Finding about the object being checked."""
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Finding:
    """One problem found.

    file: the path as given (`<stdin>` for `-`); document: 0-based index of the YAML
    document in the file, None when the file as a whole failed; kind, name,
    namespace: of the object, as written (None when absent); key: the field path, or
    None for the document as a whole; severity: "error", "warning" or "note".
    """
    file: str
    document: int | None
    kind: str | None
    name: str | None
    namespace: str | None
    key: str | None
    severity: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: every field under its own name."""
        return dataclasses.asdict(self)

    def text(self) -> str:
        """`FILE:DOC (Kind ns/name): severity: key: message` (parts left out when unknown)."""
        where = self.file if self.document is None else f"{self.file}:{self.document}"
        if self.kind or self.name:
            ref = "/".join(p for p in (self.namespace, self.name) if p) or "(no name)"
            where += f" ({self.kind or '(no kind)'} {ref})"
        key = f"{self.key}: " if self.key else ""
        return f"{where}: {self.severity}: {key}{self.message}"


@dataclass
class _Doc:
    """One object to check and where it came from; `prefix` is "items[N]." for List items."""
    file: str
    index: int
    obj: Any
    prefix: str = ""

    def _meta(self, field: str) -> str | None:
        meta = self.obj.get("metadata") if isinstance(self.obj, dict) else None
        value = meta.get(field) if isinstance(meta, dict) else None
        return value if isinstance(value, str) else None

    @property
    def kind(self) -> str | None:
        kind = self.obj.get("kind") if isinstance(self.obj, dict) else None
        return kind if isinstance(kind, str) else None

    def reporter(self, findings: list[Finding]) -> Report:
        """report(severity, key, message) appending a Finding about this object."""
        kind, name, namespace = self.kind, self._meta("name"), self._meta("namespace")

        def report(severity: str, key: str | None, message: str) -> None:
            full_key = f"{self.prefix}{key}" if key else (self.prefix.rstrip(".") or None)
            findings.append(Finding(self.file, self.index, kind, name, namespace, full_key,
                                    severity, message))
        return report


@dataclass
class _Nad:
    """A NAD met in the files: its config (None when absent or invalid), where, and its
    `k8s.v1.cni.cncf.io/resourceName` annotation (None without one)."""
    where: str
    config: NetworkConfig | None
    on_disk: bool
    resource_name: str | None = None


# ---------------------------------------------------------------- documents

def _documents(label: str, data: bytes, findings: list[Finding]) -> list[_Doc]:
    """The objects of one file, List items expanded. A YAML error is an error finding
    at the document it is in; the documents before it are still checked."""
    docs: list[_Doc] = []
    last = -1
    try:
        for last, obj in enumerate(yaml.load_all(data, Loader=_Loader)):
            if obj is not None:
                docs.append(_Doc(label, last, obj))
    except yaml.YAMLError as e:  # raised while composing the document after `last`
        findings.append(Finding(label, last + 1, None, None, None, None, ERROR,
                                f"not valid YAML: {_yaml_error(e)}"))
    except RecursionError:
        findings.append(Finding(label, last + 1, None, None, None, None, ERROR,
                                "not valid YAML: nested too deeply"))
    out: list[_Doc] = []
    for doc in docs:
        kind = doc.kind
        items = doc.obj.get("items") if isinstance(doc.obj, dict) else None
        if kind and kind.endswith("List") and isinstance(items, list):
            out += [_Doc(label, doc.index, item, f"items[{i}].") for i, item in enumerate(items)
                    if item is not None]
        else:
            out.append(doc)
    return out


def _yaml_error(e: yaml.YAMLError) -> str:
    """`line L, column C: problem (context at line L, column C)`, lines of the file."""
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None)
    if mark is None or not problem:
        return " ".join(str(e).split())
    text = f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    context, where = getattr(e, "context", None), getattr(e, "context_mark", None)
    if context and where is not None:
        text += f" ({context} at line {where.line + 1}, column {where.column + 1})"
    return text


# ---------------------------------------------------------------- NADs

def _check_metadata(obj: dict, report: Report, *, what: str) -> tuple[str | None, str | None]:
    """metadata of a NAD: name and namespace DNS-1123 labels (spec §3.3), annotation
    values strings. Returns (name, namespace) when usable, else None in their place."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        report(ERROR, "metadata",
               f"required, an object with at least a name (not {json_type(meta)})")
        return None, None
    _check_annotation_values(meta, "metadata", report)
    name = meta.get("name")
    if name is None:
        hint = " (generateName gives a name nobody can select by)" if "generateName" in meta else ""
        report(ERROR, "metadata.name", f"required: pods select a {what} by name{hint}")
        name = None
    elif not isinstance(name, str):
        report(ERROR, "metadata.name", f"must be a string, not {json_type(name)}")
        name = None
    elif not is_dns1123_label(name):
        report(ERROR, "metadata.name", _label_message(name, what))
        name = None
    namespace = meta.get("namespace")
    if namespace is not None and not is_dns1123_label(namespace):
        report(ERROR, "metadata.namespace", _label_message(namespace, "namespace"))
        namespace = None
    return name, namespace


def _label_message(value: Any, what: str) -> str:
    """Why `value` is not a DNS-1123 label (spec §3.3), with the subdomain case explained."""
    rule = ("a DNS-1123 label: at most 63 lower-case alphanumerics or '-', starting and "
            "ending alphanumeric (§3.3)")
    if (what == NAD_KIND and isinstance(value, str) and "." in value
            and is_dns1123_subdomain(value)):
        return (f"{value!r} is a DNS-1123 subdomain: the API server accepts it for a custom "
                f"resource, but the k8s.v1.cni.cncf.io/networks annotation (and netattach) "
                f"only take {rule}")
    return f"{json.dumps(value)} is not {rule}"


def _check_annotation_values(meta: dict, where: str, report: Report) -> None:
    annotations = meta.get("annotations")
    if annotations is None:
        return
    if not isinstance(annotations, dict):
        report(ERROR, f"{where}.annotations",
               f"must be a map of strings, not {json_type(annotations)}")
        return
    for key, value in annotations.items():
        if not isinstance(value, str):
            report(ERROR, f"{where}.annotations[{key}]",
                   f"annotation values must be strings, not {json_type(value)}: the API server "
                   "refuses it; quote the value or write it as a block scalar (|)")


def _lint_nad(doc: _Doc, report: Report, allowed: frozenset[str] | None
              ) -> tuple[str | None, str | None, _Nad | None]:
    """Check one NetworkAttachmentDefinition (spec §3); `allowed`: the node's
    allowedPluginTypes, None for any. Returns (name, namespace as written, its _Nad) or
    None in place of a name that cannot be selected."""
    obj = doc.obj
    if obj.get("apiVersion") != NAD_API_VERSION:
        report(ERROR, "apiVersion", f"must be {NAD_API_VERSION!r} (the only version the CRD "
               f"serves, spec §3.1), not {json.dumps(obj.get('apiVersion'))}")
    if obj.get("kind") != NAD_KIND:
        report(ERROR, "kind", f"{json.dumps(obj.get('kind'))}: did you mean {NAD_KIND}?")
    for key in obj:
        if key not in ("apiVersion", "kind", "metadata", "spec"):
            report(WARNING, str(key), "unknown field: a NetworkAttachmentDefinition has only "
                   "apiVersion, kind, metadata and spec (§3.2); the API server drops it "
                   "(kubectl's strict field validation refuses it)")
    name, namespace = _check_metadata(obj, report, what=NAD_KIND)
    spec = obj.get("spec")
    if isinstance(spec, dict):
        for key in spec:
            if key != "config":
                report(WARNING, f"spec.{key}", "unknown field: kubectl's strict field "
                       "validation refuses it, else the CRD (deploy/base/crd.yaml) prunes "
                       "everything under spec but config; netattach reads only spec.config "
                       "(§3.2)")
    config = None
    written = _at(obj, ("metadata", "name"))
    written = written if isinstance(written, str) and written else None
    try:  # the name is injected as the plugin would (§3.4.2), even when invalid
        config = delegates.config_from_nad(obj, default_name=written or "unnamed")
    except delegates.DelegateError as e:
        key = "spec" if not isinstance(spec, dict) else "spec.config"
        hint = ("; write the JSON as a YAML string, e.g. a block scalar (config: |)"
                if isinstance(spec, dict) and isinstance(spec.get("config"), (dict, list)) else "")
        report(ERROR, key, f"{e}{hint}")
        return name, namespace, _Nad(_where(doc), None, False, _resource_name(obj))
    if config is None:
        empty = isinstance(spec, dict) and isinstance(spec.get("config"), str)
        report(NOTE, "spec.config" if isinstance(spec, dict) else "spec",
               ("is empty, which netattach reads as absent" if empty else "absent")
               + f": netattach uses the on-disk CNI config whose \"name\" is "
               f"{json.dumps(name)} in its confDir on each node (.conflist first, then "
               ".conf/.json, §3.2.4, §3.4.1 steps 2-3); a node without one fails the ADD")
        return name, namespace, _Nad(_where(doc), None, True, _resource_name(obj))
    _lint_config(config, written, report, allowed)
    return name, namespace, _Nad(_where(doc), config, False, _resource_name(obj))


def _resource_name(obj: dict[str, Any]) -> str | None:
    """The NAD's device resource (devices.RESOURCE_ANNOTATION), None without one."""
    from ..node.devices import nad_resource_name
    return nad_resource_name(obj) or None


def _where(doc: _Doc) -> str:
    """`FILE:DOC` (plus the List item) of a document, for cross references."""
    return f"{doc.file}:{doc.index}" + (f" {doc.prefix.rstrip('.')}" if doc.prefix else "")


def _lint_config(config: NetworkConfig, nad_name: str | None, report: Report,
                 allowed: frozenset[str] | None) -> None:
    """What a loaded config still holds for the ADD: CNI SPEC.md section 1 rules the
    loader leaves to the exec (network name, plugin types) and likely mistakes.
    nad_name: metadata.name as written (None when absent)."""
    raw, base = config.raw, "spec.config"
    if "cniVersion" not in raw and "cniVersions" not in raw:
        report(WARNING, f"{base}.cniVersion",
               f"absent: netattach, like libcni, reads it as {DEFAULT_VERSION}, whose results "
               "carry no interfaces or MAC for network-status; set the version the plugins "
               "support, e.g. \"1.0.0\"")
    if nad_name is not None and config.name != nad_name:
        report(NOTE, f"{base}.name",
               f"{json.dumps(config.name)} differs from the NAD's name {json.dumps(nad_name)}: "
               "the spec strongly recommends they match (§3.4.3); plugins get the former")
    try:
        request.validate_network_name(config.name)
    except CniError as e:
        report(ERROR, f"{base}.name", f"{e} (CNI SPEC.md: network name; the ADD fails)")
    if config.is_list and "type" in raw:
        report(WARNING, f"{base}.type", "next to \"plugins\": netattach (like Multus) runs the "
               "config as a list and ignores the top-level \"type\"")
    for i, plugin in enumerate(config.plugins):
        where = f"{base}.plugins[{i}]" if config.is_list else base
        _lint_plugin(plugin, where, report, allowed)


def _lint_plugin(plugin: dict, where: str, report: Report,
                 allowed: frozenset[str] | None) -> None:
    for key, ptype, by_name in policy.plugin_types(plugin):
        if not by_name and ptype not in invoke.META_PLUGIN_TYPES:
            continue
        try:
            invoke.check_plugin_type(ptype, allowed if by_name else None)
        except CniError as e:
            report(ERROR, f"{where}.{key}", str(e))
    caps = plugin.get("capabilities")
    for cap, on in (caps.items() if isinstance(caps, dict) else ()):
        if not isinstance(on, bool):
            report(WARNING, f"{where}.capabilities.{cap}",
                   f"is {json_type(on)}: only JSON true declares a capability, so this "
                   "declares nothing (CNI SPEC.md \"Deriving runtimeConfig\")")
        elif cap not in KNOWN_CAPABILITIES:
            same = [k for k in KNOWN_CAPABILITIES if k.lower() == str(cap).lower()]
            if same:
                report(WARNING, f"{where}.capabilities.{cap}",
                       f"did you mean {same[0]!r}? Capability names are case-sensitive "
                       "(CNI CONVENTIONS.md)")
    if "runtimeConfig" in plugin:
        report(WARNING, f"{where}.runtimeConfig", "a key reserved for the runtime (CNI SPEC.md "
               "\"Plugin configuration objects\"): netattach replaces it with the values of "
               "the declared capabilities")
    for key in plugin:
        if isinstance(key, str) and key.startswith("cni.dev/"):
            report(WARNING, f"{where}.{key}", "cni.dev/ keys are reserved for the runtime "
                   "(CNI SPEC.md \"Plugin configuration objects\")")


# ---------------------------------------------------------------- pods

def _at(obj: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def _lint_pod(doc: _Doc, report: Report, nads: dict[tuple[str, str], _Nad], namespace: str,
              strict: bool) -> None:
    """Check the selection annotations of a pod or of a workload's pod template (§4)."""
    path = POD_TEMPLATES[doc.kind or ""]
    prefix = ".".join(path + ("metadata",))
    meta = _at(doc.obj, path + ("metadata",))
    if not isinstance(meta, dict):
        return
    _check_annotation_values(meta, prefix, report)
    own = _at(doc.obj, ("metadata", "namespace"))
    namespace = own if is_dns1123_label(own) else namespace
    annotations: dict[str, Any] = (meta["annotations"] if isinstance(meta.get("annotations"), dict)
                                   else {})
    akey = f"{prefix}.annotations"
    value = annotations.get(selection.NETWORKS_ANNOTATION)
    if isinstance(value, str):
        _lint_selection(value, f"{akey}[{selection.NETWORKS_ANNOTATION}]", namespace, nads,
                        strict, report)
    value = annotations.get(selection.DEFAULT_NETWORK_ANNOTATION)
    if isinstance(value, str) and value.strip():
        _lint_default_network(value, f"{akey}[{selection.DEFAULT_NETWORK_ANNOTATION}]", nads,
                              strict, report)
    if NETWORK_STATUS_ANNOTATION in annotations:
        report(NOTE, f"{akey}[{NETWORK_STATUS_ANNOTATION}]", "is written by the plugin after "
               "the ADD (§5); a value given here is replaced")


def _lint_default_network(value: str, key: str, nads: dict[tuple[str, str], _Nad],
                          strict: bool, report: Report) -> None:
    """Multus' pod default-network annotation, read as networks._pod_default_network does:
    one element, unqualified names in multusNamespace (default kube-system)."""
    try:
        elements = selection.parse_network_selection(value, MULTUS_NAMESPACE)
    except selection.SelectionError as e:
        report(ERROR, _element_key(key, e.index, e.key), str(e))
        return
    if len(elements) != 1:
        report(ERROR, key, f"must name exactly one network, not {len(elements)}")
        return
    if (elements[0].namespace, elements[0].name) not in nads:
        _report_missing(elements[0], f"{key}[0]", strict, report,
                        f" (a name without namespace is looked up in {MULTUS_NAMESPACE}, "
                        "netattach's default multusNamespace)")


def _element_key(key: str, index: int | None, field: str | None) -> str:
    return key + (f"[{index}]" if index is not None else "") + (f".{field}" if field else "")


def _report_missing(element: selection.NetworkSelectionElement, key: str, strict: bool,
                    report: Report, extra: str = "") -> None:
    """A note (an error with --strict) that the files do not hold the NAD selected."""
    report(ERROR if strict else NOTE, f"{key}.name",
           f"NetworkAttachmentDefinition {element.ref} is not in the files given: it must "
           f"exist in the cluster when the pod starts, or the ADD fails (§3.4.1 step 4){extra}")


def _lint_selection(value: str, key: str, namespace: str, nads: dict[tuple[str, str], _Nad],
                    strict: bool, report: Report) -> None:
    """The selection annotation (§4.1) as the ADD reads it: parse, interface names,
    default-route, then per element its NAD, capabilities, gateways and bursts."""
    try:
        elements = selection.parse_network_selection(value, namespace)
    except selection.SelectionError as e:
        report(ERROR, _element_key(key, e.index, e.key), str(e))
        return
    try:
        ifnames = plan.interface_names(RUNTIME_IFNAME, elements)
    except plan.PlanError as e:
        bad = next(i for i in range(len(elements)) if _ifnames_fail(elements[:i + 1]))
        report(ERROR, f"{key}[{bad}].interface", f"{e}; the runtime's {RUNTIME_IFNAME} is the "
               "cluster default network's")
        return
    try:
        routes.plan_default_routes([(RUNTIME_IFNAME, None, "the cluster default network")]
                                   + [(n, e.default_route, e.ref)
                                      for n, e in zip(ifnames, elements)])
    except routes.RouteError as e:
        bad = next(el.index for el in elements if el.default_route is not None)
        report(ERROR, f"{key}[{bad}].default-route", str(e))
    _lint_caps(elements, key, report)
    noted: set[str] = set()
    for element, ifname in zip(elements, ifnames):
        ekey = f"{key}[{element.index}]"
        nad = nads.get((element.namespace, element.name))
        if element.device_id is not None and nad is not None and not nad.resource_name:
            report(ERROR, f"{ekey}.deviceID", f"{element.ref} has no "
                   "k8s.v1.cni.cncf.io/resourceName annotation, so the kubelet allocates the "
                   "pod no device of it and the deviceID cannot be checked: the ADD refuses "
                   "it (docs/selection.md)")
        if nad is None and element.ref not in noted:  # once per NAD (§4.2: a,a is fine)
            noted.add(element.ref)
            _report_missing(element, ekey, strict, report)
        asked = [attr for attr, _, section in plan.RUNTIME_KEYS
                 if section and getattr(element, attr) is not None]
        if nad is not None and nad.config is not None:
            _lint_capabilities(element, nad.config, asked, ekey, report)
        elif nad is not None and nad.on_disk and asked:
            report(NOTE, ekey, f"capabilities for {', '.join(_SELECTION_KEYS[a] for a in asked)} "
                   f"not checked: {element.ref} has its config on the nodes' disk")
        if element.default_route:
            _lint_gateways(element, nad.config if nad else None, ifname, ekey, report)
        for burst in ("ingressBurst", "egressBurst"):
            bits = (element.bandwidth or {}).get(burst)
            if bits is not None and bits < MIN_BURST_BITS:
                report(WARNING, f"{ekey}.bandwidth.{burst}",
                       f"{bits} bits is less than one 1500-byte frame ({MIN_BURST_BITS} bits): "
                       "the bandwidth plugin's tbf qdisc drops every larger packet; leave the "
                       "burst out and netattach picks one (plan.default_burst)")


def _lint_caps(elements: list[selection.NetworkSelectionElement], key: str,
               report: Report) -> None:
    """The nodes' default caps (netconf DEFAULT_MAX_NETWORKS_PER_POD,
    DEFAULT_MAX_SAME_NETWORK_PER_POD; networks.check_caps): a warning, since a node's
    admin may have raised them."""
    from ..spec.netconf import DEFAULT_MAX_NETWORKS_PER_POD, DEFAULT_MAX_SAME_NETWORK_PER_POD
    if len(elements) > DEFAULT_MAX_NETWORKS_PER_POD:
        report(WARNING, key, f"selects {len(elements)} networks: a node with the default "
               f"maxNetworksPerPod ({DEFAULT_MAX_NETWORKS_PER_POD}) refuses the pod")
    for ref, count in selection.selection_counts(elements).items():
        if count > DEFAULT_MAX_SAME_NETWORK_PER_POD:
            report(WARNING, key, f"selects {ref} {count} times: a node with the default "
                   f"maxSameNetworkPerPod ({DEFAULT_MAX_SAME_NETWORK_PER_POD}) refuses the pod")


def _ifnames_fail(elements: list[selection.NetworkSelectionElement]) -> bool:
    try:
        plan.interface_names(RUNTIME_IFNAME, elements)
    except plan.PlanError:
        return True
    return False


def _lint_capabilities(element, config: NetworkConfig, asked: list[str], ekey: str,
                       report: Report) -> None:
    """Each key the element sets against the NAD's capabilities, one at a time, through
    the plan's own check (so every missing one is reported, not only the first)."""
    for attr in asked:
        only = dataclasses.replace(element, **{a: None for a, _, _ in plan.RUNTIME_KEYS
                                               if a != attr})
        try:
            plan.runtime_args_for(only, config)
        except plan.PlanError as e:
            report(ERROR, f"{ekey}.{_SELECTION_KEYS[attr]}", str(e))


def _ipam_subnets(config: NetworkConfig | None) -> list[Any]:
    """Subnets the config's IPAM hands out: host-local `subnet` and `ranges`, static
    `addresses`, whereabouts-style `range`; whatever does not parse is left out."""
    texts: list[Any] = []
    for plugin in config.plugins if config else ():
        ipam = plugin.get("ipam")
        if not isinstance(ipam, dict):
            continue
        texts += [ipam.get("subnet"), ipam.get("range")]
        ranges: list[Any] = ipam["ranges"] if isinstance(ipam.get("ranges"), list) else []
        texts += [r.get("subnet") for rs in ranges if isinstance(rs, list)
                  for r in rs if isinstance(r, dict)]
        addresses: list[Any] = (ipam["addresses"] if isinstance(ipam.get("addresses"), list)
                                else [])
        texts += [a.get("address") for a in addresses if isinstance(a, dict)]
    return [net for net in map(_network, texts) if net is not None]


def _network(text: Any) -> Any:
    if not isinstance(text, str) or "/" not in text:
        return None
    try:
        return ipaddress.ip_interface(text).network
    except ValueError:
        return None


def _lint_gateways(element, config: NetworkConfig | None, ifname: str, ekey: str,
                   report: Report) -> None:
    """default-route gateways against the subnets the attachment gets (§4.1.2.1.9): the
    element's own ips and the NAD's IPAM. The plugin installs the route via `ifname`,
    which the kernel refuses for a gateway it cannot reach."""
    subnets = list(dict.fromkeys(
        [n for n in map(_network, element.ips or ()) if n is not None] + _ipam_subnets(config)))
    own = {ip.split("/")[0] for ip in element.ips or ()}
    for gw in element.default_route or ():
        address = ipaddress.ip_address(gw)
        family = [n for n in subnets if n.version == address.version]
        if gw in own:
            report(WARNING, f"{ekey}.default-route", f"gateway {gw} is the pod's own address "
                   "on this attachment")
        elif family and not any(address in n for n in family):
            report(WARNING, f"{ekey}.default-route",
                   f"gateway {gw} is outside every subnet this attachment gets "
                   f"({', '.join(map(str, family))}): the default route via {ifname} fails "
                   "unless a plugin adds a route to the gateway")


# ---------------------------------------------------------------- DRA ResourceClaims

def _lint_cni_config(opaque: dict[str, Any], name: str, targets: list[str],
                     allowed: frozenset[str] | None) -> Any:
    """One opaque config of claims.DRIVER through the plugin's own parser
    (claims.parse_cni_config, then claims.to_netconf offline for each request name of
    `targets`: an argument read from a device, a ResourceSlice or a ConfigMap gets a
    placeholder) and the plugin rule (policy.check_plugin with `allowed`). `name`: the
    object's. Returns the claims.CniConfigSpec; raises CniError."""
    from ..spec import claims
    parsed = claims.parse_cni_config(opaque.get("parameters"))
    for target in targets:
        ref = claims.ClaimRef("", name, "", target, claims.DRIVER, "", "")
        netconf = claims.to_netconf(parsed, ref, None, offline=True)
        for plugin in netconf.plugins:
            policy.check_plugin(plugin, allowed)
    return parsed


def _lint_device_class(doc: _Doc, report: Report, allowed: frozenset[str] | None) -> int:
    """A DeviceClass (resource.k8s.io): each config of claims.DRIVER in its spec.config,
    which the scheduler copies into the allocation of every request of the class
    (source FromClass, docs/dra.md), as _lint_claim lints a claim's. Returns how many
    it holds (each request of the class gets them all; more than one is an error, seed
    004 Validation: one config per request)."""
    from ..spec import claims
    spec = doc.obj.get("spec")
    held = 0
    for i, config in enumerate((spec.get("config") if isinstance(spec, dict) else None) or []):
        opaque = config.get("opaque") if isinstance(config, dict) else None
        if not isinstance(opaque, dict) or opaque.get("driver") != claims.DRIVER:
            continue
        held += 1
        try:
            _lint_cni_config(opaque, doc._meta("name") or "", ["(class)"], allowed)
        except CniError as e:
            report(ERROR, f"spec.config[{i}].opaque.parameters", e.msg)
    if held > 1:
        report(ERROR, "spec.config", f"{held} configs of driver {claims.DRIVER}: each request "
               "of the class gets them all, and a request has one and only one (seed 004 "
               "Validation)")
    return held


def _lint_claim(doc: _Doc, report: Report, allowed: frozenset[str] | None,
                classes: dict[str, int], claim_sources: str, strict: bool) -> None:
    """A ResourceClaim or ResourceClaimTemplate: every config of the CNI DRA driver
    (claims.DRIVER) through the plugin's own parser (_lint_cni_config) and the rules of
    seed 004 "Validation" that the object alone shows: one config of the driver per
    request it names, that request in the claim, ExactCount with count 1, an ifName
    used by one request only. `classes`: the DeviceClasses in the files -> how many
    configs of the driver each holds (_lint_device_class), counted for the requests
    of the class. A config of the claim's own is a note, or an error when
    `claim_sources` is "class" (the nodes' claimConfigSources: the ADD refuses it).
    A request of DeviceClass claims.DEVICE_CLASS with no config is an error when the
    class is in the files without one, else a note that it must hold one (an error
    with `strict`). What only the allocation or the cluster shows (reservedFor, the
    sources' values, the pod's other interfaces) is checked at ADD."""
    from ..spec import claims
    path = CLAIM_KINDS[doc.kind or ""]
    spec = _at(doc.obj, path)
    base = ".".join(path)
    devices = spec.get("devices") if isinstance(spec, dict) else None
    if not isinstance(devices, dict):
        return
    requests: dict[str, dict[str, Any]] = {
        r["name"]: r for r in devices.get("requests") or []
        if isinstance(r, dict) and isinstance(r.get("name"), str)}
    names: dict[str, int] = {}
    ifnames: dict[str, str] = {}
    for i, config in enumerate(devices.get("config") or []):
        opaque = config.get("opaque") if isinstance(config, dict) else None
        if not isinstance(opaque, dict) or opaque.get("driver") != claims.DRIVER:
            continue
        key = f"{base}.devices.config[{i}]"
        targets = config.get("requests") or list(requests)
        for name in targets:
            names[name] = names.get(name, 0) + 1
            if name.split("/", 1)[0] not in requests:
                report(ERROR, f"{key}.requests", f"request {name!r} is not in "
                       f"{base}.devices.requests")
        if claim_sources == claims.CLASS_ONLY:
            report(ERROR, f"{key}.opaque", "the claim holds its own CNI config (source "
                   "FromClaim), which nodes whose claimConfigSources is \"class\" refuse "
                   "(the ADD fails): move it into the spec.config of the request's "
                   "DeviceClass (docs/dra.md)")
        else:
            report(NOTE, f"{key}.opaque", "the claim holds its own CNI config (source "
                   "FromClaim): nodes whose claimConfigSources is \"class\" refuse it; a "
                   "DeviceClass's spec.config is where the cluster admin holds it "
                   "(docs/dra.md)")
        try:
            parsed = _lint_cni_config(opaque, doc._meta("name") or "", targets, allowed)
        except CniError as e:
            report(ERROR, f"{key}.opaque.parameters", e.msg)
            continue
        if parsed.ifname is not None:
            if parsed.ifname == RUNTIME_IFNAME:
                report(ERROR, f"{key}.opaque.parameters.ifName", f"interface "
                       f"{RUNTIME_IFNAME!r} is the cluster default network's (CNI_IFNAME)")
            elif parsed.ifname in ifnames:
                report(ERROR, f"{key}.opaque.parameters.ifName", f"interface "
                       f"{parsed.ifname!r} is also the one of {ifnames[parsed.ifname]}")
            ifnames[parsed.ifname] = key
    for n, (name, req) in enumerate(requests.items()):
        rkey = f"{base}.devices.requests[{n}]"
        exact: dict[str, Any] = req["exactly"] if isinstance(req.get("exactly"), dict) else req
        cls = exact.get("deviceClassName")
        held = classes.get(cls, 0) if isinstance(cls, str) else 0
        count = names.get(name, 0) + held
        if count > 1:
            report(ERROR, rkey, f"request {name!r} has {count} configs of driver "
                   f"{claims.DRIVER}" + (f" ({held} of its DeviceClass {cls})" if held else "")
                   + "; one and only one (seed 004 Validation)")
        mine = count > 0 or cls == claims.DEVICE_CLASS
        if mine and count == 0:
            if cls in classes or strict:
                report(ERROR, rkey, f"request {name!r} of DeviceClass {cls} has no config "
                       f"of driver {claims.DRIVER}, in the claim or in the class (seed 004 "
                       "Validation)")
            else:
                report(NOTE, rkey, f"request {name!r} of DeviceClass {cls} has no config "
                       f"of driver {claims.DRIVER}: the DeviceClass, not in the files, must "
                       "hold one in spec.config, else the ADD fails (seed 004 Validation)")
        problem = claims.exact_one_problem(exact)
        if mine and problem and "firstAvailable" not in req:
            report(ERROR, rkey, problem)


# ---------------------------------------------------------------- the whole run

def lint_sources(sources: list[tuple[str, bytes]], *, namespace: str = "default",
                 strict: bool = False,
                 allowed_plugin_types: frozenset[str] | None = None,
                 claim_config_sources: str = "any") -> list[Finding]:
    """Lint the documents of every (label, content) source together.

    namespace: where objects without metadata.namespace go (what `kubectl apply -n`
    would use). strict: a selected NAD missing from the sources is an error, not a
    note (and so is the DeviceClass of a claim's request that has no config).
    allowed_plugin_types: the nodes' `allowedPluginTypes` (a NAD's, a claim's or a
    DeviceClass's plugin or IPAM type outside it is an error); None: any type but a
    meta-plugin's. claim_config_sources: the nodes' `claimConfigSources` ("any" or
    "class": a claim's own config is then an error, not a note). NADs of every source
    are known to the pods of every source, DeviceClasses to the claims.
    Returns the findings in source and document order (NADs and pods interleaved as
    the documents are). Never raises for any content.
    """
    findings: list[Finding] = []
    docs = [d for label, data in sources for d in _documents(label, data, findings)]
    nads: dict[tuple[str, str], _Nad] = {}
    by_doc: dict[int, list[Finding]] = {}
    pods = []
    claim_docs: list[tuple[_Doc, Report]] = []
    classes: dict[str, int] = {}
    for n, doc in enumerate(docs):
        out = by_doc.setdefault(n, [])
        report = doc.reporter(out)
        if not isinstance(doc.obj, dict):
            report(ERROR, None, f"not a Kubernetes object (a mapping with apiVersion and kind), "
                   f"but {json_type(doc.obj)}")
            continue
        kind, api = doc.kind, doc.obj.get("apiVersion")
        if kind is None:
            report(ERROR, "kind", "required: every Kubernetes object has a kind")
        elif kind == NAD_KIND or (api == NAD_API_VERSION
                                  and difflib.get_close_matches(kind, [NAD_KIND], cutoff=0.8)):
            name, ns, nad = _lint_nad(doc, report, allowed_plugin_types)
            if name is not None and nad is not None:
                ref = (ns or namespace, name)
                if ref in nads:
                    report(WARNING, "metadata.name", f"NetworkAttachmentDefinition {'/'.join(ref)} "
                           f"is also defined at {nads[ref].where}; kubectl apply keeps the "
                           "last one")
                nads[ref] = nad
        elif kind in CLAIM_KINDS:
            claim_docs.append((doc, report))
        elif kind == "DeviceClass" and str(api).startswith(RESOURCE_API_PREFIX):
            name = doc._meta("name")
            held = _lint_device_class(doc, report, allowed_plugin_types)
            if name is not None:
                classes[name] = held
        elif kind in POD_TEMPLATES:
            pods.append((n, doc, report))
    for doc, report in claim_docs:
        _lint_claim(doc, report, allowed_plugin_types, classes, claim_config_sources, strict)
    for _n, doc, report in pods:
        _lint_pod(doc, report, nads, namespace, strict)
    ordered = [f for n in range(len(docs)) for f in by_doc.get(n, ())]
    return _sorted(findings + ordered, sources)


def _sorted(findings: list[Finding], sources: list[tuple[str, bytes]]) -> list[Finding]:
    order = {label: i for i, (label, _) in enumerate(sources)}
    return sorted(findings, key=lambda f: (order.get(f.file, -1),
                                           -1 if f.document is None else f.document))


def format_text(findings: list[Finding]) -> str:
    """One line per finding (Finding.text), newline-terminated; "" for none."""
    return "".join(f.text() + "\n" for f in findings)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `netattach validate` options."""
    parser.description = (
        "Lint NetworkAttachmentDefinition and pod manifests (also the pod templates of "
        "workloads) with the rules netattach applies when it attaches a pod; with --cluster, "
        "the migration pre-flight: what would change for a running cluster's pods and NADs "
        "once netattach replaces Multus. Exit status: 0 no errors, 1 errors found (with "
        "--cluster: a pod would fail to start), 2 a file, the conf or the cluster could not "
        "be read, or a usage error.")
    parser.set_defaults(usage_error=parser.error)
    parser.add_argument("files", nargs="*", metavar="FILE",
                        help="YAML or JSON manifests, several documents each; '-' reads "
                             "stdin; a directory means its *.yaml, *.yml and *.json files "
                             "(not its subdirectories); none with --cluster")
    parser.add_argument("-n", "--namespace", default=None,
                        help="namespace of objects that set none, as with kubectl apply -n "
                             "(default: default); with --cluster, the namespace whose pods "
                             "are checked (default: all)")
    cluster = parser.add_argument_group(
        "migration pre-flight (docs/tools.md, docs/migration.md)")
    cluster.add_argument("--cluster", action="store_true",
                         help="read the cluster's NetworkAttachmentDefinitions (all "
                              "namespaces) and pods with your kubeconfig instead of files, "
                              "and list what would behave differently under netattach than "
                              "under Multus")
    cluster.add_argument("--kubeconfig",
                         help="with --cluster: kubeconfig file (default: $KUBECONFIG, else "
                              "~/.kube/config, else the in-cluster ServiceAccount)")
    cluster.add_argument("--conf", metavar="FILE",
                         help="with --cluster: the conf netattach will run with (a node's "
                              "00-netattach.conflist, Multus' conf or conflist, or the "
                              "netconf.yaml of deploy/components/netconf): its "
                              "namespaceIsolation, allowedPluginTypes, caps, defaultNetworks "
                              "and Multus keys are judged too (default: the defaults deploy/ "
                              "installs)")
    cluster.add_argument("--chunk-size", type=positive, default=None, metavar="N",
                         help="with --cluster: objects per page of each LIST, at least 1 "
                              f"(default: {CHUNK_SIZE})")
    parser.add_argument("--strict", action="store_true",
                        help="a selected NetworkAttachmentDefinition missing from the files "
                             "is an error (default: a note, the cluster may have it)")
    parser.add_argument("--allowed-plugin-types", metavar="TYPES", default=None,
                        help="the nodes' allowedPluginTypes, comma-separated: a NAD or a "
                             "claim naming another plugin or IPAM type is an error "
                             "(default: any type but a delegating meta-plugin's)")
    parser.add_argument("--claim-config-sources", choices=CLAIM_CONFIG_SOURCES, default=None,
                        help="the nodes' claimConfigSources: with 'class', a DRA claim's own "
                             "CNI config is an error, as the ADD refuses it (default: "
                             f"{DEFAULT_CLAIM_CONFIG_SOURCES}, a note)")
    parser.add_argument("-o", "--output", choices=("text", "json"), default="text",
                        help="text: one line per finding; json: {\"findings\": [...], "
                             "\"summary\": {...}} on stdout (default: %(default)s)")


def _read(paths: list[str]) -> tuple[list[tuple[str, bytes]], list[Finding]]:
    """The (label, content) of each file of `paths`, in order: `-` is stdin
    ("<stdin>"), a directory its regular *.yaml, *.yml and *.json files in name order.
    Returns also one error Finding (document None) per path or entry that could not
    be read: `cannot read: <OS error>`. Never raises OSError."""
    sources: list[tuple[str, bytes]] = []
    failed: list[Finding] = []
    for path in paths:
        if path == "-":
            sources.append(("<stdin>", sys.stdin.buffer.read()))
            continue
        try:
            if os.path.isdir(path):
                files = [(os.path.join(path, n), True) for n in sorted(os.listdir(path))
                         if n.endswith(_YAML_SUFFIXES)]
            else:
                files = [(path, False)]
        except OSError as e:  # a directory that cannot be listed
            files = []
            failed.append(_unreadable(path, e))
        for file, in_directory in files:
            try:
                sources.append((file, _read_file(file, in_directory)))
            except OSError as e:
                failed.append(_unreadable(file, e))
    return sources, failed


def _read_file(path: str, regular_only: bool) -> bytes:
    """The content of `path`. regular_only (an entry of a directory): anything but a
    regular file (after symbolic links) raises OSError instead of being read, a FIFO
    without blocking. Raises OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | (os.O_NONBLOCK if regular_only else 0))
    try:
        mode = os.fstat(fd).st_mode
        if regular_only and stat.S_ISDIR(mode):
            raise OSError(errno.EISDIR, "Is a directory (subdirectories are not searched)")
        if regular_only and not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, "not a regular file (a FIFO, socket or device in a "
                                        "directory is not read; name it to read it)")
        with open(fd, "rb", closefd=False) as fh:
            return fh.read()
    finally:
        os.close(fd)


def _unreadable(path: str, error: OSError) -> Finding:
    return Finding(path, None, None, None, None, None, ERROR,
                   f"cannot read: {error.strerror or error}")


def run(args: argparse.Namespace) -> int:
    """`netattach validate`: findings on stdout (text or JSON), a count on stderr.

    Files: returns 2 when a file could not be read (one given, or an entry of a directory
    given: each is an error finding naming it, and the rest is still linted), else 1
    when there is an error, else 0. With --cluster: tools/preflight.run's status (1 when
    a pod would fail, 2 when the conf or the cluster cannot be read). A flag that does
    not go with the mode chosen is argparse's usage error (exit 2).
    """
    usage = getattr(args, "usage_error", None)  # argparse's error: usage, message, exit 2
    if args.cluster:
        if usage:
            if args.files:
                usage("--cluster reads the cluster, not files: give one or the other")
            for flag, unset in (("strict", False), ("claim_config_sources", None)):
                if getattr(args, flag) is not unset:
                    usage(f"--{flag.replace('_', '-')} lints files: it does not go with "
                          "--cluster")
        from . import preflight
        return preflight.run(args)
    if usage:
        if not args.files:
            usage("the following arguments are required: FILE (or --cluster)")
        for flag in ("kubeconfig", "conf", "chunk_size"):
            if getattr(args, flag) is not None:
                usage(f"--{flag.replace('_', '-')} goes with --cluster")
    sources, failed = _read(args.files)
    allowed = plugin_types(args.allowed_plugin_types)
    findings = failed + lint_sources(sources, namespace=args.namespace or "default",
                                     strict=args.strict,
                                     allowed_plugin_types=allowed,
                                     claim_config_sources=(args.claim_config_sources
                                                           or DEFAULT_CLAIM_CONFIG_SOURCES))
    counts = summary(findings)
    if args.output == "json":
        json.dump({"findings": [f.to_dict() for f in findings],
                   "summary": {**counts, "files": len(sources)}}, sys.stdout, indent=2,
                  ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_text(findings))
        print(f"netattach validate: {counts['errors']} error(s), {counts['warnings']} "
              f"warning(s), {counts['notes']} note(s) in {len(sources)} file(s)", file=sys.stderr)
    if failed:
        return 2
    return 1 if counts["errors"] else 0

