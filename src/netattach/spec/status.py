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
* **Address form.**  §5.3.3 asks for "IPv4 and/or IPv6 addresses"; its §5.4
  examples show them in CIDR form (``"192.0.2.2/24"``).  The readers users
  run (multi-networkpolicy-iptables, whereabouts' reconciler, KubeVirt) take
  each entry as a bare address, as Multus and the
  network-attachment-definition-client's CreateNetworkStatuses write it
  (docs/behaviour.md, "The addresses in network-status"), so an entry is the
  bare address (``"10.1.1.5"``) unless the caller asks for the CIDR form
  (``cidr``, the node's ``networkStatusIPFormat: cidr``).  Either way it is in
  canonical form, as Go's ``net.IP.String()`` prints it (lower-case IPv6 with
  the longest run of zeros compressed; an IPv4-mapped IPv6 address as IPv4,
  its prefix length less 96), and a result address that is not an address
  with a prefix length (which Go's CNI library refuses to decode, so Multus
  would not write it) is left out.
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

from ..cni.version import is_legacy_result

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)
if TYPE_CHECKING:
    from typing import Any, Required, TypedDict

__all__ = [
    "NETWORK_STATUS_ANNOTATION",
    "NetworkStatusEntry",
    "interface_address",
    "status_ips",
    "status_entry",
    "encode_status",
]

NETWORK_STATUS_ANNOTATION = "k8s.v1.cni.cncf.io/network-status"
"""Pod annotation carrying the attachment statuses (§5)."""

if TYPE_CHECKING:
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
else:
    NetworkStatusEntry = dict  # its keys: read by the type checker only
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


def interface_address(text: object) -> tuple[str, int | None] | None:
    """An address of a CNI result (``ips[].address``, ``ip4.ip``; CIDR form, the
    address with its prefix length: ``"10.1.1.5/24"``, ``"2001:db8::5/64"``), split
    into (address, prefix length), both canonical as Go prints them: the address as
    ``net.IP.String()`` does (IPv6 lower-case, the longest run of two or more zero
    groups compressed, RFC 5952; an IPv4-mapped IPv6 address as dotted IPv4, its
    prefix length less 96, None when that prefix is shorter than 96 and so names no
    IPv4 prefix). The form Kubernetes requires of a CIDR (apimachinery's
    IsValidInterfaceAddress: the address's ``String()``, "/", the prefix length).

    Returns None when `text` is not a string holding an IPv4 or IPv6 address (no zone,
    no leading zeros in an IPv4 part, as Go's ParseIP) with a decimal prefix length
    within the family's bits: Go's CNI library refuses to decode such a result.
    IPv4 is checked here; IPv6 through the standard library's ipaddress, imported
    only then (it costs a few ms, and most results are IPv4).
    """
    if not isinstance(text, str):
        return None
    host, slash, bits = text.partition("/")
    if not slash or not (bits.isascii() and bits.isdigit()):
        return None
    digits = bits.lstrip("0") or "0"  # Go takes leading zeros; a plugin's result is not
    if len(digits) > 3:               # trusted: no int() of thousands of digits
        return None
    prefix = int(digits)
    if ":" not in host:
        parts = host.split(".")
        if len(parts) != 4 or prefix > 32 or not all(
                p.isascii() and p.isdigit() and len(p) <= 3 and (p == "0" or p[0] != "0")
                and int(p) <= 255 for p in parts):
            return None
        return host, prefix
    if "%" in host or prefix > 128:
        return None
    import ipaddress  # only for an IPv6 address
    try:
        ip = ipaddress.IPv6Address(host)
    except ValueError:
        return None
    if ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped), (prefix - 96 if prefix >= 96 else None)
    return ip.compressed, prefix


def status_ips(addresses: list[Any], *, cidr: bool = False) -> list[str]:
    """The network-status ``ips`` (§5.3.3) of a result's addresses (CIDR strings, as
    `interface_address` reads them), in order: each as a bare address (``"10.1.1.5"``:
    what Multus writes and the readers of the annotation parse, docs/behaviour.md), or
    with `cidr` in CIDR form (``"10.1.1.5/24"``: the §5.4 examples' form). Canonical
    either way (`interface_address`). An address that does not parse is left out, and
    so is, with `cidr`, an IPv4-mapped one without an IPv4 prefix length; an address
    that comes again (the same after canonicalization) is listed once."""
    out: list[str] = []
    for text in addresses:
        parsed = interface_address(text)
        if parsed is None:
            continue
        address, prefix = parsed
        if cidr and prefix is None:
            continue
        value = f"{address}/{prefix}" if cidr else address
        if value not in out:
            out.append(value)
    return out


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


def _current_fields(result: dict[str, Any], ifname: str, cidr: bool) -> dict[str, Any]:
    """interface/ips/mac/mtu of a result >= 0.3.0 (§5.3.2.1, §5.3.3.1, §5.3.4.1); `ips`
    as `status_ips` writes them."""
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
    written = status_ips(ips, cidr=cidr)
    if written:
        fields["ips"] = written
    return fields


def _legacy_fields(result: dict[str, Any], ifname: str, cidr: bool) -> dict[str, Any]:
    """interface/ips of a result < 0.3.0 (§5.3.2.1, §5.3.3.1); `ips` as `status_ips`
    writes them."""
    fields: dict[str, Any] = {"interface": ifname}
    ips = []
    for key in ("ip4", "ip6"):
        block = result.get(key)
        if isinstance(block, dict):
            addr = _nonempty_str(block.get("ip"))
            if addr:
                ips.append(addr)
    written = status_ips(ips, cidr=cidr)
    if written:
        fields["ips"] = written
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
    cidr: bool = False,
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
        cidr: write ``ips`` in CIDR form (``"10.1.1.5/24"``, the §5.4 examples'),
            not as bare addresses (``"10.1.1.5"``, Multus' and what the
            annotation's readers parse; the default): `status_ips`, the
            node's ``networkStatusIPFormat``.

    Returns:
        A `NetworkStatusEntry`, keys in this order and only when they have a value:
        ``name``, ``interface``, ``ips`` (list of str, `status_ips`), ``mac``, ``mtu``
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
            fields.update(_legacy_fields(result, ifname, cidr))
        else:
            fields.update(_current_fields(result, ifname, cidr))
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
    entry: Any = {key: fields[key] for key in _KEY_ORDER if key in fields}
    return entry  # type: ignore[no-any-return]


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
