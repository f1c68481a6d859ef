"""The Network Attachment Status Annotation (multi-net spec v1.3 §5).

Builds the entries of the pod annotation ``k8s.v1.cni.cncf.io/network-status``
from CNI results, and encodes the list.  Pure: data in, data out.

Decisions where the spec is silent or loose (each is tested):

* **Which IPs (§5.3.3.1).**  The spec says "the element" of the result's
  ``ips`` but its examples (§5.4) list several addresses, and Multus lists
  every address of the interface.  We list every address whose ``interface``
  index is the first sandbox interface (rule 1).  When there is no sandbox
  interface, or rule 1 finds no address, we list the addresses that belong to
  no interface (no ``interface`` key, or a negative one; rule 2).  The second
  half of that fallback goes beyond the letter of rule 1: a plugin that
  reports a sandbox interface but leaves its IPs unindexed would otherwise get
  no ``ips`` at all, while those addresses are not the host-side addresses
  §5.3.3.1 wants to keep out.  Multus lists them too.
* **Address form.**  Addresses are copied as the result gives them, i.e. in
  CIDR form (``"10.1.1.5/24"``), as in the §5.4 examples.  Multus strips the
  prefix length; consumers that need a bare address must split on ``/``.
* **interface** falls back to the ``CNI_IFNAME`` we used when the result has
  no sandbox interface (the spec allows it for results < 0.3.0, and the
  minimal entry of §5.1.1 uses it too), so every entry names its interface.
* **mtu** (§5.3.5) is taken from the sandbox interface when it carries one
  (results of CNI 1.1.0 do).
* **dns** (§5.3.7) keeps only non-empty ``nameservers``, ``domain`` and
  ``search``; it is left out entirely when nothing remains.  ``options`` is
  not a §5.3.7 key and is dropped.
* **default-route** (§5.3.7.4) is what the caller passes (the gateways it
  installed for an element that had the selection key); an empty list is
  left out like Go's ``omitempty`` would.
* **Results without cniVersion** are classified by shape: ``ip4``/``ip6``
  keys mean a result older than 0.3.0.
* **Encoding** reproduces what Multus writes: each entry indented by four
  spaces, entries joined by ``,`` inside ``[`` ``]``, UTF-8 kept as is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Required, TypedDict, cast

from ..cni.version import is_legacy_result

__all__ = [
    "NETWORK_STATUS_ANNOTATION",
    "NetworkStatusEntry",
    "status_entry",
    "encode_status",
]

NETWORK_STATUS_ANNOTATION = "k8s.v1.cni.cncf.io/network-status"
"""Pod annotation carrying the attachment statuses (§5)."""

NetworkStatusEntry = TypedDict("NetworkStatusEntry", {
    "name": Required[str],
    "interface": str,
    "ips": list[str],
    "mac": str,
    "mtu": int,
    "default": Required[bool],
    "dns": dict[str, Any],
    "default-route": list[str],
    "device-info": dict[str, Any],
}, total=False)
"""One element of the network-status list (§5.3), as `status_entry` makes it: `name` and
`default` always, the others when they have a value (`dns`: nameservers, domain, search;
`device-info`: the §5.3.8 map). Entries read back from an annotation are plain JSON and
may hold anything; only those made here have this shape."""

_KEY_ORDER = (
    "name",
    "interface",
    "ips",
    "mac",
    "mtu",
    "default",
    "dns",
    "default-route",
    "device-info",
)


def _nonempty_str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _index(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str_list(value: object) -> list[str]:
    if not isinstance(value, list):
        return []
    return [s for s in value if isinstance(s, str) and s]


def _dns(result: dict[str, Any]) -> dict[str, Any] | None:
    dns = result.get("dns")
    if not isinstance(dns, dict):
        return None
    out: dict[str, Any] = {}
    nameservers = _str_list(dns.get("nameservers"))
    if nameservers:
        out["nameservers"] = nameservers
    domain = _nonempty_str(dns.get("domain"))
    if domain:
        out["domain"] = domain
    search = _str_list(dns.get("search"))
    if search:
        out["search"] = search
    return out or None


def _current_fields(result: dict[str, Any], ifname: str) -> dict[str, Any]:
    """interface/ips/mac/mtu of a result >= 0.3.0 (§5.3.2.1, §5.3.3.1, §5.3.4.1)."""
    fields: dict[str, Any] = {}
    interfaces = result.get("interfaces")
    if not isinstance(interfaces, list):
        interfaces = []
    sandbox_idx: int | None = None
    for i, iface in enumerate(interfaces):
        if isinstance(iface, dict) and _nonempty_str(iface.get("sandbox")):
            sandbox_idx = i
            break

    if sandbox_idx is not None:
        iface = interfaces[sandbox_idx]
        fields["interface"] = _nonempty_str(iface.get("name")) or ifname
        mac = _nonempty_str(iface.get("mac"))
        if mac:
            fields["mac"] = mac
        mtu = _index(iface.get("mtu"))
        if mtu is not None and mtu > 0:
            fields["mtu"] = mtu
    else:
        fields["interface"] = ifname

    ip_list = result.get("ips")
    if not isinstance(ip_list, list):
        ip_list = []
    entries = [
        ip for ip in ip_list if isinstance(ip, dict) and _nonempty_str(ip.get("address"))
    ]
    # §5.3.3.1 rule 1: the addresses of the first sandbox interface.
    ips = []
    if sandbox_idx is not None:
        ips = [ip["address"] for ip in entries if _index(ip.get("interface")) == sandbox_idx]
    # §5.3.3.1 rule 2 (and our fallback when rule 1 finds nothing): the
    # addresses that belong to no interface.
    if not ips:
        ips = [
            ip["address"]
            for ip in entries
            if ip.get("interface") is None
            or (_index(ip.get("interface")) is not None and ip["interface"] < 0)
        ]
    if ips:
        fields["ips"] = ips
    return fields


def _legacy_fields(result: dict[str, Any], ifname: str) -> dict[str, Any]:
    """interface/ips of a result < 0.3.0 (§5.3.2.1, §5.3.3.1)."""
    fields: dict[str, Any] = {"interface": ifname}
    ips = []
    for key in ("ip4", "ip6"):
        block = result.get(key)
        if isinstance(block, dict):
            addr = _nonempty_str(block.get("ip"))
            if addr:
                ips.append(addr)
    if ips:
        fields["ips"] = ips
    return fields


def status_entry(
    name: str,
    result: dict[str, Any] | None,
    *,
    ifname: str,
    default: bool,
    default_route: list[str] | None = None,
    device_info: dict[str, Any] | None = None,
    mtu: int | None = None,
) -> NetworkStatusEntry:
    """One element of the ``network-status`` list (§5.3).

    Args:
        name: the attachment's network name, ``"namespace/name"`` for a
            NetworkAttachmentDefinition (§5.3.1).
        result: the CNI ADD/GET result as a dict, of any CNI version (its
            ``cniVersion`` tells which; without one, ``ip4``/``ip6`` keys mean
            < 0.3.0), or ``None`` when the plugin returned none.
        ifname: the ``CNI_IFNAME`` used for the attachment.
        default: whether this is the cluster-wide default network (§5.3.6).
        default_route: gateways to report under ``default-route``
            (§5.3.7.4), for an attachment selected with that key.
        device_info: the §5.3.8 device information map, if any.
        mtu: the link MTU read from the pod netns (§5.3.5), used when the
            result itself gives none (results below CNI 1.1.0 never do).

    Returns:
        A `NetworkStatusEntry`, keys in this order and only when they have a value:
        ``name``, ``interface``, ``ips`` (list of str), ``mac``, ``mtu``
        (int), ``default`` (bool, always present), ``dns`` (dict with
        ``nameservers``/``domain``/``search``), ``default-route`` (list of
        str), ``device-info`` (dict).  Without a result it is the minimal
        entry of §5.1.1: ``name``, ``interface``, ``default``.

    Never raises for a malformed result: fields that cannot be read are left
    out.
    """
    fields: dict[str, Any] = {"name": name, "default": bool(default)}
    if isinstance(result, dict):
        if is_legacy_result(result):
            fields.update(_legacy_fields(result, ifname))
        else:
            fields.update(_current_fields(result, ifname))
        dns = _dns(result)
        if dns:
            fields["dns"] = dns
    else:
        fields["interface"] = ifname
    if mtu is not None and "mtu" not in fields and fields.get("interface") == ifname:
        fields["mtu"] = mtu
    if default_route:
        fields["default-route"] = list(default_route)
    if device_info:
        fields["device-info"] = device_info
    # in the order Multus writes them (a TypedDict cannot be built key by key in a loop)
    return cast(NetworkStatusEntry, {key: fields[key] for key in _KEY_ORDER if key in fields})


def added_interface_message(ifname: Any, entry: Mapping[str, Any], network: Any) -> str:
    """The message of the `AddedInterface` event of interface `ifname` of `network`, its
    network-status entry `entry` (its `ips`): "Add <ifname> <ips> from <network>", as ADD
    and hot-plug record it."""
    return f"Add {ifname} {entry.get('ips', [])} from {network}"


def encode_status(entries: Sequence[Mapping[str, Any]]) -> str:
    """The ``network-status`` annotation value for *entries* (§5): `NetworkStatusEntry`s,
    or entries read back from an annotation (hot-plug keeps those of the ADD).

    Formatted as Multus writes it: ``[`` + the entries, each JSON-encoded with
    a four-space indent, joined by ``,`` + ``]``; ``"[]"`` for no entries.
    Non-ASCII text is kept as UTF-8.

    Raises:
        TypeError / ValueError: if an entry is not JSON-serializable.
    """
    return "[" + ",".join(
        json.dumps(entry, indent=4, ensure_ascii=False, allow_nan=False) for entry in entries
    ) + "]"
