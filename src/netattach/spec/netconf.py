"""The meta-plugin's own configuration: the conf (or conflist entry) the runtime passes on stdin.

Keys are Multus-compatible, so a Multus user switches by changing `type`:
`clusterNetwork`, `defaultNetworks`, `kubeconfig`, `confDir`, `cniDir`, `binDir`,
`logFile`, `logLevel`, `logToStderr`, `multusNamespace`, `systemNamespaces`,
`namespaceIsolation`, `globalNamespaces`, `readinessindicatorfile`, plus the CNI
keys `name`, `type`, `cniVersion`, `capabilities`, `runtimeConfig`, `prevResult`.
netattach adds `logFormat` (LOG_FORMAT_NAMES: text or JSON lines), `apiTimeout`,
`delegateTimeout` and `readinessTimeout` (seconds),
`podResourcesSocket` (the kubelet's PodResources API, for NADs annotated
`k8s.v1.cni.cncf.io/resourceName`), `deviceInfoDir` (Device Information
Specification files), `resourceClaims` (networks from DRA ResourceClaims are read
from the pod's spec; true makes ADD read the pod even when the runtime passes its
annotations, so that claims are seen under containerd; false by default, so a thin
ADD without claims keeps the one request less), `claimConfigSources`
(CLAIM_CONFIG_SOURCES: whether a claim's own CNI config is run, or only a
DeviceClass's), `networkStatusIPFormat` (NETWORK_STATUS_IP_FORMATS: network-status
`ips` as bare addresses, the default, or in CIDR form), `hotplug` (thick mode: the
node daemon attaches and detaches networks when a running pod's selection changes,
for the sandboxes ADDed with it; false by default; daemon/hotplug.py), and the caps
on what one pod may cost a node (issue 21):
`maxNetworksPerPod` (DEFAULT_MAX_NETWORKS_PER_POD secondary networks) and
`maxSameNetworkPerPod` (DEFAULT_MAX_SAME_NETWORK_PER_POD attachments of one
NetworkAttachmentDefinition; networks.check_caps). `apiTimeout` (5 s)
bounds all of an ADD's API requests and retry pauses together, not each request: an
ADD never waits for the API server longer than that in total, then fails with code 11
naming the server (or, for
the network-status PATCH and events after the children succeeded, logs a warning);
docs/architecture.md "Decisions" says why 5 s. Unknown keys are
ignored (CNI configs carry plugin-specific keys freely); a known key with a bad
value fails with CNI code 7 naming the key.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from ..cni import version
from ..cni.errors import ConfigError, VersionError
from ..cni.names import is_dns1123_label, network_name_problem
from .paths import DEFAULT_CNI_DIR as DEFAULT_CNI_DIR  # its home: spec/paths.py

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)
if TYPE_CHECKING:
    from typing import Any

DEFAULT_CONF_DIR = "/etc/cni/net.d"
MULTUS_CONF_DIR = "/etc/cni/multus/net.d"
"""Multus' default `confDir`: searched after DEFAULT_CONF_DIR when `confDir` is not set,
so that on-disk configs of NADs without spec.config are found after a switch."""
DEFAULT_GLOBAL_NAMESPACES = ("default",)
"""Multus' default `globalNamespaces`: with namespaceIsolation on, every pod may use the
NetworkAttachmentDefinitions in `default` unless `globalNamespaces` says otherwise."""
MULTUS_ONLY_KEYS: dict[str, str] = {
    "delegates": "netattach takes the cluster default network from clusterNetwork only",
    "socketDir": "Multus thick mode's daemon key; netattach's is `netattach daemon --socket-dir`",
    "cniConfigDir": "thick mode's daemon key; netattach install writes the conflist",
    "multusConfigFile": "thick mode's daemon key; netattach install writes the conflist",
    "multusAutoconfigDir": "thick mode's daemon key; netattach install writes the conflist",
    "multusMasterCNI": "thick mode's daemon key; netattach install finds the primary config",
    "forceCNIVersion": "thick mode's daemon key; netattach serves the conflist's cniVersion",
    "overrideNetworkName": "thick mode's daemon key",
    "chrootDir": "thick mode's daemon key",
    "metricsPort": "thick mode's daemon key",
    "enablePprof": "thick mode's daemon key",
    "perNodeCertificate": "thick mode's daemon key; netattach install writes the kubeconfig",
    "connectionLimit": "thick mode's daemon key",
}
"""Multus configuration keys that netattach reads but does not honour -> why; each
invocation that finds one logs one WARNING naming them (`NetConf.unhonoured`)."""
DEFAULT_BIN_DIR = "/opt/cni/bin"
DEFAULT_NAMESPACE = "kube-system"
DEFAULT_POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
"""The kubelet's PodResources socket (node/devices.py asks it for device IDs)."""
DEFAULT_DEVICE_INFO_DIR = "/var/run/k8s.cni.cncf.io/devinfo"
"""The device-info files' dir (node/devices.py reads and writes them)."""
LOG_LEVEL_NAMES = ("panic", "error", "warning", "info", "debug", "verbose")
"""The `logLevel` values netattach accepts (Multus'), most severe first;
node/logsetup.py's LOG_LEVELS maps each to a Python logging level."""
LOG_FORMAT_NAMES = ("text", "json")
"""The `logFormat` values, the default first: one text line, or one JSON object, a
record (node/logsetup.py; docs/configuration.md, "Logs")."""
CONFLIST_NAME = "00-netattach.conflist"
"""The conflist `netattach install` writes: sorts before the cluster default network's
(node/nodefiles.py names netattach's files on a node)."""
DEFAULT_MAX_NETWORKS_PER_POD = 32
"""`maxNetworksPerPod`: the secondary networks one pod may have (its selection elements,
`defaultNetworks` and its ResourceClaim networks together). A pod rarely has more than a
handful; 32 leaves ample room for unusual pods while bounding what one tenant's
annotation can make a node do: each network is an API request for its
NetworkAttachmentDefinition, a chain of child plugins run on ADD and again on DEL, an
interface, an IPAM allocation and an entry in the state file and the network-status
(docs/security.md, "Bounded work per pod")."""
DEFAULT_MAX_SAME_NETWORK_PER_POD = 4
"""`maxSameNetworkPerPod`: how many of those may select the same
NetworkAttachmentDefinition. Multi-net spec §4.2 allows repeats (one attachment and one
interface per element), and two or three interfaces on one network is a real if rare
pattern; beyond a few, repeats mostly drain the network's IPAM pool."""
MAX_CAP = 1024
"""The largest value either cap may be set to: the caps are bounds, not switches."""
CLAIM_CONFIG_SOURCES = ("any", "class")
"""`claimConfigSources` values: "any" (the default: today's behaviour, seed 004's
examples put the CNI config in the claim) runs the config of the CNI DRA driver whether
the allocation says it came from the request's DeviceClass (`source: FromClass`) or from
the claim (`FromClaim`); "class" runs only a DeviceClass's, refusing a claim's config
(claims.ClaimConfigRefused). docs/dra.md "Who writes the CNI config" says why the
default is "any"."""
DEFAULT_CLAIM_CONFIG_SOURCES = "any"
NETWORK_STATUS_IP_FORMATS = ("address", "cidr")
"""`networkStatusIPFormat` values: how each `ips` entry of the network-status annotation
is written. "address" (the default): a bare address ("10.1.1.5"), as Multus writes it
and as the annotation's readers parse it (net.ParseIP in multi-networkpolicy-iptables'
iptables rules, whereabouts' reconciler, KubeVirt; docs/behaviour.md "The addresses in
network-status"). "cidr": with its prefix length ("10.1.1.5/24"), the form of the
multi-net spec's §5.4 examples (status.status_ips). A node setting (the admin's conf),
never a tenant's."""
DEFAULT_NETWORK_STATUS_IP_FORMAT = "address"

_STR = {"type": "string"}
# A path with a NUL cannot name a file: refused here, not as an exception at its first use.
_NO_NUL = r"^[^\x00]*$"
_PATH = {"type": "string", "minLength": 1, "pattern": _NO_NUL}
_STR_LIST = {"type": "array", "items": {"type": "string"}}
_SECONDS = {"type": "number", "exclusiveMinimum": 0, "maximum": 3600}
_CAP = {"type": "integer", "minimum": 1, "maximum": MAX_CAP}

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["type", "clusterNetwork"],
    "properties": {
        "name": _STR,
        "type": {"type": "string", "minLength": 1},
        "cniVersion": {"type": "string"},
        "kubeconfig": _PATH,
        "clusterNetwork": _PATH,
        "defaultNetworks": {"type": "array", "items": {"type": "string", "minLength": 1}},
        "confDir": _PATH,
        "cniDir": _PATH,
        "binDir": _PATH,
        "logFile": _PATH,
        "logLevel": {"enum": list(LOG_LEVEL_NAMES)},
        "logFormat": {"enum": list(LOG_FORMAT_NAMES)},
        # Multus' logOptions (lumberjack): rotation of logFile.
        "logOptions": {"type": "object", "additionalProperties": False, "properties": {
            "maxAge": {"type": "integer", "minimum": 0},
            "maxSize": {"type": "integer", "minimum": 0},
            "maxBackups": {"type": "integer", "minimum": 0},
            "compress": {"type": "boolean"},
        }},
        "auxiliaryCNIChainName": {"type": "string"},
        "retryDeleteOnError": {"type": "boolean"},
        "logToStderr": {"type": "boolean"},
        "multusNamespace": _STR,  # a DNS-1123 label: names.is_dns1123_label, below
        "systemNamespaces": _STR_LIST,
        "namespaceIsolation": {"type": "boolean"},
        # Multus writes a comma-separated string; a list is accepted as well.
        "globalNamespaces": {"anyOf": [_STR, _STR_LIST]},
        "readinessindicatorfile": {"type": "string", "pattern": _NO_NUL},
        "capabilities": {"type": "object", "additionalProperties": {"type": "boolean"}},
        "runtimeConfig": {"type": "object"},
        "prevResult": {"type": "object"},
        "apiTimeout": _SECONDS,
        "delegateTimeout": _SECONDS,
        "readinessTimeout": _SECONDS,
        "podResourcesSocket": _PATH,
        "deviceInfoDir": _PATH,
        # networks from DRA ResourceClaims (claims.py): read the pod even when the
        # runtime passes its annotations (the claims are in its spec)
        "resourceClaims": {"type": "boolean"},
        # hot-plug (issue 13; thick mode): the node daemon applies later changes of the
        # pod's selection to the sandboxes ADDed with it
        "hotplug": {"type": "boolean"},
        # the plugin types NADs' and claims' configs may name (docs/security.md); unset:
        # every plugin in binDir but the delegating meta-plugins
        "allowedPluginTypes": {"type": "array", "uniqueItems": True, "items": {
            "type": "string", "minLength": 1, "pattern": "^[^/\\x00]+$"}},
        # bounded work per pod (issue 21): networks.check_caps
        "maxNetworksPerPod": _CAP,
        "maxSameNetworkPerPod": _CAP,
        # which configs of a DRA claim's allocation are run (claims.py; docs/dra.md):
        # "any" (a DeviceClass's or the claim's own), "class" (a DeviceClass's only)
        "claimConfigSources": {"enum": list(CLAIM_CONFIG_SOURCES)},
        # the form of network-status `ips` entries (status.status_ips): "address" (bare,
        # Multus' and what its readers parse) or "cidr" (the spec's §5.4 examples' form)
        "networkStatusIPFormat": {"enum": list(NETWORK_STATUS_IP_FORMATS)},
        # written by `netattach install` only, when netattach is uninstalled (retired.py)
        "retired": {"type": "object", "required": ["conflist"], "additionalProperties": False,
                    "properties": {"conflist": _PATH}},
    },
}


@dataclass(frozen=True)
class NetConf:
    """The validated configuration, defaults applied. Times in seconds.

    conf_dirs: where on-disk delegate configs are searched, in order (`confDir`, or
    DEFAULT_CONF_DIR then MULTUS_CONF_DIR when it is not set). log_options: Multus'
    `logOptions` (maxSize MB, maxAge days, maxBackups, compress; None when absent: no
    rotation; a key left out gets Multus' default). auxiliary_chain:
    `auxiliaryCNIChainName` or None. unhonoured: Multus keys present in the config
    that netattach does not honour -> why (MULTUS_ONLY_KEYS). retired_conflist: the
    host path of the conflist in `retired.conflist`, set only in the retired
    configuration `netattach install` writes when netattach is uninstalled
    (retired.py); None otherwise. allowed_plugin_types: `allowedPluginTypes`, the
    plugin types a NetworkAttachmentDefinition's or a claim's config may name; None:
    any but the delegating meta-plugins (policy.check_delegate). max_networks_per_pod,
    max_same_network_per_pod: `maxNetworksPerPod` and `maxSameNetworkPerPod` (counts;
    networks.check_caps). claim_config_sources: `claimConfigSources`, one of
    CLAIM_CONFIG_SOURCES: whether a DRA claim's own CNI config is run ("any") or only a
    DeviceClass's ("class"). network_status_ip_format: `networkStatusIPFormat`, one of
    NETWORK_STATUS_IP_FORMATS: network-status `ips` as bare addresses ("address") or in
    CIDR form ("cidr").
    """
    raw: dict[str, Any]
    name: str
    cni_version: str
    cluster_network: str
    default_networks: tuple[str, ...] = ()
    kubeconfig: str | None = None
    conf_dirs: tuple[str, ...] = (DEFAULT_CONF_DIR, MULTUS_CONF_DIR)
    cni_dir: str = DEFAULT_CNI_DIR
    bin_dir: str = DEFAULT_BIN_DIR
    log_file: str | None = None
    log_level: str = "info"
    log_format: str = "text"
    log_to_stderr: bool = True
    log_options: dict[str, Any] | None = None
    multus_namespace: str = DEFAULT_NAMESPACE
    system_namespaces: tuple[str, ...] = (DEFAULT_NAMESPACE,)
    namespace_isolation: bool = False
    global_namespaces: tuple[str, ...] = DEFAULT_GLOBAL_NAMESPACES
    readiness_indicator_file: str | None = None
    runtime_config: dict[str, Any] = field(default_factory=dict)
    api_timeout: float = 5.0
    delegate_timeout: float = 60.0
    readiness_timeout: float = 30.0
    pod_resources_socket: str = DEFAULT_POD_RESOURCES_SOCKET
    device_info_dir: str = DEFAULT_DEVICE_INFO_DIR
    auxiliary_chain: str | None = None
    unhonoured: dict[str, str] = field(default_factory=dict)
    resource_claims: bool = False
    hotplug: bool = False
    retired_conflist: str | None = None
    allowed_plugin_types: frozenset[str] | None = None
    max_networks_per_pod: int = DEFAULT_MAX_NETWORKS_PER_POD
    max_same_network_per_pod: int = DEFAULT_MAX_SAME_NETWORK_PER_POD
    claim_config_sources: str = DEFAULT_CLAIM_CONFIG_SOURCES
    network_status_ip_format: str = DEFAULT_NETWORK_STATUS_IP_FORMAT

    @property
    def network_status_cidr(self) -> bool:
        """True when network-status `ips` are written in CIDR form (status.status_entry's
        `cidr`): `networkStatusIPFormat` "cidr"."""
        return self.network_status_ip_format == "cidr"

    @property
    def conf_dir(self) -> str:
        """The first of conf_dirs: where a `clusterNetwork` name is looked up first."""
        return self.conf_dirs[0]


def _invalid(key: str, reason: str, details: str = "") -> ConfigError:
    return ConfigError(f"invalid netattach configuration: key {key!r}: {reason}", details)


def _check_default_networks(refs: list[str], max_networks: int, max_same: int) -> None:
    """Raise ConfigError (7) unless `defaultNetworks` reads, joined, as the pod annotation's
    comma format (what ADD does with it): one [namespace/]name[@interface] per entry,
    DNS-1123 names (§3.3), no interface twice; and unless it fits the caps every pod's
    networks must fit (`max_networks` entries, `max_same` of one NAD), or every pod
    outside systemNamespaces would be refused. Checked before anything uses a name.
    The selection parser is imported only when there is a list to check (STATUS runs
    this at every CRI Status call, most configs have no defaultNetworks)."""
    if not refs:
        return
    from .selection import SelectionError, parse_network_selection, selection_counts
    try:
        elements = parse_network_selection(",".join(refs), DEFAULT_NAMESPACE)
        index, reason = None, ("" if len(elements) == len(refs) else
                               "each entry must name one network, as [namespace/]name[@interface]")
    except SelectionError as e:
        index, reason = e.index, e.reason
    if reason:
        if index is None or index >= len(refs):
            raise _invalid("defaultNetworks", reason)
        raise _invalid(f"defaultNetworks.{index}", f"{refs[index]!r}: {reason}")
    if len(elements) > max_networks:
        raise _invalid("defaultNetworks", f"{len(elements)} networks, more than "
                       f"maxNetworksPerPod ({max_networks}) allows a pod")
    for ref, count in selection_counts(elements).items():
        if count > max_same:
            raise _invalid("defaultNetworks", f"names {ref} {count} times, more than "
                           f"maxSameNetworkPerPod ({max_same}) allows a pod")


def _unhonoured(config: dict[str, Any]) -> dict[str, str]:
    out = {k: why for k, why in MULTUS_ONLY_KEYS.items() if k in config}
    if config.get("retryDeleteOnError") is False:
        out["retryDeleteOnError"] = ("netattach always goes on past a failed delegate DEL "
                                     "(multi-net spec §7.2), as with true")
    return out


def parse_netconf(config: dict[str, Any]) -> NetConf:
    """Validate the stdin config and apply defaults.

    config: the decoded stdin JSON object.
    Returns NetConf. Raises VersionError (1) when `cniVersion` is not one netattach
    supports (cni.version.SUPPORTED_VERSIONS; as libcni's skel does, before anything
    runs), ConfigError (7) naming the first bad key and why (CNI SPEC.md "Error
    codes": 7 = invalid network config).
    """
    from . import _netconf_validator
    check: Callable[[object], object] = _netconf_validator.validate  # generated, untyped
    try:  # generated from SCHEMA, stdlib only; its exception words the first problem
        check(config)
    except _netconf_validator.JsonSchemaValueException as e:
        raise _invalid(e.path or "(top level)", e.reason) from None
    cni_version = config.get("cniVersion", version.DEFAULT_VERSION)
    try:
        version.parse(cni_version)
    except VersionError:
        raise _invalid("cniVersion", f"{cni_version!r} is not a CNI version (MAJOR.MINOR.PATCH)") \
            from None
    try:
        version.check_supported(cni_version, "netattach cniVersion")
    except VersionError as e:
        raise e.within("invalid netattach configuration") from None
    namespace = config.get("multusNamespace", DEFAULT_NAMESPACE)
    if not is_dns1123_label(namespace):
        raise _invalid("multusNamespace", f"{namespace!r} is not a namespace name: a "
                       "DNS-1123 label (at most 63 lower-case alphanumerics or '-', starting "
                       "and ending alphanumeric)")
    max_networks = int(config.get("maxNetworksPerPod", DEFAULT_MAX_NETWORKS_PER_POD))
    max_same = int(config.get("maxSameNetworkPerPod", DEFAULT_MAX_SAME_NETWORK_PER_POD))
    _check_default_networks(config.get("defaultNetworks", []), max_networks, max_same)
    aux = config.get("auxiliaryCNIChainName") or None
    if aux is not None and network_name_problem(aux):
        raise _invalid("auxiliaryCNIChainName", f"{aux!r}: {network_name_problem(aux)} (it names "
                       "a subdirectory of the cluster default network's config dir)")
    g = config.get("globalNamespaces")
    global_namespaces: tuple[str, ...]
    if g is None or (isinstance(g, str) and not g.strip()):
        global_namespaces = DEFAULT_GLOBAL_NAMESPACES  # Multus reads "" as unset too
    else:
        items = g.split(",") if isinstance(g, str) else g
        global_namespaces = tuple(n for n in (s.strip() for s in items) if n)
    conf_dirs = ((config["confDir"],) if "confDir" in config
                 else (DEFAULT_CONF_DIR, MULTUS_CONF_DIR))
    retired = config["retired"]["conflist"] if "retired" in config else None
    if retired is not None:
        if not retired.startswith("/") or os.path.basename(retired) != CONFLIST_NAME:
            raise _invalid("retired.conflist", f"{retired!r} is not an absolute path to "
                           f"{CONFLIST_NAME}, the conflist `netattach install` writes")
    return NetConf(
        raw=config,
        name=config.get("name", "netattach"),
        cni_version=cni_version,
        cluster_network=config["clusterNetwork"],
        default_networks=tuple(config.get("defaultNetworks", ())),
        kubeconfig=config.get("kubeconfig"),
        conf_dirs=conf_dirs,
        cni_dir=config.get("cniDir", DEFAULT_CNI_DIR),
        bin_dir=config.get("binDir", DEFAULT_BIN_DIR),
        log_file=config.get("logFile"),
        log_level=config.get("logLevel", "info"),
        log_format=config.get("logFormat", LOG_FORMAT_NAMES[0]),
        log_to_stderr=config.get("logToStderr", True),
        log_options=(dict(config["logOptions"]) if isinstance(config.get("logOptions"), dict)
                     else None),
        multus_namespace=namespace,
        system_namespaces=tuple(config.get("systemNamespaces", (DEFAULT_NAMESPACE,))),
        namespace_isolation=config.get("namespaceIsolation", False),
        global_namespaces=global_namespaces,
        readiness_indicator_file=config.get("readinessindicatorfile") or None,
        runtime_config=dict(config.get("runtimeConfig", {})),
        api_timeout=float(config.get("apiTimeout", 5.0)),
        delegate_timeout=float(config.get("delegateTimeout", 60.0)),
        readiness_timeout=float(config.get("readinessTimeout", 30.0)),
        pod_resources_socket=config.get("podResourcesSocket", DEFAULT_POD_RESOURCES_SOCKET),
        device_info_dir=config.get("deviceInfoDir", DEFAULT_DEVICE_INFO_DIR),
        auxiliary_chain=aux,
        unhonoured=_unhonoured(config),
        resource_claims=config.get("resourceClaims", False),
        hotplug=config.get("hotplug", False),
        retired_conflist=retired,
        allowed_plugin_types=(frozenset(config["allowedPluginTypes"])
                              if "allowedPluginTypes" in config else None),
        max_networks_per_pod=max_networks,
        max_same_network_per_pod=max_same,
        claim_config_sources=config.get("claimConfigSources", DEFAULT_CLAIM_CONFIG_SOURCES),
        network_status_ip_format=config.get("networkStatusIPFormat",
                                            DEFAULT_NETWORK_STATUS_IP_FORMAT),
    )
