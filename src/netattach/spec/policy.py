"""What a delegate may run: the rule every delegate passes before any child runs,
wherever it comes from (the networks and default-network annotations, `defaultNetworks`,
`clusterNetwork`, claims, hot-plug, the auxiliary chain, the retired configuration).

* No delegate is a delegating meta-plugin (invoke.META_PLUGIN_TYPES: netattach, its
  shim, Multus and its shim), by name or by file (a symlink or a hard link to one under
  another name: invoke.MetaPluginRefused), in any `type` of its config: a plugin's, its
  IPAM plugin's, or any nested object's (flannel's `delegate`, ...), since a plugin may
  exec what those name. A nested meta-plugin would run as root with `binDir`, `cniDir`,
  `logFile`, `kubeconfig` taken from the delegate's config, which a NAD's or a claim's
  author wrote. The executors apply the same rule at every exec (DEL and GC from saved
  state included).
* A tenant's config (a NetworkAttachmentDefinition's `spec.config`, a claim's) names
  only the plugin and IPAM types in the node's `allowedPluginTypes`, when the node admin
  set it (netconf.NetConf.allowed_plugin_types).

docs/security.md says who is trusted for what.
"""
from __future__ import annotations

from collections.abc import Iterator

from ..cni import invoke
from ..cni.chain import NetworkConfig
from ..cni.errors import CniError
from .delegates import NAD_SOURCE_PREFIX
from .netconf import NetConf

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)
if TYPE_CHECKING:
    from typing import Any

MAX_DEPTH = 16
"""Nesting levels of a plugin's config searched for `type` keys (deeper ones are not
searched: no plugin nests the configs it execs that deep)."""


def from_tenant(config: NetworkConfig, claim: object = None) -> bool:
    """True when `config` is a tenant's: a NetworkAttachmentDefinition's `spec.config` or
    a claim's (`claim` not None). The node admin's configs (files in the conf dirs: the
    cluster default network, the auxiliary chain, a NAD's on-disk fallback) are not."""
    return claim is not None or config.source.startswith(NAD_SOURCE_PREFIX)


def plugin_types(plugin: dict[str, Any]) -> Iterator[tuple[str, Any, bool]]:
    """Every `type` in one plugin's config: (its key relative to the plugin, e.g. "type",
    "ipam.type", "delegate.type"; its value; True for the two a runtime or a plugin
    execs by name from the plugin dirs: the plugin's and its IPAM's)."""
    yield "type", plugin.get("type"), True
    ipam = plugin.get("ipam")
    if isinstance(ipam, dict) and "type" in ipam:
        yield "ipam.type", ipam["type"], True
    stack: list[tuple[str, Any, int]] = [(k, v, 1) for k, v in plugin.items()]
    while stack:
        key, value, depth = stack.pop()
        if depth > MAX_DEPTH:
            continue
        if isinstance(value, dict):
            if key != "ipam" and isinstance(value.get("type"), str):
                yield f"{key}.type", value["type"], False
            stack.extend((f"{key}.{k}", v, depth + 1) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((f"{key}[{i}]", v, depth + 1) for i, v in enumerate(value))


def check_delegate(config: NetworkConfig, conf: NetConf, tenant: bool,
                   executor: invoke.Executor | None = None,
                   dirs: tuple[str, ...] = ()) -> None:
    """The rule (module doc) for one delegate's `config`, before any child runs: each
    plugin passes check_plugin, with the node's `allowedPluginTypes` for a tenant's
    config (`tenant`: from_tenant).

    Raises ConfigError (7) naming the config's source and the key (`plugins[i].type`,
    `ipam.type`...); the caller adds the pod and the network."""
    allowed = conf.allowed_plugin_types if tenant else None
    for i, plugin in enumerate(config.plugins):
        check_plugin(plugin, allowed, executor, dirs,
                     f"{config.source}: " + (f"plugins[{i}]." if config.is_list else ""))


def check_plugin(plugin: dict[str, Any], allowed: frozenset[str] | None,
                 executor: invoke.Executor | None = None,
                 dirs: tuple[str, ...] = (), where: str = "") -> None:
    """One plugin's config against the rule (module doc): its plugin and IPAM types are
    file names, never a meta-plugin's, and in `allowed` when that is given
    (invoke.check_plugin_type); a nested `type` is never a meta-plugin's name. With
    `executor`, each of them found in `dirs` (binDir, then CNI_PATH) must not be the
    same file as a meta-plugin (invoke.MetaPluginRefused); a type not found is left to
    the exec (the chain fails there, as libcni's does).

    Raises the ConfigError (7) of the first problem, its message starting with `where`
    and the key of the type refused ("type", "ipam.type", "delegate.type")."""
    for key, ptype, by_name in plugin_types(plugin):
        try:
            if by_name or ptype in invoke.META_PLUGIN_TYPES:
                invoke.check_plugin_type(ptype, allowed if by_name else None)
            else:
                try:
                    invoke.check_plugin_type(ptype)
                except CniError:
                    continue  # not a file name: nothing can exec it
            if executor is not None:
                try:
                    executor.find(ptype, dirs)
                except invoke.MetaPluginRefused:
                    raise
                except CniError:
                    pass  # not found: its exec says so, in the chain's order
        except CniError as e:
            raise e.within(f"{where}{key}") from None
