"""The cluster default network's config (the primary) in the CNI conf dir, and the
conflist netattach writes in front of it.

Which file is the primary (the libcni rule the runtimes use to pick a network,
libcni `ConfFiles` + a lexical sort, as in containerd's go-cni and CRI-O's ocicni;
netattach.spec.delegates.list_conf_files is netattach's one copy of it): the first name
in byte order ending in `.conf`, `.conflist` or `.json`, hidden names included
(libcni does not skip them), entries that are directories themselves excluded (a
symlink is a candidate wherever it points, as the runtime sees it: one to a
directory is a first config that cannot be read), skipping
* `00-netattach.conflist` (ours), and
* any config whose plugins include a delegating meta-plugin: `netattach`,
  `multus` or `multus-shim`. Delegating to another meta-plugin would attach every
  selected network twice. (A Multus conf that sorts before ours is loaded by the
  runtime instead of ours; that is logged as a warning.)
When the first remaining file cannot be read, is not JSON (a half-written file),
is not a CNI config (no `type`, or no non-empty `plugins`) or declares a CNI
version the plugin does not run (below), there is no primary *yet*: the installer
waits for it rather than falling through to a later file, as the runtime itself
would fail on that file, and a later file (say, a loopback conf) is not the
cluster's default network.

The version: our conflist declares exactly the version the plugin runs the primary
with, netattach.cni.version.config_version (the highest supported of `cniVersions`
and `cniVersion`, "0.1.0" when the config declares neither), so the runtime, our
conflist and the primary's plugins agree. When that raises VersionError ("1.2.0",
"1.0", not a version) the plugin would fail every ADD on the primary: it is not
usable, and the reason names the file, its version and the supported list.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from ..cni.errors import CniError, VersionError
from ..cni.invoke import META_PLUGIN_TYPES
from ..cni.version import SUPPORTED_VERSIONS, config_version
from ..node.nodefiles import CONFLIST_NAME
from ..spec.delegates import list_conf_files, load_conf_file
from .files import MAX_CONFIG_BYTES

CONF_NAME = CONFLIST_NAME
NETWORK_NAME = "netattach-cni-network"


def _plugins(config: dict[str, Any]) -> list[Any]:
    """The plugin configs: a conflist's `plugins`, or the single conf itself."""
    plugins = config.get("plugins")
    return plugins if isinstance(plugins, list) else [config]


def _meta_types(config: dict[str, Any]) -> list[str]:
    """The delegating meta-plugin types among the config's plugins."""
    return sorted({p["type"] for p in _plugins(config)
                   if isinstance(p, dict) and isinstance(p.get("type"), str)} & META_PLUGIN_TYPES)


@dataclass(frozen=True)
class Primary:
    """The cluster default network's config: path in this container, decoded config,
    and the CNI version the plugin runs it with (version.config_version), which our
    conflist declares."""
    path: str
    config: dict[str, Any]
    cni_version: str

    def capabilities(self) -> dict[str, bool]:
        """The union of the plugins' `capabilities` set to true (CNI CONVENTIONS.md: the
        runtime sends runtimeConfig for a capability any plugin of the list declares)."""
        caps = {k for p in _plugins(self.config) if isinstance(p.get("capabilities"), dict)
                for k, v in p["capabilities"].items() if v is True}
        return {k: True for k in sorted(caps)}


@dataclass(frozen=True)
class Lookup:
    """What find_primary found: the primary, or why there is none yet (`why`) and
    whether that is because there is no candidate config at all (`absent`, as opposed
    to one that is not usable yet). `skipped`: meta-plugin configs passed over."""
    primary: Primary | None
    why: str = ""
    absent: bool = False
    skipped: tuple[str, ...] = ()


def config_problem(doc: Any) -> str | None:
    """None when `doc` is a CNI network config (a conf with a `type`, or a conflist with
    a non-empty `plugins` list of objects with a `type`), else what is wrong with it."""
    if not isinstance(doc, dict):
        return "not a JSON object"
    plugins = doc["plugins"] if "plugins" in doc else [doc]
    if not isinstance(plugins, list) or not plugins:
        return "'plugins' is not a non-empty list"
    for p in plugins:
        if not isinstance(p, dict) or not isinstance(p.get("type"), str) or not p["type"]:
            return "a plugin has no 'type'"
    return None


def read_config(path: str) -> tuple[dict[str, Any] | None, str]:
    """(decoded config, "") or (None, why it is not usable yet): unreadable, not JSON
    (half-written), or not a CNI config. Follows symlinks, as libcni does."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        return None, f"cannot be read ({e.strerror})"
    if len(raw) > MAX_CONFIG_BYTES:
        return None, f"is larger than {MAX_CONFIG_BYTES} bytes"
    try:
        doc = json.loads(raw)
    except ValueError as e:
        return None, f"is not valid JSON yet ({e})"
    problem = config_problem(doc)
    return (None, f"is not a CNI config ({problem})") if problem else (doc, "")


def _run_version(config: dict[str, Any]) -> tuple[str | None, str]:
    """(the CNI version the plugin runs `config` with, "") or (None, why it cannot,
    naming the version and the supported list). The version is
    version.config_version's, the rule the plugin applies to the cluster default
    network at every ADD."""
    try:
        return config_version(config), ""
    except VersionError as e:
        versions = config.get("cniVersions")
        listed = f" (cniVersions {json.dumps(versions)})" if isinstance(versions, list) else ""
        return None, (f"has {e.msg}{listed}; netattach runs {', '.join(SUPPORTED_VERSIONS)}, "
                      "so every ADD would fail on it")


def _examine(path: str) -> tuple[Primary | None, str, list[str]]:
    """What the config at `path` is to the installer: (Primary, "", []) when it can be
    the cluster default network; (None, "", meta-plugin types) when it is a delegating
    meta-plugin's; (None, why, []) when it is not usable (yet): read_config's
    reasons, a version the plugin does not run, or any other reason the plugin's own
    loader (delegates.load_conf_file) refuses it."""
    config, why = read_config(path)
    if config is None:
        return None, why, []
    meta = _meta_types(config)
    if meta:
        return None, "", meta
    version, why = _run_version(config)
    if version is None:
        return None, why, []
    try:  # exactly what the plugin does with clusterNetwork at every ADD
        load_conf_file(path)
    except CniError as e:
        return None, f"is not a config netattach can run ({e.msg}), so every ADD would fail", []
    return Primary(path, config, version), "", []


def find_primary(conf_dir: str, explicit: str | None = None) -> Lookup:
    """Find the cluster default network's config (multi-net spec §6.1; rule: module doc).

    conf_dir: the CNI conf dir as mounted here. explicit: a path to use instead of
    the lexical search (it must still be a usable config and not a meta-plugin's).
    Reads only; never raises for missing or bad files.
    """
    if explicit:
        primary, why, meta = _examine(explicit)
        if meta:
            return Lookup(None, f"primary config {explicit} is a delegating meta-plugin's "
                                f"({', '.join(meta)}), not a network")
        if primary is None:
            return Lookup(None, f"primary config {explicit} {why}",
                          absent=not os.path.lexists(explicit))
        return Lookup(primary)
    try:
        paths = [p for p in list_conf_files(conf_dir) if os.path.basename(p) != CONF_NAME]
    except OSError as e:
        return Lookup(None, f"cannot list the CNI conf dir {conf_dir}: {e.strerror}")
    skipped: list[str] = []
    for path in paths:
        name = os.path.basename(path)
        primary, why, meta = _examine(path)
        if meta:
            skipped.append(name)
        elif primary is None:
            return Lookup(None, f"the first CNI config in {conf_dir}, {name}, {why}",
                          skipped=tuple(skipped))
        else:
            return Lookup(primary, skipped=tuple(skipped))
    others = f" and {', '.join(skipped)} (meta-plugins)" if skipped else ""
    return Lookup(None, f"no CNI config (.conf, .conflist, .json) in {conf_dir} other than "
                        f"netattach's own{others}", absent=True, skipped=tuple(skipped))


@dataclass(frozen=True)
class PluginSettings:
    """What the generated conf tells the plugin, all as the HOST sees paths. Optional
    keys are written only when set (None, False, empty), so the plugin's own default
    applies (netconf.py): `confDir` unset makes it search /etc/cni/net.d, then Multus'
    /etc/cni/multus/net.d."""
    bin_dir: str
    cni_dir: str
    kubeconfig: str
    log_level: str
    conf_dir: str | None = None
    """confDir: where the plugin finds on-disk configs of NADs without spec.config."""
    log_file: str | None = None
    log_format: str = "text"
    """logFormat: "text" (the plugin's default, so not written) or "json"."""
    namespace_isolation: bool = False
    global_namespaces: str | None = None
    allowed_plugin_types: str | None = None
    """allowedPluginTypes, comma-separated (a list in the conf)."""
    claim_config_sources: str | None = None
    """claimConfigSources: "any" or "class" (netconf.CLAIM_CONFIG_SOURCES)."""
    multus_namespace: str | None = None
    system_namespaces: str | None = None
    readiness_indicator_file: str | None = None
    default_networks: tuple[str, ...] = ()
    """defaultNetworks: NADs attached to every pod after the cluster default network."""
    auxiliary_chain: str | None = None
    """auxiliaryCNIChainName."""
    api_timeout: float | None = None
    delegate_timeout: float | None = None
    readiness_timeout: float | None = None
    """apiTimeout, delegateTimeout, readinessTimeout: seconds."""
    max_networks_per_pod: int | None = None
    max_same_network_per_pod: int | None = None
    """maxNetworksPerPod, maxSameNetworkPerPod: the caps on a pod's networks (counts)."""
    resource_claims: bool = False
    """resourceClaims: ADD reads the pod even when the runtime passes its annotations."""
    hotplug: bool = False
    """hotplug: the node daemon changes a running pod's attachments (thick mode)."""
    plugin_type: str = "netattach"
    """The plugin the runtime execs: "netattach" (thin mode) or "netattach-shim" (thick)."""
    daemon_socket_dir: str | None = None
    """Thick mode: the node daemon's socket dir, written as daemonSocketDir (the shim's)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Keys of the admin's document (--netconf-file, conf_keys.py), written over the
    ones above."""

    def plugin_entry(self, primary_host_path: str) -> dict[str, Any]:
        """netattach's conflist entry without `capabilities`: the keys of these settings
        (netconf.py's names; the optional ones only when set), then `extra` over them."""
        plugin: dict[str, Any] = {
            "type": self.plugin_type,
            "name": NETWORK_NAME,
            "kubeconfig": self.kubeconfig,
            "clusterNetwork": primary_host_path,
            "cniDir": self.cni_dir,
            "binDir": self.bin_dir,
            "logLevel": self.log_level,
            "namespaceIsolation": self.namespace_isolation,
        }
        optional = {"confDir": self.conf_dir, "logFile": self.log_file,
                    "globalNamespaces": self.global_namespaces,
                    "multusNamespace": self.multus_namespace,
                    "readinessindicatorfile": self.readiness_indicator_file,
                    "auxiliaryCNIChainName": self.auxiliary_chain,
                    "claimConfigSources": self.claim_config_sources,
                    "daemonSocketDir": self.daemon_socket_dir}
        plugin.update({k: v for k, v in optional.items() if v})
        if self.log_format != "text":
            plugin["logFormat"] = self.log_format
        if self.default_networks:
            plugin["defaultNetworks"] = list(self.default_networks)
        for key, seconds in (("apiTimeout", self.api_timeout),
                             ("delegateTimeout", self.delegate_timeout),
                             ("readinessTimeout", self.readiness_timeout)):
            if seconds is not None:
                plugin[key] = seconds
        for key, cap in (("maxNetworksPerPod", self.max_networks_per_pod),
                         ("maxSameNetworkPerPod", self.max_same_network_per_pod)):
            if cap is not None:
                plugin[key] = cap
        if self.resource_claims:
            plugin["resourceClaims"] = True
        if self.hotplug:
            plugin["hotplug"] = True
        if self.system_namespaces is not None:
            plugin["systemNamespaces"] = [n.strip() for n in self.system_namespaces.split(",")
                                          if n.strip()]
        if self.allowed_plugin_types is not None:
            plugin["allowedPluginTypes"] = sorted(
                {t.strip() for t in self.allowed_plugin_types.split(",") if t.strip()})
        plugin.update(self.extra)
        return plugin


def plugin_settings(args: Any, kubeconfig: str, plugin_type: str) -> PluginSettings:
    """The PluginSettings of `netattach install`'s parsed flags (install.add_arguments),
    `kubeconfig` the host path of the kubeconfig it writes, `plugin_type` netattach or
    netattach-shim. The document of --netconf-file is not read here (loop.Installer)."""
    networks = tuple(n.strip() for n in (args.default_networks or "").split(",") if n.strip())
    return PluginSettings(
        bin_dir=args.host_bin_dir, cni_dir=args.cni_dir, kubeconfig=kubeconfig,
        log_level=args.log_level, conf_dir=args.plugin_conf_dir, log_file=args.log_file,
        log_format=args.log_format,
        namespace_isolation=args.namespace_isolation,
        global_namespaces=args.global_namespaces, multus_namespace=args.multus_namespace,
        allowed_plugin_types=args.allowed_plugin_types,
        claim_config_sources=args.claim_config_sources,
        system_namespaces=args.system_namespaces,
        readiness_indicator_file=args.readiness_indicator_file,
        default_networks=networks, auxiliary_chain=args.auxiliary_cni_chain_name,
        api_timeout=args.api_timeout, delegate_timeout=args.delegate_timeout,
        readiness_timeout=args.readiness_timeout,
        max_networks_per_pod=args.max_networks_per_pod,
        max_same_network_per_pod=args.max_same_network_per_pod,
        resource_claims=args.resource_claims, hotplug=args.hotplug, plugin_type=plugin_type,
        daemon_socket_dir=args.daemon_socket_dir if args.mode == "thick" else None)


def render_conflist(primary_host_path: str, primary: Primary, s: PluginSettings) -> bytes:
    """netattach's conflist for the primary: the CNI version the plugin runs the
    primary with (Primary.cni_version), the union of its capabilities (so the runtime
    passes runtimeConfig, which netattach hands to the default network only, spec
    §7.5) and io.kubernetes.cri.pod-annotations (netattach's own: the pod's
    annotations without a GET), `clusterNetwork` the primary's host path; the other
    keys are PluginSettings.plugin_entry's. Same input, same bytes."""
    plugin = s.plugin_entry(primary_host_path)
    # The primary's capabilities (handed on to it), and the pod's annotations for
    # netattach itself: a runtime that can (containerd) passes them in runtimeConfig,
    # and ADD then needs no pod GET (networks.runtime_pod_annotations).
    plugin["capabilities"] = {**primary.capabilities(), "io.kubernetes.cri.pod-annotations": True}
    doc = {"cniVersion": primary.cni_version, "name": NETWORK_NAME, "plugins": [plugin]}
    return (json.dumps(doc, indent=2) + "\n").encode()

