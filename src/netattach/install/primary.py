"""The cluster default network's config (the primary) in the CNI conf dir, and the
conflist netattach writes in front of it.

Which file is the primary (the libcni rule the runtimes use to pick a network,
libcni `ConfFiles` + a lexical sort, as in containerd's go-cni and CRI-O's ocicni):
the first name in byte order ending in `.conf`, `.conflist` or `.json`, hidden
names included (libcni does not skip them), directories excluded, skipping
* `00-netattach.conflist` (ours), and
* any config whose plugins include a delegating meta-plugin: `netattach`,
  `multus` or `multus-shim`. Delegating to another meta-plugin would attach every
  selected network twice. (A Multus conf that sorts before ours is loaded by the
  runtime instead of ours; that is logged as a warning.)
When the first remaining file cannot be read, is not JSON (a half-written file)
or is not a CNI config (no `type`, or no non-empty `plugins`), there is no
primary *yet*: the installer waits for it rather than falling through to a later
file, as the runtime itself would fail on that file, and a later file (say, a
loopback conf) is not the cluster's default network.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from .files import MAX_CONFIG_BYTES

CONF_NAME = "00-netattach.conflist"
NETWORK_NAME = "netattach-cni-network"
CONF_EXTENSIONS = (".conf", ".conflist", ".json")
META_PLUGIN_TYPES = frozenset({"netattach", "multus", "multus-shim"})
SUPPORTED_VERSIONS = ("0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")


def _plugins(config: dict[str, Any]) -> list[Any]:
    """The plugin configs: a conflist's `plugins`, or the single conf itself."""
    plugins = config.get("plugins")
    return plugins if isinstance(plugins, list) else [config]


def _meta_types(config: dict[str, Any]) -> list[str]:
    """The delegating meta-plugin types among the config's plugins."""
    return sorted({p.get("type") for p in _plugins(config) if isinstance(p, dict)}
                  & META_PLUGIN_TYPES)


@dataclass(frozen=True)
class Primary:
    """The cluster default network's config: path in this container, decoded config."""
    path: str
    config: dict[str, Any]

    def capabilities(self) -> dict[str, bool]:
        """The union of the plugins' `capabilities` set to true (CNI CONVENTIONS.md: the
        runtime sends runtimeConfig for a capability any plugin of the list declares)."""
        caps = {k for p in _plugins(self.config) if isinstance(p.get("capabilities"), dict)
                for k, v in p["capabilities"].items() if v is True}
        return {k: True for k in sorted(caps)}

    def cni_version(self) -> str:
        """The primary's `cniVersion` as netattach can serve it: the same when netattach
        supports it; an unknown one becomes the highest supported version not above it
        (1.1.0 for a newer one); a missing one is 0.1.0, as libcni reads it."""
        v = self.config.get("cniVersion")
        if not isinstance(v, str) or not v:
            return "0.1.0"
        if v in SUPPORTED_VERSIONS:
            return v

        def key(version: str) -> tuple[int, ...]:
            return tuple(int(x) if x.isdigit() else 0 for x in version.split("."))
        lower = [s for s in SUPPORTED_VERSIONS if key(s) <= key(v)]
        return lower[-1] if lower else SUPPORTED_VERSIONS[0]


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


def config_candidates(conf_dir: str) -> list[str]:
    """Names in `conf_dir` the runtime would consider, in its order (libcni ConfFiles:
    extension .conf, .conflist or .json, not a directory; sorted as Go sorts strings, by
    bytes), without ours. Raises OSError when the dir cannot be listed."""
    names = []
    for name in sorted(os.listdir(conf_dir), key=os.fsencode):
        dot = name.rfind(".")
        if name == CONF_NAME or dot < 0 or name[dot:] not in CONF_EXTENSIONS:
            continue
        if not os.path.isdir(os.path.join(conf_dir, name)):
            names.append(name)
    return names


def find_primary(conf_dir: str, explicit: str | None = None) -> Lookup:
    """Find the cluster default network's config (multi-net spec §6.1; rule: module doc).

    conf_dir: the CNI conf dir as mounted here. explicit: a path to use instead of
    the lexical search (it must still be a usable config and not a meta-plugin's).
    Reads only; never raises for missing or bad files.
    """
    if explicit:
        config, why = read_config(explicit)
        if config is None:
            return Lookup(None, f"primary config {explicit} {why}",
                          absent=not os.path.lexists(explicit))
        if _meta_types(config):
            return Lookup(None, f"primary config {explicit} is a delegating meta-plugin's "
                                f"({', '.join(_meta_types(config))}), not a network")
        return Lookup(Primary(explicit, config))
    try:
        names = config_candidates(conf_dir)
    except OSError as e:
        return Lookup(None, f"cannot list the CNI conf dir {conf_dir}: {e.strerror}")
    skipped: list[str] = []
    for name in names:
        path = os.path.join(conf_dir, name)
        config, why = read_config(path)
        if config is None:
            return Lookup(None, f"the first CNI config in {conf_dir}, {name}, {why}",
                          skipped=tuple(skipped))
        if _meta_types(config):
            skipped.append(name)
            continue
        return Lookup(Primary(path, config), skipped=tuple(skipped))
    others = f" and {', '.join(skipped)} (meta-plugins)" if skipped else ""
    return Lookup(None, f"no CNI config (.conf, .conflist, .json) in {conf_dir} other than "
                        f"netattach's own{others}", absent=True, skipped=tuple(skipped))


@dataclass(frozen=True)
class PluginSettings:
    """What the generated conf tells the plugin, all as the HOST sees paths."""
    conf_dir: str
    bin_dir: str
    cni_dir: str
    kubeconfig: str
    log_level: str
    log_file: str | None = None
    namespace_isolation: bool = False
    global_namespaces: str | None = None
    multus_namespace: str | None = None
    system_namespaces: str | None = None
    readiness_indicator_file: str | None = None


def render_conflist(primary_host_path: str, primary: Primary, s: PluginSettings) -> bytes:
    """netattach's conflist for the primary: the primary's cniVersion (as netattach
    serves it), the union of its capabilities (so the runtime passes runtimeConfig,
    which netattach hands to the default network only, spec §7.5), `clusterNetwork`
    the primary's host path. Keys are netconf.py's; optional ones only when set.
    Same input, same bytes."""
    plugin: dict[str, Any] = {
        "type": "netattach",
        "name": NETWORK_NAME,
        "kubeconfig": s.kubeconfig,
        "clusterNetwork": primary_host_path,
        "confDir": s.conf_dir,
        "cniDir": s.cni_dir,
        "binDir": s.bin_dir,
        "logLevel": s.log_level,
        "namespaceIsolation": s.namespace_isolation,
    }
    optional = {"logFile": s.log_file, "globalNamespaces": s.global_namespaces,
                "multusNamespace": s.multus_namespace,
                "readinessindicatorfile": s.readiness_indicator_file}
    plugin.update({k: v for k, v in optional.items() if v})
    if s.system_namespaces is not None:
        plugin["systemNamespaces"] = [n.strip() for n in s.system_namespaces.split(",")
                                      if n.strip()]
    caps = primary.capabilities()
    if caps:
        plugin["capabilities"] = caps
    doc = {"cniVersion": primary.cni_version(), "name": NETWORK_NAME, "plugins": [plugin]}
    return (json.dumps(doc, indent=2) + "\n").encode()

