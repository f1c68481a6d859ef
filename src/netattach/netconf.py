"""The meta-plugin's own configuration: the conf (or conflist entry) the runtime passes on stdin.

Keys are Multus-compatible, so a Multus user switches by changing `type`:
`clusterNetwork`, `defaultNetworks`, `kubeconfig`, `confDir`, `cniDir`, `binDir`,
`logFile`, `logLevel`, `logToStderr`, `multusNamespace`, `systemNamespaces`,
`namespaceIsolation`, `globalNamespaces`, `readinessindicatorfile`, plus the CNI
keys `name`, `type`, `cniVersion`, `capabilities`, `runtimeConfig`, `prevResult`.
netattach adds `apiTimeout`, `delegateTimeout` and `readinessTimeout` (seconds),
`podResourcesSocket` (the kubelet's PodResources API, for NADs annotated
`k8s.v1.cni.cncf.io/resourceName`) and `deviceInfoDir` (Device Information
Specification files). `apiTimeout` (5 s) bounds all of an ADD's API
requests and retry pauses together, not each request: an ADD never waits for the API
server longer than that in total, then fails with code 11 naming the server (or, for
the network-status PATCH and events after the children succeeded, logs a warning);
docs/architecture.md "Decisions" says why 5 s. Unknown keys are
ignored (CNI configs carry plugin-specific keys freely); a known key with a bad
value fails with CNI code 7 naming the key.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .cni.errors import CniError, INVALID_CONFIG
from .devices import DEVINFO_DIR, KUBELET_SOCKET
from .selection import SelectionError, parse_network_selection

DEFAULT_CONF_DIR = "/etc/cni/net.d"
DEFAULT_CNI_DIR = "/var/lib/cni/netattach"
DEFAULT_BIN_DIR = "/opt/cni/bin"
DEFAULT_NAMESPACE = "kube-system"
DEFAULT_POD_RESOURCES_SOCKET = KUBELET_SOCKET
DEFAULT_DEVICE_INFO_DIR = DEVINFO_DIR

_DNS1123_LABEL = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_STR = {"type": "string"}
# A path with a NUL cannot name a file: refused here, not as an exception at its first use.
_NO_NUL = r"^[^\x00]*$"
_PATH = {"type": "string", "minLength": 1, "pattern": _NO_NUL}
_STR_LIST = {"type": "array", "items": {"type": "string"}}
_SECONDS = {"type": "number", "exclusiveMinimum": 0, "maximum": 3600}

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["type", "clusterNetwork"],
    "properties": {
        "name": _STR,
        "type": {"type": "string", "minLength": 1},
        "cniVersion": {"type": "string", "pattern": r"^\d+\.\d+\.\d+$"},
        "kubeconfig": _PATH,
        "clusterNetwork": _PATH,
        "defaultNetworks": {"type": "array", "items": {"type": "string", "minLength": 1}},
        "confDir": _PATH,
        "cniDir": _PATH,
        "binDir": _PATH,
        "logFile": _PATH,
        "logLevel": {"enum": ["panic", "error", "warning", "info", "debug", "verbose"]},
        "logToStderr": {"type": "boolean"},
        "multusNamespace": {"type": "string", "pattern": _DNS1123_LABEL, "maxLength": 63},
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
    },
}


@dataclass(frozen=True)
class NetConf:
    """The validated configuration, defaults applied. Times in seconds."""
    raw: dict[str, Any]
    name: str
    cni_version: str
    cluster_network: str
    default_networks: tuple[str, ...] = ()
    kubeconfig: str | None = None
    conf_dir: str = DEFAULT_CONF_DIR
    cni_dir: str = DEFAULT_CNI_DIR
    bin_dir: str = DEFAULT_BIN_DIR
    log_file: str | None = None
    log_level: str = "info"
    log_to_stderr: bool = True
    multus_namespace: str = DEFAULT_NAMESPACE
    system_namespaces: tuple[str, ...] = (DEFAULT_NAMESPACE,)
    namespace_isolation: bool = False
    global_namespaces: tuple[str, ...] = ()
    readiness_indicator_file: str | None = None
    runtime_config: dict[str, Any] = field(default_factory=dict)
    api_timeout: float = 5.0
    delegate_timeout: float = 60.0
    readiness_timeout: float = 30.0
    pod_resources_socket: str = DEFAULT_POD_RESOURCES_SOCKET
    device_info_dir: str = DEFAULT_DEVICE_INFO_DIR


def _validator():
    # jsonschema costs ~0.1 s to import; only ADD/DEL/CHECK/STATUS/GC reach here.
    from jsonschema import Draft202012Validator
    return Draft202012Validator(SCHEMA)


def _check_default_networks(refs: list[str]) -> None:
    """Raise CniError 7 unless `defaultNetworks` reads, joined, as the pod annotation's
    comma format (what ADD does with it): one [namespace/]name[@interface] per entry,
    DNS-1123 names (§3.3), no interface twice. Checked before anything uses a name."""
    try:
        elements = parse_network_selection(",".join(refs), DEFAULT_NAMESPACE)
        index, reason = None, ("" if len(elements) == len(refs) else
                               "each entry must name one network, as [namespace/]name[@interface]")
    except SelectionError as e:
        index, reason = e.index, e.reason
    if reason:
        key = "defaultNetworks" if index is None or index >= len(refs) else f"defaultNetworks.{index}"
        value = "" if key == "defaultNetworks" else f"{refs[index]!r}: "
        raise CniError(INVALID_CONFIG, f"invalid netattach configuration: key {key!r}: {value}{reason}")


def parse_netconf(config: dict[str, Any]) -> NetConf:
    """Validate the stdin config and apply defaults.

    config: the decoded stdin JSON object.
    Returns NetConf. Raises CniError code 7 (INVALID_CONFIG) naming the first bad
    key and why (CNI SPEC.md "Error codes": 7 = invalid network config).
    """
    errors = sorted(_validator().iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        where = ".".join(str(p) for p in e.absolute_path) or "(top level)"
        raise CniError(INVALID_CONFIG, f"invalid netattach configuration: key {where!r}: {e.message}",
                       f"{len(errors)} problem(s) in the configuration on stdin")
    _check_default_networks(config.get("defaultNetworks", []))
    g = config.get("globalNamespaces", ())
    if isinstance(g, str):
        g = [s.strip() for s in g.split(",")]
    return NetConf(
        raw=config,
        name=config.get("name", "netattach"),
        cni_version=config.get("cniVersion", "0.1.0"),
        cluster_network=config["clusterNetwork"],
        default_networks=tuple(config.get("defaultNetworks", ())),
        kubeconfig=config.get("kubeconfig"),
        conf_dir=config.get("confDir", DEFAULT_CONF_DIR),
        cni_dir=config.get("cniDir", DEFAULT_CNI_DIR),
        bin_dir=config.get("binDir", DEFAULT_BIN_DIR),
        log_file=config.get("logFile"),
        log_level=config.get("logLevel", "info"),
        log_to_stderr=config.get("logToStderr", True),
        multus_namespace=config.get("multusNamespace", DEFAULT_NAMESPACE),
        system_namespaces=tuple(config.get("systemNamespaces", (DEFAULT_NAMESPACE,))),
        namespace_isolation=config.get("namespaceIsolation", False),
        global_namespaces=tuple(s for s in g if s),
        readiness_indicator_file=config.get("readinessindicatorfile") or None,
        runtime_config=dict(config.get("runtimeConfig", {})),
        api_timeout=float(config.get("apiTimeout", 5.0)),
        delegate_timeout=float(config.get("delegateTimeout", 60.0)),
        readiness_timeout=float(config.get("readinessTimeout", 30.0)),
        pod_resources_socket=config.get("podResourcesSocket", DEFAULT_POD_RESOURCES_SOCKET),
        device_info_dir=config.get("deviceInfoDir", DEFAULT_DEVICE_INFO_DIR),
    )
