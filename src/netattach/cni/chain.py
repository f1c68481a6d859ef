"""Running a network configuration (conf or conflist): the libcni equivalent.

CNI SPEC.md Section 3 "Execution of Network Configurations": plugins of a list run
in order for ADD (each getting the previous plugin's result as `prevResult`), in
reverse order for DEL, in order for CHECK/STATUS/GC. The rules of what each plugin
gets on stdin follow libcni (libcni/api.go buildOneConfig, injectRuntimeConfig,
GCNetworkList, GetStatusNetworkList).

One deliberate difference: DEL goes on past a plugin that fails or cannot be found,
so that every plugin's DEL is attempted (`delete`). libcni's DelNetworkList returns at
the first failure, and a runtime retrying it never reaches the plugins before the
failing one (a bridge's interface and host-local's address stay allocated while the
last plugin of the list is missing).
"""
from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field

from . import invoke, version
from .errors import ChildError, CniError, ConfigError, DecodeFailure, VersionError
from .request import validate_container_id, validate_ifname, validate_network_name
from .result import convert_result

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)
if TYPE_CHECKING:
    from typing import Any

GC_ATTACHMENTS_KEY = "cni.dev/valid-attachments"  # SPEC.md GC
# libcni also sends the list under the key an earlier draft of the spec used.
GC_ATTACHMENTS_KEY_COMPAT = "cni.dev/attachments"


def _config_error(source: str, problem: str) -> ConfigError:
    return ConfigError(f"invalid network configuration {source}: {problem}")


def _flag(data: dict[str, Any], key: str, source: str) -> bool:
    """A conflist boolean; libcni also accepts the strings "true"/"false" (any case)."""
    value = data.get(key, False)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise _config_error(source, f"{key} must be a boolean, got {value!r}")


def _check_plugin(plugin: Any, where: str, source: str) -> None:
    if not isinstance(plugin, dict):
        raise _config_error(source, f"{where} is not a JSON object")
    ptype = plugin.get("type")
    if not isinstance(ptype, str) or not ptype:
        raise _config_error(source, f"{where} has no 'type' (a non-empty string)")
    caps = plugin.get("capabilities")
    if caps is not None and not isinstance(caps, dict):
        raise _config_error(source, f"{where}: 'capabilities' must be an object")


def _pick_version(data: dict[str, Any], source: str) -> str:
    """cniVersion of a config (version.config_version: the highest supported of
    `cniVersions` and `cniVersion`, else "0.1.0"), after checking the keys' shapes.
    Raises ConfigError (7) for a malformed key or version, VersionError (1) for a
    well-formed but unsupported one, both naming `source`."""
    if not isinstance(data.get("cniVersion", ""), str):
        raise _config_error(source, f"cniVersion must be a string, got {data['cniVersion']!r}")
    versions = data.get("cniVersions")
    if versions is not None and (not isinstance(versions, list)
                                 or not all(isinstance(v, str) for v in versions)):
        raise _config_error(source, "cniVersions must be a list of strings")
    try:
        return version.config_version(data)
    except VersionError as e:
        if "invalid CNI version" in e.msg:
            raise _config_error(source, f"invalid cniVersion {data.get('cniVersion')!r}") from None
        raise e.within(f"network configuration {source}") from None


@dataclass(frozen=True)
class NetworkConfig:
    """A parsed network configuration: a single conf or a conflist.

    `plugins` are the plugin objects in order (for a conf, the conf itself);
    `raw` the whole object as given (a deep copy); `source` names where it came
    from (file path, NetworkAttachmentDefinition...), for error messages.
    """
    name: str
    cni_version: str
    plugins: tuple[dict[str, Any], ...]
    is_list: bool
    raw: dict[str, Any]
    source: str
    disable_check: bool = False
    disable_gc: bool = False

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str) -> NetworkConfig:
        """Parse a conf or conflist object (CNI SPEC.md Section 1, libcni conf.go).

        A dict with "plugins" is a list: "plugins" a non-empty list of objects each
        with a non-empty string "type"; "disableCheck"/"disableGC" booleans. Otherwise
        a single conf with a string "type". Both need a string "name". A missing
        cniVersion is "0.1.0" as in libcni; it must be one of version.SUPPORTED_VERSIONS.
        Raises ConfigError (7) naming `source` and the problem (VersionError (1) for
        a well-formed but unsupported cniVersion).
        `data` is not changed.
        """
        if not isinstance(data, dict):
            raise _config_error(source, "not a JSON object")
        name = data.get("name")
        if not isinstance(name, str) or not name:
            raise _config_error(source, "missing 'name' (a non-empty string)")
        cni_version = _pick_version(data, source)
        raw = copy.deepcopy(data)
        if "plugins" in data:
            plugins = raw["plugins"]
            if not isinstance(plugins, list) or not plugins:
                raise _config_error(source, "'plugins' must be a non-empty list")
            for i, p in enumerate(plugins):
                _check_plugin(p, f"plugins[{i}]", source)
            return cls(name, cni_version, tuple(plugins), True, raw, source,
                       _flag(data, "disableCheck", source), _flag(data, "disableGC", source))
        _check_plugin(raw, "the configuration", source)
        return cls(name, cni_version, (raw,), False, raw, source)


@dataclass(frozen=True)
class RuntimeConf:
    """Per-invocation values given to every plugin of a network (libcni RuntimeConf).

    `args` are the CNI_ARGS pairs; `capability_args` the runtimeConfig values by
    capability name (e.g. {"portMappings": [...], "ips": [...]}); plugins are looked
    up in `bin_dirs` then `cni_path`; children get CNI_PATH = ':'.join(cni_path);
    each child may run `timeout` seconds; `executor` finds and runs them (the
    process executor, or a fake in unit tests).
    """
    container_id: str
    netns: str
    ifname: str
    args: tuple[tuple[str, str], ...] = ()
    capability_args: Mapping[str, Any] = field(default_factory=dict)
    cni_path: tuple[str, ...] = ()
    bin_dirs: tuple[str, ...] = ()
    timeout: float = 60.0
    executor: invoke.Executor = invoke.PROCESS_EXECUTOR

    def cni_args(self) -> str:
        """`args` rendered as CNI_ARGS "K=V;K=V"."""
        return ";".join(f"{k}={v}" for k, v in self.args)

    def plugin_env(self) -> invoke.PluginEnv:
        """Environment for ADD, DEL and CHECK: every CNI_* value of this RuntimeConf."""
        return invoke.PluginEnv(self.container_id, self.netns, self.ifname, self.cni_args(),
                                ":".join(self.cni_path))

    def bare_env(self) -> invoke.PluginEnv:
        """Environment for STATUS and GC: only CNI_PATH (libcni uses an empty RuntimeConf)."""
        return invoke.PluginEnv(path=":".join(self.cni_path))


def plugin_config(net: NetworkConfig, plugin: dict[str, Any], rt: RuntimeConf,
                  prev_result: dict[str, Any] | None) -> dict[str, Any]:
    """The stdin object of one plugin (libcni buildOneConfig + injectRuntimeConfig).

    A deep copy of `plugin` with:
    * "name" and "cniVersion" of the network (the list's for a conflist);
    * "runtimeConfig" = the entries of rt.capability_args whose key the plugin
      declares `true` in its "capabilities"; any runtimeConfig in `plugin` is
      replaced, and the key is left out when nothing is declared;
    * "prevResult" = prev_result converted to net.cni_version (absent when None;
      a prev_result without cniVersion is read as net.cni_version).
    Raises DecodeFailure / VersionError from convert_result.
    """
    conf = copy.deepcopy(plugin)
    conf["name"] = net.name
    conf["cniVersion"] = net.cni_version
    conf.pop("runtimeConfig", None)
    caps = plugin.get("capabilities")
    if isinstance(caps, dict):
        rc = {cap: copy.deepcopy(rt.capability_args[cap]) for cap, on in caps.items()
              if on is True and cap in rt.capability_args}
        if rc:
            conf["runtimeConfig"] = rc
    conf.pop("prevResult", None)
    if prev_result is not None:
        conf["prevResult"] = convert_result(prev_result, net.cni_version, net.cni_version)
    return conf


def _describe(net: NetworkConfig, plugin: dict[str, Any]) -> str:
    return f"type={plugin.get('type')!r} name={net.name!r}"


def _annotated(e: CniError, net: NetworkConfig, plugin: dict[str, Any], index: int,
               command: str, executed: bool = True) -> ChildError:
    """`e` as a ChildError whose msg says which plugin of which network failed
    (libcni: 'plugin type="x" name="y" failed (add): ...'); code and details kept,
    e.msg as its `cause`; `executed` False when the plugin never ran."""
    return ChildError(e.code, f"plugin {_describe(net, plugin)} failed ({command.lower()}): "
                      f"{e.msg}", e.details, plugin=str(plugin.get("type")),
                      stderr=getattr(e, "stderr", ""), network=net.name, command=command,
                      plugin_index=index, cause=e.msg, executed=executed)


def _run(net: NetworkConfig, index: int, plugin: dict[str, Any], command: str, conf: dict[str, Any],
         env: invoke.PluginEnv, rt: RuntimeConf) -> dict[str, Any] | None:
    try:
        path = rt.executor.find(plugin["type"], rt.bin_dirs + rt.cni_path)
    except CniError as e:
        raise _annotated(e, net, plugin, index, command, executed=False) from e
    try:
        return rt.executor.run(path, command, conf, env, rt.timeout)
    except CniError as e:
        raise _annotated(e, net, plugin, index, command) from e


def _config(net: NetworkConfig, index: int, plugin: dict[str, Any], command: str,
            rt: RuntimeConf, prev_result: dict[str, Any] | None) -> dict[str, Any]:
    """plugin_config, a failure (a prevResult that does not convert) raised as the
    plugin's ChildError, not executed (libcni: buildOneConfig's error is the plugin's)."""
    try:
        return plugin_config(net, plugin, rt, prev_result)
    except CniError as e:
        raise _annotated(e, net, plugin, index, command, executed=False) from e


@dataclass(frozen=True)
class AddFailure:
    """Where a network's failed ADD stopped, which tells its DEL which plugins may hold
    something of it: every plugin before `plugin` (its index in the list) returned a
    result; `plugin` failed (`executed` False: it never ran, as it could not be found
    or its stdin could not be built), with `code` and `msg` (its own message, without
    the "plugin ... failed (add): " prefix); the plugins after it never ran.
    `plugin` None: the ADD failed at a plugin not recorded (the state of an earlier
    release, which recorded only that the ADD failed).
    """
    plugin: int | None
    executed: bool = True
    code: int = 0
    msg: str = ""

    @classmethod
    def of(cls, e: CniError) -> AddFailure:
        """The failure of an ADD that raised `e`: `add`'s ChildError of the plugin that
        failed; any other error (an invalid container ID, ifname or network name, a
        failure before `add` was called) ran no plugin (plugin 0, not executed)."""
        if isinstance(e, ChildError) and e.command == "ADD" and e.plugin_index is not None:
            return cls(e.plugin_index, e.executed, e.code, e.cause)
        return cls(0, False, e.code, e.msg)

    def excuse(self, index: int, error: CniError) -> str | None:
        """Why the DEL failure `error` of plugin `index` leaves nothing of the ADD
        allocated, so the DEL may be taken as done; None when it may not (the plugin
        returned a result, or failed otherwise than its ADD did: it may hold something).

        * a plugin after the failing one, or the failing one when it never ran: its ADD
          never ran, so it holds nothing;
        * the failing plugin failing with the code and message of its ADD (a macvlan
          whose master does not exist fails both the same way, at its config): it got
          no further than its ADD did, which returned an error instead of a result;
        * `plugin` None (an earlier release's state): as that release did, any plugin.
        """
        if self.plugin is None:
            return "the ADD of its network failed (the state, an earlier release's, " \
                   "does not say at which plugin)"
        if index > self.plugin:
            return "its ADD never ran: the chain's ADD stopped at an earlier plugin"
        if index == self.plugin and not self.executed:
            return f"its ADD never ran: {self.msg}"
        cause = error.cause if isinstance(error, ChildError) else error.msg
        if index == self.plugin and (error.code, cause) == (self.code, self.msg):
            return "it fails as its ADD did, which returned that error, not a result"
        return None

    def to_dict(self) -> dict[str, Any]:
        """{"plugin": int, "executed": bool, "code": int, "msg": str} (never for
        `plugin` None)."""
        return {"plugin": self.plugin, "executed": self.executed, "code": self.code,
                "msg": self.msg}

    @classmethod
    def from_dict(cls, data: object) -> AddFailure | None:
        """The AddFailure to_dict wrote, or None for anything else."""
        if not isinstance(data, dict):
            return None
        plugin, executed = data.get("plugin"), data.get("executed")
        code, msg = data.get("code"), data.get("msg")
        if not (type(plugin) is int and plugin >= 0 and isinstance(executed, bool)
                and type(code) is int and isinstance(msg, str)):
            return None
        return cls(plugin, executed, code, msg)


@dataclass(frozen=True)
class Excused:
    """A plugin's DEL failure that leaves nothing of the ADD allocated: `error` (the
    plugin's ChildError), `why` (AddFailure.excuse)."""
    error: CniError
    why: str


def add(net: NetworkConfig, rt: RuntimeConf,
        prev_result: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """ADD: run every plugin in order, each with the previous result as prevResult (the
    first one with `prev_result`, when given: a chain that continues an earlier one).

    Validates container ID, ifname (InvalidEnv, 4) and network name
    (ConfigError, 7) first, as libcni's addNetwork. Returns the last plugin's
    result converted to net.cni_version. A plugin printing no result raises
    DecodeFailure (6) (libcni cannot decode an empty ADD result either).
    The first failure stops the chain and is raised as a ChildError naming the
    plugin (libcni AddNetworkList).
    """
    validate_container_id(rt.container_id)
    validate_network_name(net.name)
    validate_ifname(rt.ifname)
    result = prev_result
    env = rt.plugin_env()
    for i, plugin in enumerate(net.plugins):
        conf = _config(net, i, plugin, "ADD", rt, result)
        out = _run(net, i, plugin, "ADD", conf, env, rt)
        if out is None:
            raise _annotated(DecodeFailure("it printed no result"), net, plugin, i,
                             "ADD")
        try:
            result = convert_result(out, net.cni_version, net.cni_version)
        except CniError as e:
            raise _annotated(e, net, plugin, i, "ADD") from e
    return result


def delete(net: NetworkConfig, rt: RuntimeConf, prev_result: dict[str, Any] | None,
           failed_add: AddFailure | None = None) -> list[Excused]:
    """DEL: run every plugin in reverse order (SPEC.md "Execution of Network
    Configurations"), going on past a plugin that fails or cannot be found, so that
    every plugin's DEL is attempted. libcni's DelNetworkList stops at the first
    failure instead (module doc); plugins must tolerate a DEL of what is gone (SPEC.md
    "DEL"), so a retry of the whole list is safe, as libcni's own retry is.

    prevResult (prev_result converted to net.cni_version) is given only when
    net.cni_version >= 0.4.0 (SPEC.md 0.4.0, libcni DelNetworkList).
    `failed_add`: where the network's ADD stopped when it failed (None: it succeeded,
    or was cut short without a failure, so every plugin may hold something). A failure
    it excuses (AddFailure.excuse: the plugin holds nothing of that ADD) is returned,
    for the caller to log; any other makes the DEL fail: one is raised as its
    ChildError (naming the plugin, code and message its own, e.g. 7 for a plugin not
    found), several as one CniError with the first one's code, each plugin's message
    in msg and their details joined.
    """
    prev = prev_result if version.at_least(net.cni_version, "0.4.0") else None
    env = rt.plugin_env()
    errors: list[CniError] = []
    excused: list[Excused] = []
    for i in range(len(net.plugins) - 1, -1, -1):
        plugin = net.plugins[i]
        try:
            _run(net, i, plugin, "DEL", _config(net, i, plugin, "DEL", rt, prev), env, rt)
        except CniError as e:
            why = failed_add.excuse(i, e) if failed_add is not None else None
            if why is None:
                errors.append(e)
            else:
                excused.append(Excused(e, why))
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise errors[0].reworded(
            f"DEL failed for {len(errors)} plugins of network {net.name!r}: "
            + "; ".join(e.msg for e in errors),
            "; ".join(e.details for e in errors if e.details))
    return excused


def check(net: NetworkConfig, rt: RuntimeConf, prev_result: dict[str, Any] | None) -> None:
    """CHECK: run every plugin in order with prevResult = prev_result.

    Needs net.cni_version >= 0.4.0, else VersionError (1)
    (libcni CheckNetworkList). Does nothing when the list sets disableCheck
    (SPEC.md "CHECK"). Stops at the first failure (a ChildError naming the plugin).
    """
    if not version.at_least(net.cni_version, "0.4.0"):
        raise VersionError(f"configuration version {net.cni_version!r} of network "
                           f"{net.name!r} does not support the CHECK command",
                           "CHECK needs cniVersion 0.4.0 or later")
    if net.disable_check:
        return
    env = rt.plugin_env()
    for i, plugin in enumerate(net.plugins):
        conf = plugin_config(net, plugin, rt, prev_result)
        _run(net, i, plugin, "CHECK", conf, env, rt)


def _bare_config(net: NetworkConfig, plugin: dict[str, Any],
                 extra: dict[str, Any] | None = None) -> dict[str, Any]:
    conf = copy.deepcopy(plugin)
    conf["name"] = net.name
    conf["cniVersion"] = net.cni_version
    conf.update(copy.deepcopy(extra or {}))
    return conf


def status(net: NetworkConfig, rt: RuntimeConf) -> None:
    """STATUS (CNI 1.1.0): ask every plugin in order whether it is ready for ADD.

    A no-op for net.cni_version < 1.1.0 (libcni GetStatusNetworkList). Plugins get
    only "name" and "cniVersion" injected and only CNI_COMMAND/CNI_PATH set. The
    first failure is raised (e.g. code NOT_AVAILABLE 50) as a ChildError.
    """
    if not version.at_least(net.cni_version, "1.1.0"):
        return
    env = rt.bare_env()
    for i, plugin in enumerate(net.plugins):
        _run(net, i, plugin, "STATUS", _bare_config(net, plugin), env, rt)


def gc(net: NetworkConfig, rt: RuntimeConf, valid_attachments: list[dict[str, Any]]) -> None:
    """GC (CNI 1.1.0): let every plugin release resources of attachments not in
    `valid_attachments` ([{"containerID": str, "ifname": str}, ...]).

    Skipped for net.cni_version < 1.1.0 and when the list sets disableGC
    (SPEC.md "GC"). Each plugin gets "name", "cniVersion" and the attachments under
    "cni.dev/valid-attachments" (and "cni.dev/attachments", as libcni sends both),
    and only CNI_COMMAND/CNI_PATH. Every plugin runs even after a failure (libcni
    GCNetworkList joins the errors); one failure is re-raised, several are raised
    as one CniError with the first one's code and all messages in details.
    """
    if not version.at_least(net.cni_version, "1.1.0") or net.disable_gc:
        return
    attachments = [dict(a) for a in valid_attachments]
    extra = {GC_ATTACHMENTS_KEY: attachments, GC_ATTACHMENTS_KEY_COMPAT: attachments}
    env = rt.bare_env()
    errors: list[CniError] = []
    for i, plugin in enumerate(net.plugins):
        try:
            _run(net, i, plugin, "GC", _bare_config(net, plugin, extra), env, rt)
        except CniError as e:
            errors.append(e)
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise errors[0].reworded(f"GC failed for {len(errors)} plugins of network {net.name!r}",
                                 "; ".join(str(e) for e in errors))
