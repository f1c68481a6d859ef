"""Networks from DRA ResourceClaims: the CNI DRA driver's device configuration API (seed
004, "Device Configuration API") beside NetworkAttachmentDefinitions.

A pod references ResourceClaims in `spec.resourceClaims` (by `resourceClaimName`, or by
`resourceClaimTemplateName`, whose generated claim is named in the pod's
`status.resourceClaimStatuses`). Each allocated request of driver DRIVER
(`status.allocation.devices.results[]`) whose config (`status.allocation.devices.config[]`,
`opaque.driver` == DRIVER) holds a `CNIConfig` in `opaque.parameters` becomes one
attachment (`ClaimNetwork`): the CNI config list `to_netconf` builds from it, run by the
same chain engine, in the same plan, as the NAD attachments (networks.build_plan).

Spellings (seed 004 is inconsistent; every spelling it uses is accepted):
* the interface: `ifName` or `name` (the Go struct's json tag) at the top level;
* the plugins: `plugins: [{type, config: {...}, args|arguments: [...]}]` with
  `cniVersion` at the top level (seed 004 "Configuration"), or the plugins written
  whole in `config: {cniVersion, name, plugins: [{type, ...}]}` (seed 004 "Status"
  example); a plugin without `config` takes its other keys as its config;
* an argument: `field` or `fieldPath`; `value` (a constant) or `valueFrom` with one of
  `attribute`/`attributeRef` (a device attribute), `resourceSliceFieldRef`
  ({fieldPath}), `configMapKeyRef` ({name, key | attribute/attributeRef |
  resourceSliceFieldRef});
* apiVersion `cni.networking.x-k8s.io/v1alpha1` or `cni.dra.networking.x-k8s.io/v1alpha1`,
  kind `CNI` or `CNIConfig` (both optional).
`configName` (seed 004 "Alternatives") is refused: that API does not exist.

Field paths (where an argument's value is set in the plugin's config, and which field
of the ResourceSlice `resourceSliceFieldRef` reads) are dotted: `master`,
`ipam.ranges.0.0.subnet`; a segment of digits indexes an existing list, any other
segment is an object key (objects are created on the way when setting). A key that
itself holds a dot cannot be named.

Argument values: a constant is the string given; a device attribute keeps its type
(string, int, bool, or a version as its string); a ResourceSlice field is the scalar
there; a ConfigMap key is its `data` string.

Who wrote the config: the allocation copies into `status.allocation.devices.config` both
the configs of each request's DeviceClass (`spec.config`, `source: FromClass`: the
cluster admin's) and the claim's own (`spec.devices.config`, `source: FromClaim`: whoever
may create claims in the namespace; resource.k8s.io/v1 DeviceAllocationConfiguration:
"Source records whether the configuration comes from a class and thus is not something
that a normal user would have been able to set or from a claim"). The node's
`claimConfigSources` (netconf.CLAIM_CONFIG_SOURCES) decides: "any" runs either, "class"
refuses a request whose config of DRIVER is not FromClass (`ClaimConfigRefused`, code 7,
before any child runs; an absent or unknown source is not FromClass).

Validation (seed 004 "Validation"; `ClaimError`, code 7, naming pod, claim, request and
the rule; raised before any child runs): one config of DRIVER per request; allocation
mode ExactCount with count 1; the claim reserved for exactly this pod (by UID); a valid
`ifName` (names.ifname_problem; collisions with other attachments are plan.py's); a
plugin `type` that is a file name (invoke.check_plugin_type); a CNI config that parses
(chain.NetworkConfig). A claim that does not exist, is not allocated yet, or a
template's claim not yet in the pod's status is `ClaimNotReady` (code 11: retryable).

Pure except for the reads it makes through the API seam it is handed (the claim,
ResourceSlices and ConfigMaps, api.PodApi).
"""
from __future__ import annotations

import copy
import json
import logging
from dataclasses import dataclass
from typing import Any

from ..cni import invoke
from ..cni.chain import NetworkConfig
from ..cni.errors import CniError, ConfigError, TryAgain
from ..cni.names import ifname_problem, is_dns1123_label, is_dns1123_subdomain
from .status import status_ips

log = logging.getLogger("netattach")

DRIVER = "cni.dra.networking.x-k8s.io"
"""The CNI DRA driver's name (seed 004): requests allocated by it carry a CNIConfig; the
ResourceSlice's and allocation results' `driver`; the kubelet plugin's registered name
(daemon/dra.py)."""
DEVICE_CLASS = "cni.networking.x-k8s.io"
"""The DeviceClass seed 004 names (informational: the driver decides, not the class)."""
API_VERSIONS = ("cni.networking.x-k8s.io/v1alpha1", "cni.dra.networking.x-k8s.io/v1alpha1")
KINDS = ("CNI", "CNIConfig")
STATUS_PREFIX = "resourceclaim:"
"""network-status `name` of a claim attachment: `resourceclaim:<claim>/<request>`. The
colon cannot appear in a namespace, so no reader takes it for a NAD's `ns/name`."""

FROM_CLASS = "FromClass"
FROM_CLAIM = "FromClaim"
"""resource.k8s.io/v1 AllocationConfigSource values: a config of the request's DeviceClass,
or of the claim."""
ANY_SOURCE, CLASS_ONLY = "any", "class"
"""The values of the node's `claimConfigSources` (netconf.CLAIM_CONFIG_SOURCES)."""

READY = "Ready"
REASON_READY = "NetworkInterfaceReady"
REASON_NOT_READY = "NetworkInterfaceNotReady"
MESSAGE_READY = "netattach has configured the device."
DATA_MAX = 10 * 1024
"""resource.k8s.io/v1 AllocatedDeviceStatusDataMaxLength: a larger `data` is left out."""
MAX_IPS = 16
"""resource.k8s.io/v1 NetworkDeviceDataMaxIPs."""


class ClaimError(ConfigError):
    """A claim's network breaks a rule of seed 004 "Validation" (code 7)."""


class ClaimConfigRefused(ClaimError):
    """A request's config of DRIVER came from the claim, and the node's
    `claimConfigSources` is "class" (code 7). `refs`: every device of DRIVER allocated to
    the claim, whose status.devices entries report the refusal (add.py)."""
    refs: tuple[ClaimRef, ...] = ()


class ClaimNotReady(TryAgain):
    """A claim the pod references cannot be used yet: not found, not allocated, or a
    template's claim not yet in the pod's status (code 11: the kubelet retries)."""


@dataclass(frozen=True)
class ClaimRef:
    """The device a claim attachment uses: what DEL and GC need, without the API, to
    clear the claim's status entry. namespace/name/uid: the ResourceClaim; request: the
    allocation result's request ("req" or "req/subrequest"); driver/pool/device: the
    allocated device (status.devices' list keys)."""
    namespace: str
    name: str
    uid: str
    request: str
    driver: str
    pool: str
    device: str

    def to_dict(self) -> dict[str, str]:
        return {"namespace": self.namespace, "name": self.name, "uid": self.uid,
                "request": self.request, "driver": self.driver, "pool": self.pool,
                "device": self.device}

    @classmethod
    def from_dict(cls, data: object) -> ClaimRef | None:
        """None unless `data` has every key as a string."""
        keys = ("namespace", "name", "uid", "request", "driver", "pool", "device")
        if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in keys):
            return None
        return cls(*(data[k] for k in keys))

    @property
    def network(self) -> str:
        """The network-status name (STATUS_PREFIX)."""
        return f"{STATUS_PREFIX}{self.name}/{self.request}"

    def __str__(self) -> str:
        return f"ResourceClaim {self.namespace}/{self.name} request {self.request}"


@dataclass(frozen=True)
class ClaimNetwork:
    """One claim attachment, planned: `ref` the device, `interface` the CNIConfig's ifName
    (None: plan.py names it as an unnamed selection element), `config` the CNI config
    list to run (name, cniVersion, plugins with their args resolved)."""
    ref: ClaimRef
    interface: str | None
    config: NetworkConfig


# ---------------------------------------------------------------- the pod's claims

def pod_claims(pod: dict[str, Any]) -> list[tuple[str, str]]:
    """The pod's claims in `spec.resourceClaims` order: (the pod's name for the claim,
    the ResourceClaim's name). A template's claim is the one `status.resourceClaimStatuses`
    names for it (KEP-3063: the resourceclaim controller writes it there).

    Raises ClaimNotReady (11) naming a template claim not in the status yet (or
    explicitly null: none is needed), ClaimError (7) for a malformed entry.
    """
    spec = pod.get("spec") or {}
    refs = spec.get("resourceClaims") or []
    statuses = {s.get("name"): s.get("resourceClaimName")
                for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
                if isinstance(s, dict)}
    out = []
    for ref in refs if isinstance(refs, list) else []:
        if not isinstance(ref, dict) or not isinstance(ref.get("name"), str):
            raise ClaimError(f"spec.resourceClaims entry {ref!r} has no name")
        name = ref["name"]
        if isinstance(ref.get("resourceClaimName"), str):
            claim = ref["resourceClaimName"]
        elif isinstance(ref.get("resourceClaimTemplateName"), str):
            if name not in statuses:
                raise ClaimNotReady(
                    f"claim {name} (ResourceClaimTemplate {ref['resourceClaimTemplateName']}): "
                    "its ResourceClaim is not in the pod's status.resourceClaimStatuses yet")
            claim = statuses[name]
            if claim is None:
                continue  # the controller decided no claim is needed
        else:
            raise ClaimError(f"spec.resourceClaims {name}: neither resourceClaimName nor "
                             "resourceClaimTemplateName")
        if not is_dns1123_subdomain(claim):
            raise ClaimError(f"claim {name}: ResourceClaim name {claim!r} is not a DNS-1123 "
                             "subdomain")
        out.append((name, claim))
    return out


# ---------------------------------------------------------------- one claim

def _requests(claim: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """spec.devices.requests by name; a `firstAvailable` request's subrequests also as
    "req/sub". Each value is the request's ExactDeviceRequest shape (v1 `exactly`; the
    fields at the request's top level in v1beta1, as seed 004 writes them)."""
    out: dict[str, dict[str, Any]] = {}
    for r in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        if not isinstance(r, dict) or not isinstance(r.get("name"), str):
            continue
        out[r["name"]] = r["exactly"] if isinstance(r.get("exactly"), dict) else r
        for sub in r.get("firstAvailable") or []:
            if isinstance(sub, dict) and isinstance(sub.get("name"), str):
                out[f"{r['name']}/{sub['name']}"] = sub
    return out


def _applies(config: dict[str, Any], request: str) -> bool:
    """A config's `requests` names `request` ("req/sub": the parent too); none: all."""
    names = config.get("requests") or []
    return not names or request in names or request.split("/", 1)[0] in names


def _check_reserved(claim: dict[str, Any], where: str, pod_uid: str) -> None:
    reserved = (claim.get("status") or {}).get("reservedFor") or []
    pods = [r for r in reserved if isinstance(r, dict)]
    if len(pods) != 1 or pods[0].get("resource") != "pods" or \
            (pod_uid and pods[0].get("uid") != pod_uid):
        who = ", ".join(f"{r.get('resource')}/{r.get('name')} ({r.get('uid')})" for r in pods)
        raise ClaimError(f"{where}: must be reserved for exactly this pod (UID {pod_uid or '?'}),"
                         f" is reserved for {who or 'nothing'} (seed 004 Validation: a claim "
                         "for the CNI DRA driver is claimed by one and only one pod)")


def exact_one_problem(exact: dict[str, Any]) -> str | None:
    """Why a request's ExactDeviceRequest shape (`_requests`' values) does not ask for
    exactly one device, or None (seed 004 Validation: allocationMode ExactCount, the
    default, with count 1, the default). `netattach validate` words it the same way."""
    mode, count = exact.get("allocationMode") or "ExactCount", exact.get("count", 1)
    if mode != "ExactCount" or count != 1:
        return (f"allocationMode {mode} with count {count}; the CNI DRA driver's requests "
                "must use allocationMode ExactCount with count 1 (seed 004 Validation)")
    return None


def _check_exact_one(req: dict[str, Any] | None, where: str) -> None:
    if req is None:
        raise ClaimError(f"{where}: not in spec.devices.requests")
    problem = exact_one_problem(req)
    if problem:
        raise ClaimError(f"{where}: {problem}")


def claim_networks(claim: dict[str, Any], pod_uid: str, api: Any,
                   sources: str = ANY_SOURCE) -> list[ClaimNetwork]:
    """The attachments of one ResourceClaim (a JSON dict, resource.k8s.io/v1 or v1beta1
    shapes): one per allocation result of DRIVER, in result order, each validated
    (module doc) and with its arguments resolved through `api` (ResourceSlices,
    ConfigMaps: only when an argument reads them).

    pod_uid: the pod's metadata.uid ("" skips the UID comparison). sources: the node's
    `claimConfigSources`, ANY_SOURCE or CLASS_ONLY (module doc, "Who wrote the config").
    Returns [] for a claim without a result of DRIVER (another driver's devices). Raises
    ClaimNotReady (11) when it is not allocated; ClaimConfigRefused (7) naming the claim,
    the request, the config's source and `claimConfigSources` when `sources` is CLASS_ONLY
    and a request's config is not a DeviceClass's (checked once the claim is known to be
    reserved for this pod, before the config is parsed); ClaimError (7) naming the claim,
    request and rule; KubeError when a source cannot be read.
    """
    meta = claim.get("metadata") or {}
    ns, name, uid = meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", "")
    allocation = (claim.get("status") or {}).get("allocation")
    if not isinstance(allocation, dict):
        raise ClaimNotReady(f"ResourceClaim {ns}/{name} is not allocated yet")
    devices = allocation.get("devices") or {}
    results = [r for r in devices.get("results") or []
               if isinstance(r, dict) and r.get("driver") == DRIVER]
    if not results:
        return []
    _check_reserved(claim, f"ResourceClaim {ns}/{name}", pod_uid)
    requests = _requests(claim)
    configs = [c for c in devices.get("config") or []
               if isinstance(c, dict) and isinstance(c.get("opaque"), dict)
               and c["opaque"].get("driver") == DRIVER]
    if sources == CLASS_ONLY:  # every request, before any config is read
        for result in results:
            ref = _device(ns, name, uid, result)
            _check_class_held([c for c in configs if _applies(c, ref.request)], str(ref),
                              [_device(ns, name, uid, r) for r in results])
    seen: set[str] = set()
    out = []
    api = _Reads(api)  # sources shared by the requests are read once
    for result in results:
        ref = _device(ns, name, uid, result)
        request = ref.request
        where = str(ref)
        if request in seen:
            raise ClaimError(f"{where}: more than one device allocated; the CNI DRA driver's "
                             "requests must use allocationMode ExactCount with count 1 "
                             "(seed 004 Validation)")
        seen.add(request)
        _check_exact_one(requests.get(request), where)
        mine = [c for c in configs if _applies(c, request)]
        if len(mine) != 1:
            raise ClaimError(f"{where}: {len(mine)} configs of driver {DRIVER}; each request "
                             "must have one and only one (seed 004 Validation)")
        try:
            spec = parse_cni_config(mine[0]["opaque"].get("parameters"))
            config = to_netconf(spec, ref, api)
        except CniError as e:
            raise e.within(where) from None
        out.append(ClaimNetwork(ref, spec.ifname, config))
    return out


def _device(ns: str, name: str, uid: str, result: dict[str, Any]) -> ClaimRef:
    """The ClaimRef of one allocation result of DRIVER of claim ns/name (UID `uid`)."""
    return ClaimRef(ns, name, uid, str(result.get("request", "")), DRIVER,
                    str(result.get("pool", "")), str(result.get("device", "")))


def _check_class_held(configs: list[dict[str, Any]], where: str,
                      devices: list[ClaimRef]) -> None:
    """Raise ClaimConfigRefused (its `refs` the claim's `devices`) unless every config of
    DRIVER for one request (`configs`; `where` names the request) is a DeviceClass's
    (source FromClass): the node's claimConfigSources is "class"."""
    for config in configs:
        source = config.get("source")
        if source == FROM_CLASS:
            continue
        origin = (f"is the claim's own (source {FROM_CLAIM})" if source == FROM_CLAIM
                  else f"has source {source!r}, not {FROM_CLASS}")
        error = ClaimConfigRefused(
            f"{where}: its config of driver {DRIVER} {origin}, and this node's "
            f"claimConfigSources is \"{CLASS_ONLY}\": only a config held by the request's "
            f"DeviceClass (its spec.config, source {FROM_CLASS}) is run",
            "claimConfigSources is the node admin's choice in netattach's configuration "
            "(docs/dra.md); move the CNI config into the DeviceClass and request from it")
        error.refs = tuple(devices)
        raise error


# ---------------------------------------------------------------- CNIConfig

@dataclass(frozen=True)
class CniConfigSpec:
    """A parsed CNIConfig: ifname (None when not given), cni_version, name (the config
    list's own name when the parameters carry one, else None), plugins: [(type, config,
    args)] with args [(field path, source)]."""
    ifname: str | None
    cni_version: str | None
    name: str | None
    plugins: list[tuple[str, dict[str, Any], list[tuple[str, dict[str, Any]]]]]


def _first(d: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if k in d:
            return d[k]
    return None


def parse_cni_config(params: object) -> CniConfigSpec:
    """`opaque.parameters` -> CniConfigSpec, in every spelling of the module doc.

    Raises ClaimError (7) naming what is wrong: not an object, a wrong apiVersion or kind,
    `configName`, an invalid ifName (names.ifname_problem), no plugins, a plugin `type`
    that is not a file name (invoke.check_plugin_type), an argument without field or
    with no or two sources.
    """
    if not isinstance(params, dict):
        raise ClaimError("opaque.parameters is not an object (a CNIConfig)")
    if "configName" in params:
        raise ClaimError("opaque.parameters.configName (a CNIConfig by reference, seed 004 "
                         "Alternatives) is not supported: give the CNIConfig inline")
    if params.get("apiVersion", API_VERSIONS[0]) not in API_VERSIONS:
        raise ClaimError(f"opaque.parameters apiVersion {params.get('apiVersion')!r} is not "
                         f"one of {', '.join(API_VERSIONS)}")
    if params.get("kind", KINDS[0]) not in KINDS:
        raise ClaimError(f"opaque.parameters kind {params.get('kind')!r} is not one of "
                         f"{', '.join(KINDS)}")
    ifname = _first(params, "ifName", "name")
    if ifname is not None:
        problem = ifname_problem(ifname)
        if problem:
            raise ClaimError(f"ifName {ifname!r}: {problem}")
    inner = params.get("config")
    name = None
    version = params.get("cniVersion")
    plugins_raw = params.get("plugins")
    if plugins_raw is None and isinstance(inner, dict):  # the "Status" example's form
        plugins_raw = inner.get("plugins")
        version = inner.get("cniVersion", version)
        name = inner.get("name")
        if name is not None and not isinstance(name, str):
            raise ClaimError(f"config.name {name!r} is not a string")
    if version is not None and not isinstance(version, str):
        raise ClaimError(f"cniVersion {version!r} is not a string")
    if not isinstance(plugins_raw, list) or not plugins_raw:
        raise ClaimError("a CNIConfig needs `plugins`: a non-empty list")
    plugins = []
    for i, p in enumerate(plugins_raw):
        if not isinstance(p, dict):
            raise ClaimError(f"plugins[{i}] is not an object")
        try:
            invoke.check_plugin_type(p.get("type"))
        except CniError as e:
            raise ClaimError(f"plugins[{i}]: {e}") from None
        if "config" in p:
            if not isinstance(p["config"], dict):
                raise ClaimError(f"plugins[{i}].config is not an object")
            conf = copy.deepcopy(p["config"])
        else:
            conf = {k: copy.deepcopy(v) for k, v in p.items()
                    if k not in ("type", "arguments")}  # `args` is CNI's own here
        args_raw = _first(p, "args", "arguments") if "config" in p else p.get("arguments")
        if args_raw is not None and not isinstance(args_raw, list):
            raise ClaimError(f"plugins[{i}].arguments is not a list")
        args = []
        for j, a in enumerate(args_raw or []):
            args.append(_parse_arg(a, f"plugins[{i}].args[{j}]"))
        plugins.append((p["type"], conf, args))
    return CniConfigSpec(ifname, version, name, plugins)


_SOURCES = ("value", "attribute", "resourceSliceFieldRef", "configMapKeyRef")


def _parse_arg(a: object, where: str) -> tuple[str, dict[str, Any]]:
    """An argument -> (field path, source {kind: value}) with kind one of _SOURCES."""
    if not isinstance(a, dict):
        raise ClaimError(f"{where} is not an object")
    path = _first(a, "field", "fieldPath")
    if not isinstance(path, str) or not path or any(not s for s in path.split(".")):
        raise ClaimError(f"{where}: `field` (or `fieldPath`) must be a dotted path, not "
                         f"{path!r}")
    sources: dict[str, Any] = {}
    if "value" in a and a["value"] not in (None, ""):
        sources["value"] = a["value"]
    vf = a.get("valueFrom")
    if vf is not None:
        if not isinstance(vf, dict):
            raise ClaimError(f"{where}.valueFrom is not an object")
        attr = _first(vf, "attribute", "attributeRef")
        if attr is not None:
            sources["attribute"] = attr
        for k in ("resourceSliceFieldRef", "configMapKeyRef"):
            if vf.get(k) is not None:
                sources[k] = vf[k]
    if len(sources) != 1:
        raise ClaimError(f"{where} ({path}): needs exactly one of value, valueFrom.attribute, "
                         f"valueFrom.resourceSliceFieldRef, valueFrom.configMapKeyRef; has "
                         f"{', '.join(sources) or 'none'}")
    kind, value = next(iter(sources.items()))
    if kind == "value" and not isinstance(value, str):
        raise ClaimError(f"{where} ({path}): value must be a string")
    if kind == "attribute" and (not isinstance(value, str) or not value):
        raise ClaimError(f"{where} ({path}): attribute must be a non-empty string")
    if kind == "resourceSliceFieldRef" and not _field_ref(value):
        raise ClaimError(f"{where} ({path}): resourceSliceFieldRef needs a fieldPath")
    if kind == "configMapKeyRef":
        ok = isinstance(value, dict) and is_dns1123_subdomain(value.get("name"))
        keys = [k for k in ("key", "attribute", "attributeRef", "resourceSliceFieldRef")
                if isinstance(value, dict) and value.get(k) not in (None, "")]
        if not ok or len(keys) != 1:
            raise ClaimError(f"{where} ({path}): configMapKeyRef needs a ConfigMap name and "
                             "exactly one of key, attribute, resourceSliceFieldRef")
    return path, {kind: value}


def _field_ref(ref: object) -> str | None:
    if isinstance(ref, dict):
        ref = _first(ref, "fieldPath", "field")
    return ref if isinstance(ref, str) and ref else None


# ---------------------------------------------------------------- argument sources

class _Reads:
    """`api`'s reads of argument sources, each made once for all the requests of a claim:
    the driver's ResourceSlices, ConfigMaps by namespace and name."""

    def __init__(self, api: Any):
        self.api = api
        self._slices: dict[str, list[dict[str, Any]]] = {}
        self._configmaps: dict[tuple[str, str], dict[str, Any] | None] = {}

    def list_resource_slices(self, driver: str) -> list[dict[str, Any]]:
        if driver not in self._slices:
            self._slices[driver] = self.api.list_resource_slices(driver)
        return self._slices[driver]

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        if (namespace, name) not in self._configmaps:
            self._configmaps[namespace, name] = self.api.get_configmap(namespace, name)
        return self._configmaps[namespace, name]


class _Sources:
    """Lazily read sources of one request's arguments: the allocated device's
    ResourceSlice and ConfigMaps of the claim's namespace (read through `_Reads`)."""

    def __init__(self, ref: ClaimRef, api: Any):
        self.ref = ref
        self.api = api if isinstance(api, _Reads) else _Reads(api)
        self._slice: dict[str, Any] | None = None

    def slice(self) -> dict[str, Any]:
        if self._slice is None:
            self._slice = find_slice(self.api.list_resource_slices(self.ref.driver), self.ref)
        return self._slice

    def attribute(self, name: str) -> Any:
        return device_attribute(self.slice(), self.ref, name)

    def slice_field(self, ref: object) -> Any:
        path = _field_ref(ref) or ""
        value = get_path(self.slice(), path)
        if not _scalar(value):
            raise ClaimError(f"ResourceSlice {self.slice().get('metadata', {}).get('name')} "
                             f"has no scalar at {path}")
        return value

    def configmap(self, sel: dict[str, Any]) -> str:
        name = sel["name"]
        if "key" in sel and sel["key"] not in (None, ""):
            key = sel["key"]
        elif sel.get("resourceSliceFieldRef") not in (None, ""):
            key = self.slice_field(sel["resourceSliceFieldRef"])
        else:
            key = self.attribute(_first(sel, "attribute", "attributeRef"))
        cm = self.api.get_configmap(self.ref.namespace, name)
        if cm is None:
            raise ClaimError(f"ConfigMap {self.ref.namespace}/{name} not found")
        data = cm.get("data") or {}
        if str(key) not in data:
            raise ClaimError(f"ConfigMap {self.ref.namespace}/{name} has no key {key!r}")
        value = str(data[str(key)])
        if len(value) >= REDACT_MIN:
            _REDACTED[value] = f"<ConfigMap {self.ref.namespace}/{name} key {key}>"
        return value


REDACT_MIN = 4
"""Characters a ConfigMap value must have to be hidden (`redact`): a shorter one ("1",
"on") would hide parts of every message while hiding nothing worth hiding."""
_REDACTED: dict[str, str] = {}
"""ConfigMap values this process put into a claim's CNI config -> what names them."""


def redact(text: str) -> str:
    """`text` with every ConfigMap value an argument of this process read (at least
    REDACT_MIN characters) replaced by `<ConfigMap ns/name key k>`: a claim's status, the
    pod's events and the runtime's error (which the kubelet turns into an event) never
    carry a ConfigMap's value, which the pod owner may not be allowed to read (a child's
    error may quote its config). Longest values first, so one inside another is hidden
    whole."""
    for value in sorted(_REDACTED, key=len, reverse=True):
        if value in text:
            text = text.replace(value, _REDACTED[value])
    return text


def _scalar(value: object) -> bool:
    return isinstance(value, (str, int, bool)) and not isinstance(value, float)


def find_slice(slices: list[dict[str, Any]], ref: ClaimRef) -> dict[str, Any]:
    """The ResourceSlice of `ref`'s driver and pool that lists its device, of the pool's
    highest generation. Raises ClaimError (7) when none does."""
    best: dict[str, Any] | None = None
    for s in slices:
        spec = s.get("spec") or {}
        pool = spec.get("pool") or {}
        if spec.get("driver") != ref.driver or pool.get("name") != ref.pool:
            continue
        if not any(isinstance(d, dict) and d.get("name") == ref.device
                   for d in spec.get("devices") or []):
            continue
        if best is None or (pool.get("generation") or 0) > \
                ((best["spec"].get("pool") or {}).get("generation") or 0):
            best = s
    if best is None:
        raise ClaimError(f"no ResourceSlice of driver {ref.driver} lists device {ref.device} "
                         f"of pool {ref.pool}")
    return best


def device_attribute(slice_: dict[str, Any], ref: ClaimRef, name: str) -> Any:
    """The value of attribute `name` of `ref`'s device in `slice_`: a bare name is also
    looked up qualified by the driver's domain, and "<driver>/name" also bare (the API's
    QualifiedName rule). A typed attribute {string|int|bool|version} gives its value.
    Raises ClaimError (7) when the device has no such attribute."""
    device = next(d for d in slice_["spec"]["devices"] if d.get("name") == ref.device)
    attrs = device.get("attributes") or (device.get("basic") or {}).get("attributes") or {}
    candidates = [name]
    if "/" in name:
        domain, _, bare = name.partition("/")
        if domain == ref.driver:
            candidates.append(bare)
    else:
        candidates.append(f"{ref.driver}/{name}")
    for c in candidates:
        if isinstance(attrs.get(c), dict):
            for kind in ("string", "int", "bool", "version"):
                if kind in attrs[c]:
                    return attrs[c][kind]
    raise ClaimError(f"device {ref.device} of pool {ref.pool} (ResourceSlice "
                     f"{slice_.get('metadata', {}).get('name')}) has no attribute {name!r}")


def get_path(obj: Any, path: str) -> Any:
    """The value at dotted `path` in `obj` (module doc), None when absent."""
    for seg in path.split("."):
        if isinstance(obj, list) and seg.isdigit() and int(seg) < len(obj):
            obj = obj[int(seg)]
        elif isinstance(obj, dict):
            obj = obj.get(seg)
        else:
            return None
    return obj


def set_path(obj: dict[str, Any], path: str, value: Any) -> None:
    """Set dotted `path` in `obj` to `value` (module doc). Raises ClaimError (7) when a
    segment meets a scalar, or a list index that does not exist."""
    segs = path.split(".")
    cur: Any = obj
    for i, seg in enumerate(segs):
        last = i == len(segs) - 1
        if isinstance(cur, list):
            if not seg.isdigit() or int(seg) >= len(cur):
                raise ClaimError(f"field {path}: {'.'.join(segs[:i]) or '(top)'} is a list "
                                 f"without an element {seg}")
            if last:
                cur[int(seg)] = value
            else:
                cur = cur[int(seg)]
        elif isinstance(cur, dict):
            if last:
                cur[seg] = value
            else:
                if cur.get(seg) is None:
                    cur[seg] = {}
                cur = cur[seg]
        else:
            raise ClaimError(f"field {path}: {'.'.join(segs[:i])} is not an object or list")


def to_netconf(spec: CniConfigSpec, ref: ClaimRef, api: Any,
               offline: bool = False) -> NetworkConfig:
    """The CNI config list to run for `spec` on `ref`: `name` the config's own name,
    else the request's name (host-local keys its store by it, so it must be the same for
    every pod using that config; a generated claim name would not be), `cniVersion` the
    config's (else 1.0.0), each plugin's config with `type` and its arguments set.
    Raises ClaimError (7) for a config that does not parse (chain.NetworkConfig) or an
    argument that cannot be resolved; KubeError when a source cannot be read.
    `offline` (netattach validate): an argument read from a source is set to a
    placeholder string naming it, and `api` is not used."""
    sources = _Sources(ref, api)
    plugins = []
    for ptype, conf, args in spec.plugins:
        plugin = {"type": ptype, **{k: v for k, v in copy.deepcopy(conf).items() if k != "type"}}
        for path, source in args:
            kind, arg = next(iter(source.items()))
            try:
                if kind == "value":
                    value = arg
                elif offline:
                    value = f"<{kind} {json.dumps(arg, sort_keys=True)}>"
                elif kind == "attribute":
                    value = sources.attribute(arg)
                elif kind == "resourceSliceFieldRef":
                    value = sources.slice_field(arg)
                else:
                    value = sources.configmap(arg)
            except CniError as e:
                raise e.within(f"plugin {ptype} argument {path}") from None
            set_path(plugin, path, value)
        plugins.append(plugin)
    name = spec.name or ref.request.replace("/", "-")
    raw = {"cniVersion": spec.cni_version or "1.0.0", "name": name, "plugins": plugins}
    try:
        return NetworkConfig.from_dict(raw, str(ref))
    except CniError as e:
        raise ClaimError(f"CNI config does not parse: {e.msg}") from None


# ---------------------------------------------------------------- the pod's claim networks

def resolve(pod: dict[str, Any], api: Any, sources: str = ANY_SOURCE) -> list[ClaimNetwork]:
    """Every claim attachment of `pod` (a JSON dict with spec and status), in
    `spec.resourceClaims` order then result order, through `api` (get_resource_claim,
    list_resource_slices, get_configmap); `sources` the node's claimConfigSources
    (claim_networks). Raises ClaimNotReady (11), ClaimError (7; ClaimConfigRefused among
    them), KubeError (11), each naming the claim."""
    meta = pod.get("metadata") or {}
    ns, uid = meta.get("namespace", ""), meta.get("uid", "")
    if not is_dns1123_label(ns):
        raise ClaimError(f"pod namespace {ns!r} is not a DNS-1123 label")
    out: list[ClaimNetwork] = []
    for pod_name, claim_name in pod_claims(pod):
        claim = api.get_resource_claim(ns, claim_name)
        if claim is None:
            raise ClaimNotReady(f"claim {pod_name}: ResourceClaim {ns}/{claim_name} not found")
        out += claim_networks(claim, uid, api, sources)
    return out


# ---------------------------------------------------------------- status.devices

def device_status(ref: ClaimRef, ifname: str, result: dict[str, Any] | None,
                  error: str | None, now: str) -> dict[str, Any]:
    """The claim's `status.devices` entry for `ref` (seed 004 "Status", KEP-4817):
    driver/pool/device, condition Ready True (reason NetworkInterfaceReady) when `error`
    is None, else False (NetworkInterfaceNotReady, message = the error); `data` the CNI
    result (left out over DATA_MAX bytes); `networkData` {interfaceName, ips (CIDR
    strings in canonical form, each once, at most MAX_IPS: what the API server accepts,
    see network_data), hardwareAddress} from the result's interface named
    `ifname` that is in a sandbox (the pod's: its `sandbox` is the netns path; seed 004
    says "empty Sandbox", but that is the host side of an interface, and its own example
    shows the pod's interface with the sandbox set). `now`: RFC 3339 time of the
    condition's lastTransitionTime."""
    ok = error is None
    entry: dict[str, Any] = {
        "driver": ref.driver, "pool": ref.pool, "device": ref.device,
        "conditions": [{"type": READY, "status": "True" if ok else "False",
                        "reason": REASON_READY if ok else REASON_NOT_READY,
                        "message": (MESSAGE_READY if ok else redact(str(error)))[:32768],
                        "lastTransitionTime": now}],
    }
    if ok and isinstance(result, dict):
        if len(json.dumps(result)) <= DATA_MAX:
            entry["data"] = result
        entry["networkData"] = network_data(result, ifname)
    return entry


def network_data(result: dict[str, Any], ifname: str) -> dict[str, Any]:
    """{interfaceName, ips, hardwareAddress} of `ifname` in a CNI result >= 0.3.0 (see
    device_status); keys without a value are left out. `ips` are in CIDR form whatever
    the node's networkStatusIPFormat: resource.k8s.io NetworkDeviceData.ips are "in the
    CIDR notation" (its API doc), and the API server refuses an entry that is not an
    address with its prefix length in canonical form, or one listed twice
    (apimachinery's IsValidInterfaceAddress, a set of at most 16); status.status_ips
    with `cidr` writes them so, leaving out an address that cannot be."""
    out: dict[str, Any] = {"interfaceName": ifname}
    found = result.get("interfaces")
    interfaces: list[Any] = found if isinstance(found, list) else []
    index = next((i for i, f in enumerate(interfaces) if isinstance(f, dict)
                  and f.get("name") == ifname and f.get("sandbox")), None)
    if index is not None:
        mac = interfaces[index].get("mac")
        if isinstance(mac, str) and mac:
            out["hardwareAddress"] = mac
    ips = [ip.get("address") for ip in result.get("ips") or []
           if isinstance(ip, dict) and isinstance(ip.get("address"), str)
           and (index is None or ip.get("interface") in (None, index))]
    written = status_ips(ips, cidr=True)
    if written:
        out["ips"] = written[:MAX_IPS]
    return out
