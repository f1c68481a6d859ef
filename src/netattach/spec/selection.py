"""The Network Attachment Selection Annotation (multi-net spec v1.3 §4).

Parses the pod annotation ``k8s.v1.cni.cncf.io/networks`` into validated,
immutable :class:`NetworkSelectionElement` values.  Pure: string in, data out,
no I/O.  Every failure, whatever the input, is a :class:`SelectionError`.

Both formats of §4.1 are supported:

* §4.1.1 comma-delimited: ``net-a, other-ns/net-b, net-c@eth5`` (the
  ``@ifname`` suffix is the Multus extension, accepted for compatibility);
* §4.1.2 JSON list: ``[{"name": "net-a", "ips": ["10.0.0.5/24"]}, ...]``.

Decisions where the spec is silent (each is tested):

* **Format detection.**  A value whose first non-space character is ``[`` is
  the JSON list; one starting with ``{`` is rejected with a message asking for
  a list (Multus would also fail it, less clearly); anything else is the comma
  format.
* **Empty values.**  An empty/whitespace-only annotation is "no secondary
  networks" (``[]``), and so is the JSON list ``[]``.
* **Comma format strictness.**  Items and the parts around ``/`` and ``@`` are
  whitespace-trimmed like Multus does, but empty items (``a,,b``, a trailing
  comma), an empty namespace (``/net``) or an empty interface (``net@``) are
  errors, where Multus silently passes them on.
* **Unknown keys.**  Keys with a period are vendor keys (§4.1.2.1) and are
  ignored.  Keys without a period are reserved by the spec; they are ignored
  too, without error, so that annotations written for newer spec versions or
  for Multus keep working.  Key names are matched exactly (Go's JSON decoder
  used by Multus matches them case-insensitively; we do not copy that
  accident, so ``"Name"`` is an unknown key, not the name).
* **Multus keys.**  ``deviceID`` (string) and the pre-3.2 alias
  ``interfaceRequest`` (used only when ``interface`` is absent) are accepted,
  and port mappings may carry Multus' optional ``hostIP``.
* **null and "".**  JSON ``null`` for an optional key means "absent", and so
  does ``""`` for the optional string keys (``namespace`` per §4.1.2.1.2, and
  ``interface``, ``mac``, ``infiniband-guid``, ``deviceID``,
  ``ipam-claim-reference``), matching Multus' Go ``omitempty`` semantics.
  ``name`` is required and must be a non-empty string.
* **MAC (§4.1.2.1.4).**  Six bytes written as hex pairs separated by ``:``
  or ``-`` or as three dot-separated groups of four hex digits, the forms Go's
  ``net.ParseMAC`` (used by Multus and by the CNI plugins that apply the
  ``mac`` capability) accepts.  The value is normalized to lower-case
  colon form, the form ``ip link`` prints.  Multicast and all-zero addresses
  are rejected: the kernel refuses them as an Ethernet unicast address
  (``is_valid_ether_addr``), so the attachment could never succeed.
* **InfiniBand GUID (§4.1.2.1.10).**  Eight bytes in the same notations,
  normalized to lower-case colon form.
* **IPs (§4.1.2.1.3).**  An address with an optional decimal prefix length.
  Netmask notation (``/255.255.255.0``) and IPv6 zone ids (``%eth0``) are
  rejected: neither is accepted by Go's ``net.ParseCIDR``/``net.ParseIP`` that
  the delegated plugins use.  Values are kept as written.
* **default-route (§4.1.2.1.9).**  Gateway addresses without a prefix length.
* **Interface names (§4.1.2.1.5).**  The kernel's ``dev_valid_name`` rules:
  1-15 bytes of UTF-8, not ``.`` or ``..``, no ``/``, ``:`` or whitespace; we
  also refuse control characters (they cannot travel in ``CNI_IFNAME``
  safely).  Two elements requesting the same interface name is an error here
  already: the second attachment would have to fail (§4.1.2.1.5).
* **portMappings / bandwidth.**  Integers must be JSON integers (not floats
  nor booleans).  Unknown keys inside a port mapping or the bandwidth object
  are errors (§4.1.2.1.8 says each key "must be one of" the listed ones; for
  port mappings it catches typos).  Rates and bursts are capped at
  2**63-1 so they fit the Go ``int`` of the plugins that read them.
* **ipam-claim-reference (§4.1.2.1.11).**  The name of an IPAMClaim object,
  so it must be a DNS-1123 subdomain (the spec's own example has a dot).
* **Size.**  The annotation is capped at 64 KiB of UTF-8, far above any sane
  value and well below the 256 KiB Kubernetes allows for all annotations.
* **What to do with an invalid annotation** (the spec says it "shall be
  invalid and ignored") is the caller's decision; this module only reports.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ..cni.errors import ConfigError
from ..cni.jsonutil import json_type, loads_strict
from ..cni.names import ifname_problem, is_dns1123_label, is_dns1123_subdomain

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "NETWORKS_ANNOTATION",
    "DEFAULT_NETWORK_ANNOTATION",
    "MAX_ANNOTATION_BYTES",
    "NetworkSelectionElement",
    "SelectionError",
    "parse_network_selection",
    "selection_counts",
]

NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
"""Pod annotation selecting secondary networks (§4.1)."""

DEFAULT_NETWORK_ANNOTATION = "v1.multus-cni.io/default-network"
"""Multus' pod annotation overriding the cluster-wide default network."""

MAX_ANNOTATION_BYTES = 64 * 1024
"""Largest annotation value accepted, in bytes of UTF-8."""

_MAX_GO_INT = 2**63 - 1

# Patterns of the mac, infiniband-guid and ips checks, compiled (and cached by `re`)
# only when an element has such a key, not at every start (issue 11).
_HEX_PAIR_SEPARATED = {
    ":": r"[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2})*",
    "-": r"[0-9A-Fa-f]{2}(-[0-9A-Fa-f]{2})*",
}
_HEX_DOTTED = r"[0-9A-Fa-f]{4}(\.[0-9A-Fa-f]{4})*"
_PREFIX_LEN = r"0|[1-9][0-9]{0,2}"  # no leading zeros (Go's ParsePrefix)


# Keys of §4.1.2.1 plus the Multus keys we honour.
_PROTOCOLS = ("TCP", "UDP", "SCTP")
_PORT_MAPPING_KEYS = frozenset({"hostPort", "containerPort", "protocol", "hostIP"})
_BANDWIDTH_KEYS = ("ingressRate", "ingressBurst", "egressRate", "egressBurst")


class SelectionError(ConfigError, ValueError):
    """The selection annotation is invalid (§4.1).

    Attributes:
        key: the offending JSON key (``"name"``, ``"ips"``, ...) or ``None``
            when the annotation as a whole is at fault.
        value: the offending value (as parsed), or ``None``.
        index: position of the offending element in the annotation, or
            ``None`` when no single element is at fault.
        reason: the bare explanation, without the location prefix.
    """

    def __init__(
        self,
        reason: str,
        *,
        key: str | None = None,
        value: Any = None,
        index: int | None = None,
    ) -> None:
        self.reason = reason
        self.key = key
        self.value = value
        self.index = index
        where = [f"invalid {NETWORKS_ANNOTATION} annotation"]
        if index is not None:
            where.append(f"element {index}")
        if key is not None:
            where.append(f'"{key}"' if value is None else f'"{key}"={_short_repr(value)}')
        super().__init__(": ".join(where) + ": " + reason)


def _short_repr(value: Any, limit: int = 80) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)[:limit]
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


@dataclass(frozen=True)
class NetworkSelectionElement:
    """One selected attachment (§4.1.2.1), validated and normalized.

    ``namespace`` is already resolved (the pod's namespace when the annotation
    gave none).  ``port_mappings`` entries are dicts with ``hostPort``,
    ``containerPort``, ``protocol`` (upper case, default ``"TCP"``) and, when
    given, ``hostIP``.  ``bandwidth`` holds only the keys that were given.
    ``index`` is the element's position in the annotation (0-based).
    """

    name: str
    namespace: str
    interface: str | None = None
    ips: tuple[str, ...] | None = None
    mac: str | None = None
    default_route: tuple[str, ...] | None = None
    port_mappings: tuple[dict[str, Any], ...] | None = None
    bandwidth: dict[str, Any] | None = None
    cni_args: dict[str, Any] | None = None
    infiniband_guid: str | None = None
    ipam_claim_reference: str | None = None
    device_id: str | None = None
    index: int = 0

    def __hash__(self) -> int:
        # The generated hash would fail on the dict-valued fields; these
        # fields are equal whenever two elements are.
        return hash((self.index, self.namespace, self.name, self.interface))

    @property
    def ref(self) -> str:
        """``"namespace/name"``, the §4.1.1 / §5.3.1 form of the reference."""
        return f"{self.namespace}/{self.name}"


# ---------------------------------------------------------------- validators


def _parse_hw_addr(value: str, size: int) -> bytes | None:
    """Bytes of a hardware address in a ``net.ParseMAC`` notation, or None."""
    for sep, pattern in _HEX_PAIR_SEPARATED.items():
        if re.fullmatch(pattern, value):
            parts = value.split(sep)
            return bytes(int(p, 16) for p in parts) if len(parts) == size else None
    if re.fullmatch(_HEX_DOTTED, value):
        groups = value.split(".")
        if len(groups) * 2 != size:
            return None
        return b"".join(int(g, 16).to_bytes(2, "big") for g in groups)
    return None


def _hw_to_str(raw: bytes) -> str:
    return ":".join(f"{b:02x}" for b in raw)


def _is_ip(value: str) -> bool:
    if "%" in value:  # zone ids: not accepted by Go's net.ParseIP
        return False
    import ipaddress  # only for a selection with ips or a default-route (about 2 ms)
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def _is_ip_with_optional_prefix(value: str) -> bool:
    addr, slash, prefix = value.partition("/")
    if not _is_ip(addr):
        return False
    if not slash:
        return True
    if not re.fullmatch(_PREFIX_LEN, prefix):
        return False
    import ipaddress
    try:
        ipaddress.ip_interface(f"{addr}/{prefix}")
    except ValueError:
        return False
    return True


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# ------------------------------------------------------------------- parsing


def parse_network_selection(
    value: str, pod_namespace: str
) -> list[NetworkSelectionElement]:
    """Parse the ``k8s.v1.cni.cncf.io/networks`` annotation (§4.1).

    Args:
        value: the annotation value, in either §4.1.1 comma-delimited or
            §4.1.2 JSON list form.
        pod_namespace: the pod's namespace, used for references without one
            (§4.1.1, §4.1.2.1.1).

    Returns:
        The selected attachments in annotation order, ``[]`` for an empty
        value.  Repeated references stay separate elements (§4.2).

    Raises:
        SelectionError: for any invalid input (format, names §3.3, keys
            §4.1.2.1.x, ``default-route`` on more than one element, ``ips``
            together with ``ipam-claim-reference``, duplicate interface
            names, a value over :data:`MAX_ANNOTATION_BYTES`).  Nothing else
            is ever raised for a ``str`` input.
    """
    if not isinstance(value, str):
        raise SelectionError(f"the annotation value must be a string, not {type(value).__name__}")
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_ANNOTATION_BYTES:
        raise SelectionError(
            f"the annotation is {size} bytes long; at most {MAX_ANNOTATION_BYTES} are accepted"
        )
    stripped = value.strip()
    if not stripped:
        return []
    if stripped[0] == "[":
        elements = _parse_json_list(stripped, pod_namespace)
    elif stripped[0] == "{":
        raise SelectionError(
            "the JSON format must be a list of objects (§4.1.2): wrap the object in [ ]"
        )
    else:
        elements = _parse_comma_list(stripped, pod_namespace)
    _check_cross_element(elements)
    return elements


def selection_counts(elements: list[NetworkSelectionElement]) -> dict[str, int]:
    """How many of `elements` select each NetworkAttachmentDefinition: `"ns/name"`
    (NetworkSelectionElement.ref) -> count, in the order of each one's first element.

    The count is what a cap on repeats of one network bounds (netconf's
    `maxSameNetworkPerPod`): §4.2 lets a pod select one network several times, one
    attachment (and one interface) per element. Never raises.
    """
    counts: dict[str, int] = {}
    for e in elements:
        counts[e.ref] = counts.get(e.ref, 0) + 1
    return counts


def _check_cross_element(elements: list[NetworkSelectionElement]) -> None:
    with_route = [e.index for e in elements if e.default_route is not None]
    if len(with_route) > 1:
        raise SelectionError(
            f"only one element may set default-route (§4.1.2.1.9); elements "
            f"{', '.join(map(str, with_route))} do",
            key="default-route",
            value=list(elements[with_route[1]].default_route or ()),
            index=with_route[1],
        )
    seen: dict[str, int] = {}
    for e in elements:
        if e.interface is None:
            continue
        if e.interface in seen:
            raise SelectionError(
                f"interface name already requested by element {seen[e.interface]} (§4.1.2.1.5)",
                key="interface",
                value=e.interface,
                index=e.index,
            )
        seen[e.interface] = e.index


def _parse_comma_list(value: str, pod_namespace: str) -> list[NetworkSelectionElement]:
    """§4.1.1, plus Multus' ``@ifname`` suffix."""
    out: list[NetworkSelectionElement] = []
    for index, raw in enumerate(value.split(",")):
        item = raw.strip()
        if not item:
            raise SelectionError(
                "empty item in the comma-delimited list (§4.1.1)", value=raw, index=index
            )
        if item.count("/") > 1:
            raise SelectionError(
                f"{item!r} has more than one '/'; expected [namespace/]name[@interface]",
                value=item,
                index=index,
            )
        if item.count("@") > 1:
            raise SelectionError(
                f"{item!r} has more than one '@'; expected [namespace/]name[@interface]",
                value=item,
                index=index,
            )
        namespace: str | None = None
        rest = item
        if "/" in rest:
            namespace, rest = (p.strip() for p in rest.split("/"))
            if not namespace:
                raise SelectionError(
                    f"{item!r} has an empty namespace before '/'", key="namespace", value="",
                    index=index
                )
        interface: str | None = None
        name = rest
        if "@" in rest:
            name, interface = (p.strip() for p in rest.split("@"))
            if not interface:
                raise SelectionError(
                    f"{item!r} has an empty interface name after '@'",
                    key="interface",
                    value="",
                    index=index,
                )
        # '@' before '/' ("a@b/c") leaves '/' inside the namespace part or the
        # interface: the validators below reject both.
        if not name:
            raise SelectionError(f"{item!r} has an empty name", key="name", value="", index=index)
        _check_name(name, index)
        if namespace is not None:
            _check_namespace(namespace, index)
        if interface is not None:
            _check_ifname(interface, index)
        out.append(
            NetworkSelectionElement(
                name=name,
                namespace=namespace or pod_namespace,
                interface=interface,
                index=index,
            )
        )
    return out


def _parse_json_list(value: str, pod_namespace: str) -> list[NetworkSelectionElement]:
    """§4.1.2."""
    try:
        data = loads_strict(value)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise SelectionError(f"not valid JSON: {exc}") from None
    if not isinstance(data, list):
        raise SelectionError("the JSON format must be a list of objects (§4.1.2)")
    return [_parse_json_element(item, index, pod_namespace) for index, item in enumerate(data)]


def _optional(obj: dict[str, Any], key: str, *, empty_is_absent: bool = False) -> Any:
    value = obj.get(key)
    if value is None or (empty_is_absent and value == ""):
        return None
    return value


def _parse_json_element(item: object, index: int, pod_namespace: str) -> NetworkSelectionElement:
    if not isinstance(item, dict):
        raise SelectionError(
            f"each element must be a JSON object, not {json_type(item)} (§4.1.2)",
            value=item,
            index=index,
        )

    def fail(key: str, reason: str, value: Any = None) -> SelectionError:
        return SelectionError(reason, key=key, value=item.get(key) if value is None else value,
                              index=index)

    # 4.1.2.1.1 name (required)
    if "name" not in item:
        raise SelectionError('the required key is missing (§4.1.2.1.1)', key="name", index=index)
    name = item["name"]
    if not isinstance(name, str):
        raise fail("name", f"must be a string, not {json_type(name)} (§4.1.2.1.1)")
    if not name:
        raise fail("name", "must not be empty (§4.1.2.1.1)")
    _check_name(name, index)

    # 4.1.2.1.2 namespace
    namespace = _optional(item, "namespace", empty_is_absent=True)
    if namespace is not None:
        if not isinstance(namespace, str):
            raise fail("namespace", f"must be a string, not {json_type(namespace)} (§4.1.2.1.2)")
        _check_namespace(namespace, index)

    # 4.1.2.1.5 interface (and Multus' pre-3.2 alias interfaceRequest)
    interface = _optional(item, "interface", empty_is_absent=True)
    if_key = "interface"
    if interface is None:
        interface = _optional(item, "interfaceRequest", empty_is_absent=True)
        if_key = "interfaceRequest"
    if interface is not None:
        if not isinstance(interface, str):
            raise fail(if_key, f"must be a string, not {json_type(interface)} (§4.1.2.1.5)")
        _check_ifname(interface, index, key=if_key)

    # 4.1.2.1.3 ips
    ips = _optional(item, "ips")
    if ips is not None:
        if not isinstance(ips, list):
            raise fail("ips", f"must be a list of strings, not {json_type(ips)} (§4.1.2.1.3)")
        if not ips:
            raise fail("ips", "must contain at least one address (§4.1.2.1.3)")
        for ip in ips:
            if not isinstance(ip, str) or not _is_ip_with_optional_prefix(ip):
                raise fail(
                    "ips",
                    f"{_short_repr(ip)} is not an IPv4/IPv6 address with an optional "
                    "prefix length (§4.1.2.1.3)",
                )
        ips = tuple(ips)

    # 4.1.2.1.4 mac
    mac = _optional(item, "mac", empty_is_absent=True)
    if mac is not None:
        if not isinstance(mac, str):
            raise fail("mac", f"must be a string, not {json_type(mac)} (§4.1.2.1.4)")
        raw = _parse_hw_addr(mac, 6)
        if raw is None:
            raise fail("mac", "is not a 6-byte Ethernet MAC address like 02:23:45:67:89:01 "
                              "(§4.1.2.1.4)")
        if raw[0] & 1:
            raise fail("mac", "is a multicast address; a pod interface needs a unicast one "
                              "(§4.1.2.1.4)")
        if not any(raw):
            raise fail("mac", "the all-zero address cannot be assigned (§4.1.2.1.4)")
        mac = _hw_to_str(raw)

    # 4.1.2.1.10 infiniband-guid
    guid = _optional(item, "infiniband-guid", empty_is_absent=True)
    if guid is not None:
        if not isinstance(guid, str):
            raise fail("infiniband-guid", f"must be a string, not {json_type(guid)} (§4.1.2.1.10)")
        raw = _parse_hw_addr(guid, 8)
        if raw is None:
            raise fail(
                "infiniband-guid",
                "is not an 8-byte InfiniBand GUID like 24:8a:07:03:00:8d:ae:2f (§4.1.2.1.10)",
            )
        guid = _hw_to_str(raw)

    # 4.1.2.1.6 cni-args
    cni_args = _optional(item, "cni-args")
    if cni_args is not None and not isinstance(cni_args, dict):
        raise fail("cni-args", f"must be an object, not {json_type(cni_args)} (§4.1.2.1.6)")

    port_mappings = _parse_port_mappings(item, index)
    bandwidth = _parse_bandwidth(item, index)

    # 4.1.2.1.9 default-route
    default_route = _optional(item, "default-route")
    if default_route is not None:
        if not isinstance(default_route, list):
            raise fail(
                "default-route",
                f"must be a list of gateway addresses, not {json_type(default_route)} (§4.1.2.1.9)",
            )
        for gw in default_route:
            if not isinstance(gw, str) or not _is_ip(gw):
                raise fail(
                    "default-route",
                    f"{_short_repr(gw)} is not an IPv4/IPv6 gateway address (§4.1.2.1.9)",
                )
        default_route = tuple(default_route)

    # 4.1.2.1.11 ipam-claim-reference
    claim = _optional(item, "ipam-claim-reference", empty_is_absent=True)
    if claim is not None:
        if not isinstance(claim, str):
            raise fail(
                "ipam-claim-reference", f"must be a string, not {json_type(claim)} (§4.1.2.1.11)"
            )
        if not is_dns1123_subdomain(claim):
            raise fail(
                "ipam-claim-reference",
                "must name an IPAMClaim object (a DNS-1123 subdomain) (§4.1.2.1.11)",
            )
        if ips is not None:
            raise fail(
                "ipam-claim-reference",
                'cannot be combined with "ips" in the same element (§4.1.2.1.11)',
            )

    # Multus: deviceID
    device_id = _optional(item, "deviceID", empty_is_absent=True)
    if device_id is not None and not isinstance(device_id, str):
        raise fail("deviceID", f"must be a string, not {json_type(device_id)}")

    return NetworkSelectionElement(
        name=name,
        namespace=namespace or pod_namespace,
        interface=interface,
        ips=ips,
        mac=mac,
        default_route=default_route,
        port_mappings=port_mappings,
        bandwidth=bandwidth,
        cni_args=cni_args,
        infiniband_guid=guid,
        ipam_claim_reference=claim,
        device_id=device_id,
        index=index,
    )


def _parse_port_mappings(item: dict[str, Any], index: int) -> tuple[dict[str, Any], ...] | None:
    """§4.1.2.1.7."""
    key = "portMappings"
    value = _optional(item, key)
    if value is None:
        return None

    def fail(reason: str) -> SelectionError:
        return SelectionError(reason, key=key, value=value, index=index)

    if not isinstance(value, list):
        raise fail(f"must be a list of objects, not {json_type(value)} (§4.1.2.1.7)")
    if not value:
        raise fail("must contain at least one port mapping (§4.1.2.1.7)")
    out = []
    for n, entry in enumerate(value):
        if not isinstance(entry, dict):
            raise fail(f"entry {n} must be an object, not {json_type(entry)} (§4.1.2.1.7)")
        unknown = sorted(set(entry) - _PORT_MAPPING_KEYS)
        if unknown:
            raise fail(
                f"entry {n} has unknown key(s) {', '.join(unknown)}; allowed: "
                "hostPort, containerPort, protocol, hostIP (§4.1.2.1.7)"
            )
        norm: dict[str, Any] = {}
        for port_key in ("hostPort", "containerPort"):
            port = entry.get(port_key)
            if port is None:
                raise fail(f"entry {n} lacks the required {port_key} (§4.1.2.1.7)")
            if not _is_int(port) or not 1 <= port <= 65535:
                raise fail(f"entry {n}: {port_key} must be an integer from 1 to 65535 (§4.1.2.1.7)")
            norm[port_key] = port
        protocol = entry.get("protocol")
        if protocol is None:
            protocol = "TCP"
        if not isinstance(protocol, str) or protocol.upper() not in _PROTOCOLS:
            raise fail(f"entry {n}: protocol must be one of TCP, UDP, SCTP (§4.1.2.1.7)")
        norm["protocol"] = protocol.upper()
        host_ip = entry.get("hostIP")
        if host_ip is not None and host_ip != "":
            if not isinstance(host_ip, str) or not _is_ip(host_ip):
                raise fail(f"entry {n}: hostIP must be an IPv4/IPv6 address")
            norm["hostIP"] = host_ip
        out.append(norm)
    return tuple(out)


def _parse_bandwidth(item: dict[str, Any], index: int) -> dict[str, Any] | None:
    """§4.1.2.1.8."""
    key = "bandwidth"
    value = _optional(item, key)
    if value is None:
        return None

    def fail(reason: str) -> SelectionError:
        return SelectionError(reason, key=key, value=value, index=index)

    if not isinstance(value, dict):
        raise fail(f"must be an object, not {json_type(value)} (§4.1.2.1.8)")
    unknown = sorted(set(value) - set(_BANDWIDTH_KEYS))
    if unknown:
        raise fail(
            f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(_BANDWIDTH_KEYS)} "
            "(§4.1.2.1.8)"
        )
    if not value:
        raise fail(f"must contain at least one of {', '.join(_BANDWIDTH_KEYS)} (§4.1.2.1.8)")
    for bw_key in _BANDWIDTH_KEYS:
        if bw_key in value:
            v = value[bw_key]
            if not _is_int(v) or not 0 < v <= _MAX_GO_INT:
                raise fail(f"{bw_key} must be a positive integer (§4.1.2.1.8)")
    for burst, rate in (("ingressBurst", "ingressRate"), ("egressBurst", "egressRate")):
        if burst in value and rate not in value:
            raise fail(f"{burst} requires {rate} (§4.1.2.1.8)")
    return {k: value[k] for k in _BANDWIDTH_KEYS if k in value}


def _check_name(name: str, index: int) -> None:
    if not is_dns1123_label(name):
        raise SelectionError(
            "a NetworkAttachmentDefinition name must be a DNS-1123 label: at most 63 "
            "lower-case alphanumerics or '-', starting and ending alphanumeric (§3.3)",
            key="name",
            value=name,
            index=index,
        )


def _check_namespace(namespace: str, index: int) -> None:
    if not is_dns1123_label(namespace):
        raise SelectionError(
            "a namespace must be a DNS-1123 label: at most 63 lower-case alphanumerics "
            "or '-', starting and ending alphanumeric (§3.3)",
            key="namespace",
            value=namespace,
            index=index,
        )


def _check_ifname(interface: str, index: int, key: str = "interface") -> None:
    problem = ifname_problem(interface)
    if problem:
        raise SelectionError(
            f"not a valid Linux interface name: {problem} (§4.1.2.1.5)",
            key=key,
            value=interface,
            index=index,
        )


