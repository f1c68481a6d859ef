"""libcni's result cache: what the runtime's libcni ADDed a sandbox with.

libcni (containernetworking/cni libcni/api.go `cacheAdd`, the library under
containerd's go-cni and CRI-O's ocicni) writes, after every successful ADD of a
network, the file `<cache dir>/results/<network name>-<container ID>-<ifname>`
(cache dir `/var/lib/cni` unless the runtime passes another; containerd and CRI-O
do not), mode 0600, a JSON object: `kind` "cniCacheV1", `containerId`, `config`
(the bytes of the conf or conflist as loaded, base64 as Go encodes []byte),
`ifName`, `networkName`, `netns`, `cniArgs`, `capabilityArgs` and `result`. A DEL
reads and then removes the file of the network name of the conflist it is given
(`cacheDel`), so an entry of another network's name is never removed by the runtime.

netattach reads it in one case only: a DEL without saved state (delete.py), to tell a
sandbox that the runtime ADDed without netattach (before netattach was installed, or
while its conflist was absent) from one whose saved state netattach lost.

Standard library only: imported on the exec'd CNI path.
"""
from __future__ import annotations

import base64
import binascii
import errno
import os
import stat
from dataclasses import dataclass, field

from ..cni.jsonutil import loads_strict

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)
if TYPE_CHECKING:
    from typing import Any

CACHE_DIR = "/var/lib/cni"
"""libcni's default cache dir (libcni `CacheDir`); entries are in its `results/`."""
KIND = "cniCacheV1"
"""`kind` of a cache entry (libcni `CNICacheV1`); older entries held a bare result."""
MAX_ENTRY_BYTES = 1 << 20
"""Bytes of one entry read at most: a conflist and a result are a few KiB."""


@dataclass(frozen=True)
class CachedAdd:
    """One libcni cache entry: `path` of the file; `network` its networkName; `config`
    the conf or conflist the ADD ran (decoded JSON object); `capability_args` the
    runtimeConfig values by capability; `result` the ADD's result (None if absent)."""
    path: str
    network: str
    config: dict[str, Any]
    capability_args: dict[str, Any] = field(default_factory=dict)
    result: dict[str, Any] | None = None

    @property
    def plugin_types(self) -> frozenset[str]:
        """The `type` of each plugin of the config (a conflist's `plugins`, or the conf)."""
        plugins = self.config.get("plugins")
        if not isinstance(plugins, list):
            plugins = [self.config]
        return frozenset(p["type"] for p in plugins
                         if isinstance(p, dict) and isinstance(p.get("type"), str))


def cached_adds(container_id: str, ifname: str,
                cache_dir: str = CACHE_DIR) -> list[CachedAdd]:
    """The entries of `<cache_dir>/results` for the container `container_id` and interface
    `ifname`, in name order: files named `<network>-<container_id>-<ifname>` whose
    content is a "cniCacheV1" entry with that containerId and ifName, a non-empty
    networkName and a config that is a JSON object. Anything else there (another
    sandbox's entry, a legacy bare result, a symlink, a directory, a file larger than
    MAX_ENTRY_BYTES, unreadable or malformed JSON) is left out; a missing dir is [].
    Never raises for what is in the dir; the names compared are the request's
    (cni.request validates CNI_CONTAINERID and CNI_IFNAME), no path is built from them.
    """
    results = os.path.join(cache_dir, "results")
    try:
        names = sorted(os.listdir(results))
    except OSError:
        return []
    suffix = f"-{container_id}-{ifname}"
    out = []
    for name in names:
        if len(name) <= len(suffix) or not name.endswith(suffix):
            continue
        path = os.path.join(results, name)
        entry = _read_entry(path)
        if (entry is None or entry.get("kind") != KIND
                or entry.get("containerId") != container_id or entry.get("ifName") != ifname):
            continue
        network, config = entry.get("networkName"), _config(entry.get("config"))
        if not isinstance(network, str) or not network or config is None:
            continue
        caps, result = entry.get("capabilityArgs"), entry.get("result")
        out.append(CachedAdd(path, network, config, caps if isinstance(caps, dict) else {},
                             result if isinstance(result, dict) and result else None))
    return out


def _read_entry(path: str) -> Any:
    """The JSON of the regular file `path` (not followed if a symlink), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_ENTRY_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MAX_ENTRY_BYTES + 1)
        if len(data) > MAX_ENTRY_BYTES:
            return None
        return loads_strict(data)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


def _config(value: object) -> dict[str, Any] | None:
    """The config of an entry: base64 (Go's encoding of []byte) of a JSON object."""
    if not isinstance(value, str):
        return None
    try:
        config = loads_strict(base64.b64decode(value, validate=True))
    except (binascii.Error, ValueError):
        return None
    return config if isinstance(config, dict) else None


def remove_network(network: str, cache_dir: str = CACHE_DIR) -> list[str]:
    """Remove every entry of network `network` from `<cache_dir>/results`: regular files
    named `<network>-...` holding a "cniCacheV1" entry of that networkName (another
    network whose name merely starts the same, a symlink, anything else stays).
    netattach's files leaving a node (nodefiles.remove_when_unused): once its conflist
    is gone, the runtime DELs through another network name, so no DEL would remove
    them. Returns "<path> (<reason>)" for each entry that could not be removed."""
    results = os.path.join(cache_dir, "results")
    try:
        names = os.listdir(results)
    except OSError:
        return []
    left = []
    for name in names:
        if not name.startswith(network + "-"):
            continue
        path = os.path.join(results, name)
        entry = _read_entry(path)
        if not (isinstance(entry, dict) and entry.get("kind") == KIND
                and entry.get("networkName") == network):
            continue
        try:
            remove(CachedAdd(path, network, {}))
        except OSError as e:
            left.append(f"{path} ({e.strerror})")
    return left


def remove(entry: CachedAdd) -> None:
    """Remove the entry's file, as libcni's DEL of its network would have (`cacheDel`);
    already gone is fine. Raises OSError for anything else."""
    try:
        os.unlink(entry.path)
    except OSError as e:
        if e.errno != errno.ENOENT:
            raise
