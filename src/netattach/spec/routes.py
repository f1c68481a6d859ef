"""Default-route planning (multi-net spec v1.3 §4.1.2.1.9, §6), pure: which attachment
gets the pod's default route, and the CNI results rewritten to match.

A pod may move its default route from the cluster default network to another
attachment with the selection key ``"default-route": [gateway, ...]``.  The plan is
validated when the ADD is planned (`plan_default_routes`, also `netattach validate`);
node/routes.py then applies it inside the pod netns over netlink and rewrites the
results with `with_default_routes`, so that a later CHECK, which compares
``prevResult.routes`` with the namespace (the reference bridge and macvlan plugins
do), and DEL still pass.  No netlink here, and nothing heavier than ipaddress.

Decisions (each is tested):

* **What "the default route" is.**  A route to ``0.0.0.0/0`` or ``::/0`` in
  the main table (254) whose output interface, or one of whose multipath
  hops, is an attachment's interface.  Other tables are left alone: they are
  policy routing a plugin set up on purpose (``sbr``, ``vrf``), not the
  pod's default route.  Default routes through interfaces that are no
  attachment's ``ifname`` (a plugin's extra link) and routes through
  nexthop objects (no device in the route) are left alone too.
* **At most one gateway per address family.**  The spec lets an element list
  several gateways ("an implementation may choose to assign a metric to each
  gateway in the list using that ordering"; §5.4 shows two IPv6 gateways);
  netattach does not assign metrics and refuses a second gateway of a family
  with `RouteError`.  IPv4-mapped IPv6 addresses (``::ffff:a.b.c.d``) count
  as IPv4, as Go's ``net.IP.To4`` (and so the plugins) read them.
* **Results.**  Every default route (``dst`` with prefix length 0, in the
  main table: no ``table`` key or 254) is removed from each attachment's
  ``routes`` and ``{"dst": "0.0.0.0/0" | "::/0", "gw": gateway}`` appended to
  the chosen one's; a ``routes`` list that ends up empty is dropped
  (``omitempty``).  Results before 0.3.0 keep routes per family in
  ``ip4.routes`` / ``ip6.routes``; a gateway whose family has no ``ip4`` /
  ``ip6`` block there cannot be recorded (the block needs an ``ip``) and is
  left out of that result.  ``ips[].gateway`` is left as is: CNI defines it
  as the subnet's gateway, not as a route.  A ``None`` result stays ``None``.
"""
from __future__ import annotations

import copy
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..cni.errors import ConfigError
from ..cni.version import is_legacy_result

__all__ = [
    "MAIN_TABLE",
    "RouteError",
    "DefaultRoutePlan",
    "plan_default_routes",
    "with_default_routes",
]

MAIN_TABLE = 254  # RT_TABLE_MAIN
_DEFAULT_DST = {4: "0.0.0.0/0", 6: "::/0"}
_V4_BROADCAST = ipaddress.IPv4Address("255.255.255.255")


class RouteError(ConfigError, ValueError):
    """A default-route request that cannot be honoured, or a netlink failure
    (node/routes.py raises it too).

    The message names the network (or netns) and the cause.
    """


@dataclass(frozen=True)
class DefaultRoutePlan:
    """What `plan_default_routes` decided.

    index / ifname / network: the attachment that carries ``default-route``.
    gateways: its gateways as given (order kept), for network-status
        ``default-route`` (§5.3.7.4); empty for ``[]``.
    v4 / v6: the gateway to install per family (normalized text), or None.
    """
    index: int
    ifname: str
    network: str
    gateways: tuple[str, ...]
    v4: str | None
    v6: str | None

    def by_family(self) -> dict[int, str]:
        """{4: gw, 6: gw} for the families that get a default route."""
        return {f: gw for f, gw in ((4, self.v4), (6, self.v6)) if gw is not None}


def _gateway(text: Any, network: str) -> tuple[int, str]:
    """(family, normalized address) of a gateway; IPv4-mapped IPv6 is IPv4."""
    if not isinstance(text, str):
        raise RouteError(f"network {network}: default-route gateway {text!r} is not a string")
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        raise RouteError(f"network {network}: default-route gateway {text!r} is not an "
                         "IPv4/IPv6 address (§4.1.2.1.9)") from None
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_unspecified or ip.is_multicast or ip.is_loopback or ip == _V4_BROADCAST:
        raise RouteError(f"network {network}: default-route gateway {text} is not a unicast "
                         "address a default route can point at")
    return ip.version, str(ip)


def plan_default_routes(
    elements: Sequence[tuple[str, Sequence[str] | None] | tuple[str, Sequence[str] | None, str]],
) -> DefaultRoutePlan | None:
    """Validate the ``default-route`` keys of a pod's attachments (spec §4.1.2.1.9).

    Args:
        elements: one ``(ifname, default_route)`` or ``(ifname, default_route,
            network)`` per attachment, in attachment order; element 0 is the
            cluster default network.  ``default_route`` is None when the
            selection element has no such key, else the list of gateways
            (possibly empty).  Without a network name, messages use the ifname.

    Returns:
        None when no element has the key (nothing to do), else the
        `DefaultRoutePlan`.  An empty list gives a plan with no gateway:
        remove every default route and install none.

    Raises:
        RouteError: more than one element has the key (the selection parser
            already refuses that; checked again here), element 0 has it, a
            gateway is not an IP address or not a unicast one (unspecified,
            loopback, multicast, 255.255.255.255: the kernel would install
            ``0.0.0.0`` as a device route without gateway, or refuse the
            others), or two gateways of the same address family (netattach
            installs at most one per family; see the module docstring).
    """
    carriers = [i for i, e in enumerate(elements) if e[1] is not None]
    if not carriers:
        return None

    def name(i: int) -> str:
        e = elements[i]
        return e[2] if len(e) > 2 else e[0]

    if len(carriers) > 1:
        raise RouteError("only one network may set default-route (§4.1.2.1.9); set by "
                         + ", ".join(name(i) for i in carriers))
    index = carriers[0]
    if index == 0:
        raise RouteError(f"network {name(0)} is the cluster default network: it cannot carry "
                         "a default-route selection key (§4.1.2.1.9)")
    ifname, raw = elements[index][0], elements[index][1]
    network = name(index)
    if isinstance(raw, (str, bytes)) or not isinstance(raw, Sequence):
        raise RouteError(f"network {network}: default-route must be a list of gateways, "
                         f"not {raw!r}")
    per_family: dict[int, list[str]] = {4: [], 6: []}
    for text in raw:
        family, gw = _gateway(text, network)
        per_family[family].append(gw)
    for family, gws in per_family.items():
        if len(gws) > 1:
            raise RouteError(
                f"network {network}: default-route lists {len(gws)} IPv{family} gateways "
                f"({', '.join(gws)}); netattach installs at most one default gateway per "
                "address family")
    return DefaultRoutePlan(index=index, ifname=ifname, network=network,
                            gateways=tuple(raw),
                            v4=per_family[4][0] if per_family[4] else None,
                            v6=per_family[6][0] if per_family[6] else None)


def _default_family(route: Any) -> int | None:
    """4 or 6 when `route` is a main-table default route of a CNI result, else None."""
    if not isinstance(route, dict):
        return None
    table = route.get("table")
    if table is not None and table != MAIN_TABLE:
        return None
    dst = route.get("dst")
    if not isinstance(dst, str):
        return None
    try:
        net = ipaddress.ip_network(dst, strict=False)
    except ValueError:
        return None
    return net.version if net.prefixlen == 0 else None


def _rewrite(routes: Any, add: list[str], where: str, network: str) -> list[Any] | None:
    """`routes` without default routes, plus a default route via each of `add`."""
    if routes is None:
        routes = []
    if not isinstance(routes, list):
        raise RouteError(f"network {network}: result {where} is not a list: {routes!r}")
    kept = [copy.deepcopy(r) for r in routes if _default_family(r) is None]
    for gw in add:
        kept.append({"dst": _DEFAULT_DST[ipaddress.ip_address(gw).version], "gw": gw})
    return kept or None


def with_default_routes(result: dict[str, Any] | None, gateways: Sequence[str] = (),
                        network: str = "?") -> dict[str, Any] | None:
    """A copy of `result` whose default routes are exactly one per gateway in `gateways`.

    Every main-table default route (``dst`` with prefix length 0; no ``table``
    or ``table`` 254) is removed from the result's routes, then
    ``{"dst": "0.0.0.0/0", "gw": gw}`` / ``{"dst": "::/0", "gw": gw}`` is
    appended for each gateway (normalized addresses, at most one per family,
    as `DefaultRoutePlan.by_family` gives them).  Shapes:

    * 0.3.0 .. 1.1.0: the top-level ``routes`` list;
    * 0.1.0 / 0.2.0 (or no cniVersion and ``ip4``/``ip6`` keys): ``ip4.routes``
      and ``ip6.routes``; a gateway of a family without its block is left out.

    A routes list that ends up empty is removed; everything else is kept as
    is.  None gives None.  The input is not modified.

    Raises:
        RouteError: the result is not an object, or its routes are not a list.
    """
    if result is None:
        return None
    if not isinstance(result, dict):
        raise RouteError(f"network {network}: CNI result is not an object: {result!r}")
    out = copy.deepcopy(result)
    if is_legacy_result(result):
        for key, family in (("ip4", 4), ("ip6", 6)):
            block = out.get(key)
            if block is None:
                continue
            if not isinstance(block, dict):
                raise RouteError(f"network {network}: result {key} is not an object")
            add = [gw for gw in gateways if ipaddress.ip_address(gw).version == family]
            routes = _rewrite(block.get("routes"), add, f"{key}.routes", network)
            if routes is None:
                block.pop("routes", None)
            else:
                block["routes"] = routes
        return out
    routes = _rewrite(out.get("routes"), list(gateways), "routes", network)
    if routes is None:
        out.pop("routes", None)
    else:
        out["routes"] = routes
    return out
