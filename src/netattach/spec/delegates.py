"""From a NetworkAttachmentDefinition to the CNI config to delegate to (spec v1.3 §3.4).

§3.4.1 fixes the order in which the config for a selected network is found:

1. the NAD's ``spec.config`` (with the §3.4.2 ``name`` injection);
2. an on-disk ``.conflist`` whose JSON ``name`` is the NAD's name;
3. an on-disk ``.conf`` (libcni also reads ``.json`` as a single conf) whose
   ``name`` is the NAD's name;
4. otherwise the attachment fails.

Only reads files; never writes, never talks to the API (the caller hands in
the NAD object, or ``None`` when it does not exist).

Decisions where the spec is silent (each is tested):

* **File kinds follow the extension, as in libcni.**  ``.conflist`` is a
  configuration list; ``.conf`` and ``.json`` are single plugin configs.  A
  ``.conf`` that holds a list (``plugins`` but no ``type``) is rejected with
  libcni's hint "perhaps this is a .conflist?", which is what libcni,
  kubelet, CRI-O and containerd do, rather than guessed at; a ``.conflist``
  without ``plugins`` is rejected likewise.  A ``.conf`` with both ``type``
  and a ``plugins`` key is one plugin config (libcni does not look at
  ``plugins`` there) and is run as a one-plugin list, as libcni's
  ``ConfListFromConf`` does.  (A NAD's ``spec.config`` has no extension: there
  a ``plugins`` key makes it a list, as in Multus.)
* **Plugins beside a conflist.**  Like libcni >= 1.2, a ``.conflist`` whose
  ``loadOnlyInlinedPlugins`` is not true also gets the plugin configs found in
  ``<dir>/<name>/*.conf`` (sorted), after its inline ``plugins``.
* **Order and robustness.**  Files are taken in byte-wise sorted name order
  (libcni sorts the same way, and the first match wins).  A file that cannot
  be read or is not JSON is skipped with a warning on the
  ``netattach.delegates`` logger; so is a file whose ``name`` matches but
  whose config is invalid, and the search goes on.  libcni instead stops at
  the first broken file; skipping is kubelet's behaviour, so one bad file left
  in the directory does not break every attachment.  The problems met are
  added to the final "not found" error.
* **Empty spec.config.**  A ``spec.config`` that is empty or only white space
  counts as absent (§3.4.1 step 1 does not apply), so a NAD written as
  ``config: ''`` still finds its on-disk config.
* **name injection (§3.4.2)** happens when ``name`` is missing, ``null`` or
  ``""`` (Multus treats ``""`` the same way); a non-string ``name`` is an
  error.  For a list, ``name`` is injected at the top level.
* **JSON strictness.**  ``NaN``/``Infinity`` are rejected (Go's decoder that
  the delegated plugins use rejects them too).  Files must be UTF-8; a
  leading byte-order mark is an error, as it is for libcni.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence

from netattach.cni.chain import NetworkConfig
from netattach.cni.errors import CniError, ConfigError
from netattach.cni.jsonutil import json_type, loads_strict

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "CONF_EXTENSIONS",
    "DelegateError",
    "config_from_nad",
    "find_on_disk",
    "load_conf_file",
    "list_conf_files",
    "resolve_delegate",
]

log = logging.getLogger("netattach.delegates")

CONF_EXTENSIONS = (".conf", ".conflist", ".json")
"""Extensions of CNI config files, as libcni's ``ConfFiles`` is called by runtimes."""

_LIST_EXT = ".conflist"
_MAX_PROBLEMS_IN_MESSAGE = 5


class DelegateError(ConfigError):
    """The CNI config for a selected network cannot be determined (§3.4.1).

    A ConfigError (7). Attributes:
        network: ``"namespace/name"`` of the NAD, or the path of the file.
        msg: the explanation (also ``str(err)``); it names the network.

    When the cause is an invalid CNI config, the :class:`ConfigError` or
    :class:`VersionError` raised by :meth:`NetworkConfig.from_dict` is chained as
    ``__cause__``.
    """

    def __init__(self, network: str, message: str) -> None:
        super().__init__(message)
        self.network = network


NAD_SOURCE_PREFIX = "NetworkAttachmentDefinition "
"""How a NetworkConfig read from a NAD's `spec.config` names its `source`."""


def _cni_error_message(exc: CniError, source: str) -> str:
    """The CniError's text, which names *source* already (from_dict does)."""
    text = str(exc)
    return text if source in text else f"invalid CNI config {source}: {text}"


def _with_name(data: dict[str, Any], name: str) -> dict[str, Any]:
    """*data* with ``name`` set, placed after ``cniVersion`` like the §3.4.2.1 example."""
    out: dict[str, Any] = {}
    if "cniVersion" in data:
        out["cniVersion"] = data["cniVersion"]
    out["name"] = name
    for key, value in data.items():
        if key not in out:
            out[key] = value
    return out


def _nad_ref(nad: dict[str, Any], default_name: str) -> str:
    meta = nad.get("metadata") if isinstance(nad, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    name = meta["name"] if isinstance(meta.get("name"), str) and meta.get("name") else default_name
    namespace = meta.get("namespace")
    return f"{namespace}/{name}" if isinstance(namespace, str) and namespace else name


def config_from_nad(nad: dict[str, Any], *, default_name: str) -> NetworkConfig | None:
    """The CNI config held in a NAD's ``spec.config`` (§3.4.1 step 1, §3.4.2).

    Args:
        nad: the NetworkAttachmentDefinition as the API returns it
            (``{"metadata": {...}, "spec": {"config": "<json>"}}``).
        default_name: the name injected when the config has no ``name``
            (§3.4.2): the NAD's name.

    Returns:
        The :class:`NetworkConfig` (``source`` is
        ``"NetworkAttachmentDefinition ns/name"``), or ``None`` when
        ``spec.config`` is absent, empty or white space (the caller then
        looks on disk, §3.4.1 steps 2-3).

    Raises:
        DelegateError: ``spec`` or ``spec.config`` has the wrong type, the
            config is not a JSON object, its ``name`` is not a string, or it
            is not a valid CNI config/conflist (the ``CniError`` from
            :meth:`NetworkConfig.from_dict` is chained).
    """
    ref = _nad_ref(nad, default_name)
    what = f"{NAD_SOURCE_PREFIX}{ref}"
    spec = nad.get("spec") if isinstance(nad, dict) else None
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise DelegateError(ref, f"{what}: spec must be an object, not {json_type(spec)}")
    config = spec.get("config")
    if config is None:
        return None
    if not isinstance(config, str):
        raise DelegateError(
            ref, f"{what}: spec.config must be a string of JSON, not {json_type(config)} (§3.2)"
        )
    if not config.strip():
        return None
    try:
        data = loads_strict(config)
    except ValueError as exc:
        raise DelegateError(ref, f"{what}: spec.config is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise DelegateError(
            ref, f"{what}: spec.config must be a JSON object (a CNI config or conflist), "
            f"not {json_type(data)}"
        )
    name = data.get("name")
    if name is None or name == "":
        data = _with_name(data, default_name)
    elif not isinstance(name, str):
        raise DelegateError(
            ref, f"{what}: the \"name\" in spec.config must be a string, not {json_type(name)}"
        )
    try:
        return NetworkConfig.from_dict(data, what)
    except CniError as exc:
        raise DelegateError(ref, _cni_error_message(exc, what)) from exc


def _ext(filename: str) -> str:
    """Go's ``filepath.Ext``: from the last dot of the base name, or ``""``."""
    dot = filename.rfind(".")
    return filename[dot:] if dot >= 0 else ""


def list_conf_files(conf_dir: str) -> list[str]:
    """Paths of the CNI config files in *conf_dir*, in the order a runtime reads them.

    The one lister of config dirs (delegates, the cluster default network, the
    installer's primary). libcni ``ConfFiles`` with the extensions runtimes pass
    (``.conf``, ``.conflist``, ``.json``): every entry with such an extension that
    is not a directory itself (a symlink counts as a file, wherever it points, as
    Go's ``DirEntry.IsDir`` sees it), sorted byte-wise by name (Go's string order,
    which libcni's callers sort by).

    Returns ``[]`` if *conf_dir* does not exist.

    Raises:
        OSError: *conf_dir* exists but cannot be listed.
    """
    try:
        entries = list(os.scandir(conf_dir))
    except FileNotFoundError:
        return []
    names = []
    for entry in entries:
        if _ext(entry.name) not in CONF_EXTENSIONS:
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                continue
        except OSError:
            continue
        names.append(entry.name)
    names.sort(key=os.fsencode)
    return [os.path.join(conf_dir, n) for n in names]


def _read_json_object(path: str) -> dict[str, Any]:
    """The JSON object in *path*; DelegateError if unreadable or not an object."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise DelegateError(path, f"cannot read CNI config {path}: {exc.strerror or exc}") from None
    try:
        # Strict UTF-8 and no BOM skipping: Go's decoder in libcni refuses a BOM too.
        data = loads_strict(raw.decode("utf-8"))
    except ValueError as exc:  # also UnicodeDecodeError
        raise DelegateError(path, f"CNI config {path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise DelegateError(path, f"CNI config {path} must hold a JSON object, "
                                  f"not {json_type(data)}")
    return data


def _read_bool(data: dict[str, Any], key: str, path: str) -> bool:
    """libcni's readBool: a JSON boolean or the strings "true"/"false" (any case)."""
    value = data.get(key, False)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise DelegateError(path, f"CNI config {path}: invalid value {_short(value)} for {key}")


def _short(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, bytes) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def side_plugins(conf_dir: str, name: object, path: str) -> list[dict[str, Any]]:
    """Plugin configs in ``<conf_dir>/<name>/*.conf``, in name order (libcni >= 1.2
    NetworkPluginConfsFromFiles); [] when there is no such dir. *path* names the config
    they belong to in errors. Raises DelegateError (7) naming the unreadable file."""
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\0" in name:
        return []
    plugin_dir = os.path.join(conf_dir, name)
    try:
        files = [p for p in list_conf_files(plugin_dir) if _ext(p) == ".conf"]
    except OSError as exc:
        raise DelegateError(
            path, f"CNI config {path}: cannot list plugin configs in {plugin_dir}: "
                  f"{exc.strerror or exc}"
        ) from None
    plugins = []
    for plugin_path in files:
        plugin = _read_json_object(plugin_path)
        if not isinstance(plugin.get("type"), str) or not plugin.get("type"):
            raise DelegateError(path, f"CNI config {path}: plugin config {plugin_path} "
                                      "has no 'type'")
        plugins.append(plugin)
    return plugins


def _config_from_file_data(path: str, data: dict[str, Any]) -> NetworkConfig:
    """Validate the parsed content of the CNI config file *path*."""
    if _ext(path) == _LIST_EXT:
        load_only_inlined = _read_bool(data, "loadOnlyInlinedPlugins", path)
        inline = data.get("plugins")
        if inline is None and load_only_inlined:
            raise DelegateError(
                path, f"CNI config {path}: loadOnlyInlinedPlugins is true, and no 'plugins' key"
            )
        if not load_only_inlined and (inline is None or isinstance(inline, list)):
            side = side_plugins(os.path.dirname(path), data.get("name"), path)
            if side:
                data = dict(data, plugins=list(inline or []) + side)
        if data.get("plugins") is None:
            raise DelegateError(
                path, f"CNI config {path} is a .conflist without 'plugins'; "
                      "perhaps this is a .conf?"
            )
    elif "plugins" in data:
        if "type" not in data:
            raise DelegateError(
                path, f"CNI config {path}: no 'type'; perhaps this is a .conflist?"
            )
        # libcni reads a .conf as one plugin config even when it has a
        # "plugins" key (opaque to libcni), and runs it as a one-plugin list
        # (ConfListFromConf).  Do the same, so the key is not taken for a list.
        data = {"cniVersion": data.get("cniVersion", ""), "name": data.get("name"),
                "plugins": [data]}
    try:
        return NetworkConfig.from_dict(data, path)
    except CniError as exc:
        raise DelegateError(path, _cni_error_message(exc, path)) from exc


def load_conf_file(path: str) -> NetworkConfig:
    """Load one CNI config file (for §3.4.1 steps 2-3).

    A ``.conflist`` is a configuration list (plus the plugin configs in
    ``<dir>/<name>/*.conf`` unless ``loadOnlyInlinedPlugins`` is true); a
    ``.conf`` or ``.json`` is a single plugin config.  ``source`` of the
    result is *path*.

    Raises:
        DelegateError: (``network`` = *path*) the file has another
            extension, cannot be read, is not a JSON object, is a list in a
            ``.conf``/``.json`` or a single config in a ``.conflist``, or is
            not a valid CNI config (``CniError`` chained).
    """
    if _ext(os.path.basename(path)) not in CONF_EXTENSIONS:
        raise DelegateError(
            path, f"{path} is not a CNI config file (expected one of {', '.join(CONF_EXTENSIONS)})"
        )
    return _config_from_file_data(path, _read_json_object(path))


def _dirs(conf_dirs: str | Sequence[str]) -> list[str]:
    return [conf_dirs] if isinstance(conf_dirs, str) else list(dict.fromkeys(conf_dirs))


def _search_disk(conf_dirs: str | Sequence[str],
                 name: str) -> tuple[NetworkConfig | None, list[str]]:
    """§3.4.1 steps 2 and 3 in each directory in turn; also returns the problems met."""
    problems: list[str] = []
    for conf_dir in _dirs(conf_dirs):
        try:
            files = list_conf_files(conf_dir)
        except OSError as exc:
            problem = f"cannot list CNI config directory {conf_dir}: {exc.strerror or exc}"
            log.warning("%s", problem)
            problems.append(problem)
            continue
        conflists = [p for p in files if _ext(p) == _LIST_EXT]
        confs = [p for p in files if _ext(p) != _LIST_EXT]  # .conf and .json, still sorted
        for step in (conflists, confs):
            for path in step:
                try:
                    data = _read_json_object(path)
                except DelegateError as exc:
                    log.warning("skipping %s", exc)
                    problems.append(exc.msg)
                    continue
                if data.get("name") != name:
                    continue
                try:
                    return _config_from_file_data(path, data), problems
                except DelegateError as exc:
                    log.warning("skipping %s", exc)
                    problems.append(exc.msg)
    return None, problems


def find_on_disk(conf_dirs: str | Sequence[str], name: str) -> NetworkConfig | None:
    """The on-disk CNI config named *name* (§3.4.1 steps 2 and 3).

    In each of *conf_dirs* in order (a single path is one dir): first the
    ``.conflist`` files whose JSON ``name`` is *name*, then the ``.conf`` and
    ``.json`` files; within a step in file-name order; the first valid match
    wins.  Files that cannot be read, are not JSON, or match but are invalid
    are skipped with a warning on the ``netattach.delegates`` logger.

    Returns:
        The :class:`NetworkConfig` (``source`` = its path), or ``None`` when
        nothing matches or no dir exists.  Never raises :class:`DelegateError`.
    """
    config, _ = _search_disk(conf_dirs, name)
    return config


def resolve_delegate(nad: dict[str, Any] | None, namespace: str, name: str,
                     conf_dirs: str | Sequence[str]) -> NetworkConfig:
    """The CNI config to delegate to for the NAD *namespace*/*name* (§3.4.1).

    Args:
        nad: the NetworkAttachmentDefinition object from the API, or ``None``
            if it does not exist.
        namespace, name: the reference from the selection annotation.
        conf_dirs: the CNI config directories searched in steps 2-3, in order
            (``find_on_disk``).

    Returns:
        The :class:`NetworkConfig` from ``spec.config`` (step 1), else from
        the first matching ``.conflist`` (step 2), else ``.conf``/``.json``
        (step 3).

    Raises:
        DelegateError: (``network`` = ``"namespace/name"``) the NAD does not
            exist; its ``spec.config`` is invalid (no fallback to disk then:
            step 1 applies whenever the key is present); or none of the
            steps found a config (step 4; the message lists the files that
            were skipped as broken).
    """
    ref = f"{namespace}/{name}"
    if nad is None:
        raise DelegateError(ref, f"NetworkAttachmentDefinition {ref} not found")
    config = config_from_nad(nad, default_name=name)
    if config is not None:
        return config
    config, problems = _search_disk(conf_dirs, name)
    if config is not None:
        return config
    message = (
        f"NetworkAttachmentDefinition {ref} has no spec.config and no CNI config "
        f"named '{name}' in {' or '.join(_dirs(conf_dirs))}"
    )
    if problems:
        shown = problems[:_MAX_PROBLEMS_IN_MESSAGE]
        more = len(problems) - len(shown)
        message += " (skipped: " + "; ".join(shown) + (f"; and {more} more" if more else "") + ")"
    raise DelegateError(ref, message)
