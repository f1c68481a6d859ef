"""netattach conf keys beyond the installer's flags: a document of the admin's
(`netattach install --netconf-file`, typically a ConfigMap's key mounted as a file:
deploy/components/netconf), merged into netattach's entry of the conflist.

The rules (docs/install.md, "Conf keys"):
* the document is one JSON or YAML mapping of netattach conf keys
  (docs/configuration.md); an empty document is no keys;
* a key may be any of the plugin's (netconf.SCHEMA) but those the installer owns
  (OWNED: what it derives from the node, the primary and its own files), which are
  refused with the reason, as are a Multus key netattach does not honour
  (netconf.MULTUS_ONLY_KEYS) and any other key (a typo would otherwise be ignored by
  the plugin, silently);
* a key of the document is written over what a flag writes for it (`logLevel` over
  --log-level, `confDir` over --plugin-conf-dir...);
* `hotplug: true` needs thick mode, as --hotplug does;
* the entry as written (flags and document together) must then pass the plugin's own
  netconf.parse_netconf (check_entry), so a bad value fails the installer with the
  key's name instead of every ADD.

The installer reads the document at start (a refusal exits 1) and again at every poll:
kubelet updates a mounted ConfigMap in place, and the conflist follows. A refusal
then leaves the conflist as it is, logs the error, and makes --check not ready.
"""
from __future__ import annotations

import json
from typing import Any

from ..cni.errors import CniError
from ..spec.netconf import MULTUS_ONLY_KEYS, SCHEMA, parse_netconf
from .files import MAX_CONFIG_BYTES, InstallError

OWNED: dict[str, str] = {
    "type": "netattach, or netattach-shim with --mode thick",
    "name": "the installer's network name",
    "cniVersion": "the version the plugin runs the cluster default network with",
    "kubeconfig": "the kubeconfig the installer writes (--kubeconfig-name, --host-conf-dir)",
    "clusterNetwork": "the cluster default network's config the installer found or was "
                      "given (--primary-config)",
    "capabilities": "the cluster default network's, and netattach's own",
    "runtimeConfig": "what the runtime passes on each call",
    "prevResult": "what the runtime passes on each call",
}
"""Keys the installer writes itself -> what it writes; refused in the document."""


def load_document(path: str, thick: bool) -> dict[str, Any]:
    """The keys of the document at `path` (JSON or YAML; symlinks followed, as a
    ConfigMap volume's files are links). thick: the installer's --mode is thick.

    Raises InstallError naming the file and the first key refused (module doc), or
    saying why the file is not a mapping of keys (unreadable, not YAML, a list...).
    """
    import yaml  # only the installer reads YAML here; never on the CNI path
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise InstallError(f"cannot read --netconf-file {path}: {e.strerror}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise InstallError(f"--netconf-file {path} is larger than {MAX_CONFIG_BYTES} bytes")
    try:
        doc = yaml.safe_load(raw)
    except yaml.YAMLError as e:
        raise InstallError(f"--netconf-file {path} is not JSON or YAML: {e}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise InstallError(f"--netconf-file {path} must be a mapping of netattach conf keys "
                           f"(docs/configuration.md), not a {type(doc).__name__}")
    for key in doc:
        problem = key_problem(key, doc[key], thick)
        if problem:
            raise InstallError(f"--netconf-file {path}: key {key!r}: {problem}")
    return doc


def key_problem(key: Any, value: Any, thick: bool) -> str | None:
    """None when the document may hold `key` with `value`, else why not (module doc)."""
    if not isinstance(key, str):
        return "keys are strings"
    if key in OWNED:
        return f"the installer writes it ({OWNED[key]}); it cannot be set"
    if key in MULTUS_ONLY_KEYS:
        return f"a Multus key netattach does not honour ({MULTUS_ONLY_KEYS[key]})"
    if key not in SCHEMA["properties"]:
        return "not a netattach conf key (docs/configuration.md lists them)"
    if key == "hotplug" and value is True and not thick:
        return "hot-plug needs thick mode (--mode thick): thin mode has no daemon"
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return f"{value!r} is not a JSON value (a YAML date or set?): quote it"
    return None


def check_entry(flags_entry: dict[str, Any], entry: dict[str, Any], cni_version: str,
                path: str | None) -> None:
    """Run the plugin's own configuration rules (netconf.parse_netconf) on netattach's
    conflist `entry` as the plugin gets it (the conflist's `cni_version` in it).
    flags_entry: the same entry without the document's keys, checked first, so the
    error says where the bad key came from: the flags, or the document at `path`.
    Raises InstallError with the plugin's message, which names the key."""
    checks = [("the installer's flags", flags_entry)]
    if path is not None:
        checks.append((f"--netconf-file {path}", entry))
    for origin, doc in checks:
        try:
            parse_netconf({**doc, "cniVersion": cni_version})
        except CniError as e:
            raise InstallError(f"the conf netattach would be given is refused by the plugin "
                               f"({origin}): {e.msg}") from None
