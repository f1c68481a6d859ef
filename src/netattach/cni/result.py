"""CNI results as plain dicts, and conversion between every pair of spec versions.

Result shapes (CNI SPEC.md "Success" / "ADD result", per version):

* 0.1.0, 0.2.0: {"cniVersion", "ip4": {"ip", "gateway", "routes": [{"dst", "gw"}]},
  "ip6": {...}, "dns"}
* 0.3.0, 0.3.1, 0.4.0: {"cniVersion", "interfaces": [{"name", "mac", "sandbox"}],
  "ips": [{"version": "4"|"6", "address", "gateway", "interface": index}],
  "routes": [{"dst", "gw"}], "dns"}
* 1.0.0: as 0.4.0 without "version" in "ips"
* 1.1.0: 1.0.0 plus interface "mtu", "socketPath", "pciID" and route "mtu",
  "advmss", "priority", "table", "scope"

"dns" is {"nameservers": [...], "domain", "search": [...], "options": [...]}.

Conversion follows libcni's pkg/types/{020,040,100} converters: between different
versions only the fields the target version defines are kept, empty lists and
empty DNS are omitted; converting to the same version is a deep copy. Differences
from libcni: the 1.1.0-only fields are dropped below 1.1.0 (libcni's route type
is shared by all versions and keeps them), and a version-"0.2.0" result keeps
the first IPv4 and the first IPv6 address and their routes only, as libcni does.
"""
from __future__ import annotations

import copy

from .errors import DecodeFailure, VersionError
from .version import check_supported

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)
if TYPE_CHECKING:
    from typing import Any

# Result layout families, as libcni's Go types group the versions.
_FAMILY = {"0.1.0": "020", "0.2.0": "020", "0.3.0": "040", "0.3.1": "040", "0.4.0": "040",
           "1.0.0": "100", "1.1.0": "110"}

_DNS_KEYS = ("nameservers", "domain", "search", "options")
_IFACE_KEYS = ("name", "mac", "sandbox")
_IFACE_KEYS_110 = ("name", "mac", "mtu", "sandbox", "socketPath", "pciID")
_ROUTE_KEYS = ("dst", "gw")
_ROUTE_KEYS_110 = ("dst", "gw", "mtu", "advmss", "priority", "table", "scope")


def result_version(result: dict[str, Any], default_version: str) -> str:
    """The result's "cniVersion", or `default_version` when it is missing or "".

    libcni invoke.fixupResultVersion reads a child's result that lacks a version
    as the version of the configuration it was given. A non-string cniVersion
    raises DecodeFailure (6).
    """
    v = result.get("cniVersion")
    if v is None or v == "":
        return default_version
    if not isinstance(v, str):
        raise DecodeFailure(f"result cniVersion is not a string: {v!r}")
    return v


# ------------------------------------------------------------------ helpers

def _fail(msg: str, details: str = "") -> DecodeFailure:
    return DecodeFailure(f"invalid CNI result: {msg}", details)


def _list_of_dicts(value: Any, where: str) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(x, dict) for x in value):
        raise _fail(f"{where} must be a list of objects")
    return value


def _pick(src: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """Copy of `src` limited to `keys` (in that order), None values and "" dropped."""
    return {k: copy.deepcopy(src[k]) for k in keys if k in src and src[k] is not None
            and src[k] != ""}


def _dns(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _fail("dns must be an object")
    return {k: copy.deepcopy(value[k]) for k in _DNS_KEYS if value.get(k)}


def _addr_is_v4(cidr: Any, where: str) -> bool:
    """True for an IPv4 (or IPv4-mapped IPv6) "addr[/len]", as Go's IP.To4() != nil."""
    import ipaddress  # only needed when converting across families of versions
    if not isinstance(cidr, str):
        raise _fail(f"{where} must be a string, got {cidr!r}")
    try:
        ip = ipaddress.ip_address(cidr.split("/", 1)[0])
    except ValueError:
        raise _fail(f"{where} is not an IP address: {cidr!r}") from None
    return ip.version == 4 or ip.ipv4_mapped is not None


# Canonical form: {"interfaces": [...1.1.0 keys], "ips": [{"version"?, "interface"?,
# "address", "gateway"?}], "routes": [...1.1.0 keys], "dns": {...}}

def _read(result: dict[str, Any], family: str) -> dict[str, Any]:
    out: dict[str, Any] = {"interfaces": [], "ips": [], "routes": [],
                           "dns": _dns(result.get("dns"))}
    if family == "020":
        for key, ver in (("ip4", "4"), ("ip6", "6")):
            ipc = result.get(key)
            if ipc is None:
                continue
            if not isinstance(ipc, dict):
                raise _fail(f"{key} must be an object")
            if not isinstance(ipc.get("ip"), str) or not ipc["ip"]:
                raise _fail(f"{key}.ip must be a CIDR string")
            ip = {"version": ver, "address": ipc["ip"]}
            if ipc.get("gateway"):
                ip["gateway"] = ipc["gateway"]
            out["ips"].append(ip)
            out["routes"] += [_pick(r, _ROUTE_KEYS)
                              for r in _list_of_dicts(ipc.get("routes"), f"{key}.routes")]
        return out
    iface_keys = _IFACE_KEYS_110 if family == "110" else _IFACE_KEYS
    route_keys = _ROUTE_KEYS_110 if family == "110" else _ROUTE_KEYS
    out["interfaces"] = [_pick(i, iface_keys)
                         for i in _list_of_dicts(result.get("interfaces"), "interfaces")]
    for ipc in _list_of_dicts(result.get("ips"), "ips"):
        if not isinstance(ipc.get("address"), str) or not ipc["address"]:
            raise _fail("ips[].address must be a CIDR string")
        ip = _pick(ipc, ("interface", "address", "gateway"))
        if family == "040" and ipc.get("version") in ("4", "6"):
            ip["version"] = ipc["version"]
        out["ips"].append(ip)
    out["routes"] = [_pick(r, route_keys) for r in _list_of_dicts(result.get("routes"), "routes")]
    return out


def _write(canon: dict[str, Any], family: str, to_version: str) -> dict[str, Any]:
    out: dict[str, Any] = {"cniVersion": to_version}
    if family == "020":
        ip4 = next((ip for ip in canon["ips"] if _ip_version(ip) == "4"), None)
        ip6 = next((ip for ip in canon["ips"] if _ip_version(ip) == "6"), None)
        if ip4 is None and ip6 is None:
            raise VersionError(f"cannot convert result to version {to_version}: it has no IP "
                               "address", "results of versions 0.1.0 and 0.2.0 need an IPv4 or "
                               "IPv6 address")
        for key, ip, v4 in (("ip4", ip4, True), ("ip6", ip6, False)):
            if ip is None:
                continue
            ipc: dict[str, Any] = {"ip": ip["address"]}
            if ip.get("gateway"):
                ipc["gateway"] = ip["gateway"]
            routes = [_pick(r, _ROUTE_KEYS) for r in canon["routes"]
                      if _addr_is_v4(r.get("dst"), "routes[].dst") == v4]
            if routes:
                ipc["routes"] = routes
            out[key] = ipc
    else:
        iface_keys = _IFACE_KEYS_110 if family == "110" else _IFACE_KEYS
        route_keys = _ROUTE_KEYS_110 if family == "110" else _ROUTE_KEYS
        if canon["interfaces"]:
            out["interfaces"] = [_pick(i, iface_keys) for i in canon["interfaces"]]
        ips = []
        for ip in canon["ips"]:
            new = {}
            if family == "040":
                new["version"] = _ip_version(ip)
            new.update(_pick(ip, ("interface", "address", "gateway")))
            ips.append(new)
        if ips:
            out["ips"] = ips
        if canon["routes"]:
            out["routes"] = [_pick(r, route_keys) for r in canon["routes"]]
    if canon["dns"]:
        out["dns"] = copy.deepcopy(canon["dns"])
    return out


def _ip_version(ip: dict[str, Any]) -> str:
    v = ip.get("version")
    if v == "4" or v == "6":
        return str(v)
    return "4" if _addr_is_v4(ip.get("address"), "ips[].address") else "6"


def convert_result(result: dict[str, Any], to_version: str,
                   default_version: str | None = None) -> dict[str, Any]:
    """`result` converted to CNI version `to_version` (a new dict; the input is not changed).

    The source version is result_version(result, default_version); with
    default_version None a result without cniVersion is taken as already being
    `to_version`. The output always has "cniVersion" = to_version.

    Raises:
    * VersionError (1): source or target not in SUPPORTED_VERSIONS, or a
      conversion to 0.1.0/0.2.0 of a result with no IP address (libcni types040
      convertTo02x "no valid IP addresses");
    * DecodeFailure (6): the result is not an object or its fields have the wrong
      shape for its version.
    """
    if not isinstance(result, dict):
        raise DecodeFailure("invalid CNI result: not a JSON object")
    check_supported(to_version, "target result version")
    source = check_supported(result_version(result, default_version or to_version),
                             "result version")
    if source == to_version:
        out = copy.deepcopy(result)
        out["cniVersion"] = to_version
        return out
    canon = _read(result, _FAMILY[source])
    return _write(canon, _FAMILY[to_version], to_version)
