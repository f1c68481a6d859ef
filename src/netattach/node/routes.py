"""Default-route selection (multi-net spec v1.3 §4.1.2.1.9, §6): planned, applied in the pod netns.

A pod may move its default route from the cluster default network to another
attachment with the selection key ``"default-route": [gateway, ...]``.  The
children have already configured their interfaces when this runs; this module
then rewrites the default routes inside the pod's network namespace over
netlink (pyroute2) and rewrites the CNI results to match, so that a later
CHECK, which compares ``prevResult.routes`` with the namespace (the reference
bridge and macvlan plugins do), and DEL still pass.

Pure helpers (no netlink): `plan_default_routes`, `with_default_routes`.
Touching the netns: `apply_default_routes`.
pyroute2 is imported inside those functions only (about 250 ms of imports),
so an ADD without ``default-route`` never pays for it.

Decisions (each is tested):

* **What "the default route" is.**  A route to ``0.0.0.0/0`` or ``::/0`` in
  the main table (254) whose output interface, or one of whose multipath
  hops, is an attachment's interface.  Other tables are left alone: they are
  policy routing a plugin set up on purpose (``sbr``, ``vrf``), not the
  pod's default route.  Default routes through interfaces that are no
  attachment's ``ifname`` (a plugin's extra link) and routes through
  nexthop objects (no device in the route) are left alone too.
* **After `apply_default_routes` the listed gateways are the pod's only
  default routes** through attachment interfaces, one per gateway, via the
  chosen attachment's interface.  That flushes the other attachments (spec
  §4.1.2.1.9 "flush the default route from the default network attachment and
  any attachments that do not have the default-route key set") and also the
  chosen attachment's own other default routes (e.g. its plugin's IPv6 default
  when only an IPv4 gateway is listed), so the ``default-route`` of the
  network-status annotation (§5.3.7.4) is exactly what the pod uses.  ``[]``
  therefore means no default route at all (§4.1.2.1.9: "This list may be
  empty").
* **At most one gateway per address family.**  The spec lets an element list
  several gateways ("an implementation may choose to assign a metric to each
  gateway in the list using that ordering"; §5.4 shows two IPv6 gateways);
  netattach does not assign metrics and refuses a second gateway of a family
  with `RouteError`.  IPv4-mapped IPv6 addresses (``::ffff:a.b.c.d``) count
  as IPv4, as Go's ``net.IP.To4`` (and so the plugins) read them.
* **Metric.**  The routes are installed (NLM_F_REPLACE) with the kernel's
  default metric for a route without one: 0 for IPv4, 1024 for IPv6, which
  is what a plugin's own default route has, so a plugin's default route on
  the chosen interface is replaced in place.
* **Order.**  The new routes are installed first, then the others deleted:
  an unreachable gateway fails before anything was removed.  A failure on the
  second family can leave the first one installed; the ADD fails then and
  the attachments are torn down anyway.
* **Results.**  Every default route (``dst`` with prefix length 0, in the
  main table: no ``table`` key or 254) is removed from each attachment's
  ``routes`` and ``{"dst": "0.0.0.0/0" | "::/0", "gw": gateway}`` appended to
  the chosen one's; a ``routes`` list that ends up empty is dropped
  (``omitempty``).  Results before 0.3.0 keep routes per family in
  ``ip4.routes`` / ``ip6.routes``; a gateway whose family has no ``ip4`` /
  ``ip6`` block there cannot be recorded (the block needs an ``ip``) and is
  left out of that result.  ``ips[].gateway`` is left as is: CNI defines it
  as the subnet's gateway, not as a route.  A ``None`` result stays ``None``.
* **Namespace entry.**  The netlink socket is created inside the pod netns
  by switching only the calling thread there (``netns.inside``) for the time
  it takes to open the socket, then switching back; the socket stays bound to
  the pod netns.  No helper process is forked (pyroute2's ``netns=`` mode
  forks one per socket), and a missing netns path is an error, never created.
"""
from __future__ import annotations

import copy
import errno
import ipaddress
import os
import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..cni.errors import ConfigError
from ..cni.version import is_legacy_result
from . import netns

__all__ = [
    "RouteError",
    "RouteTarget",
    "DefaultRoutePlan",
    "plan_default_routes",
    "with_default_routes",
    "apply_default_routes",
]

MAIN_TABLE = 254  # RT_TABLE_MAIN
DEFAULT_METRIC = {4: 0, 6: 1024}  # what the kernel gives a route added without a metric
_DEFAULT_DST = {4: "0.0.0.0/0", 6: "::/0"}
_AF = {4: socket.AF_INET, 6: socket.AF_INET6}
_V4_BROADCAST = ipaddress.IPv4Address("255.255.255.255")


class RouteError(ConfigError, ValueError):
    """A default-route request that cannot be honoured, or a netlink failure.

    The message names the network (or netns) and the cause.
    """


@dataclass(frozen=True)
class RouteTarget:
    """One attachment as `apply_default_routes` sees it.

    ifname: its interface name in the pod netns (``CNI_IFNAME``).
    result: its CNI ADD result, any version 0.1.0 .. 1.1.0, or None.
    default_route: the selection element's ``default-route`` gateways
        (§4.1.2.1.9), or None when the element has no such key; always None
        for attachment 0, the cluster default network.
    network: the network's name for messages, e.g. ``"ns/net-b"``.
    """
    ifname: str
    result: dict | None
    default_route: tuple[str, ...] | None
    network: str


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


# ------------------------------------------------------------------ pure helpers

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


def _rewrite(routes: Any, add: list[str], where: str, network: str) -> list | None:
    """`routes` without default routes, plus a default route via each of `add`."""
    if routes is None:
        routes = []
    if not isinstance(routes, list):
        raise RouteError(f"network {network}: result {where} is not a list: {routes!r}")
    kept = [copy.deepcopy(r) for r in routes if _default_family(r) is None]
    for gw in add:
        kept.append({"dst": _DEFAULT_DST[ipaddress.ip_address(gw).version], "gw": gw})
    return kept or None


def with_default_routes(result: dict | None, gateways: Sequence[str] = (),
                        network: str = "?") -> dict | None:
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


# ------------------------------------------------------------------ netlink

@contextmanager
def _rtnl(netns_path: str) -> Iterator[Any]:
    """A pyroute2 IPRoute whose netlink socket lives in the netns at `netns_path`.

    Only the calling thread enters the netns (`netns.inside`), and only while the
    socket is created. Raises RouteError when the path cannot be opened or is no netns.
    """
    from pyroute2 import IPRoute

    try:
        with netns.inside(netns_path):
            try:
                ipr = IPRoute()
            except OSError as e:
                raise RouteError(f"cannot open a netlink socket in {netns_path}: "
                                 f"{_netlink_reason(e)}") from e
    except netns.NetnsOpenError as e:
        raise RouteError(f"cannot open network namespace {netns_path}: "
                         f"{e.strerror or e}") from e
    except netns.NetnsEnterError as e:
        raise RouteError(f"cannot enter network namespace {netns_path}: "
                         f"{_netlink_reason(e)}; is it a network namespace?") from e
    try:
        yield ipr
    finally:
        ipr.close()


def _netlink_reason(e: BaseException) -> str:
    code = getattr(e, "code", None)
    if code is None and isinstance(e, OSError):
        code = e.errno
    text = os.strerror(code) if isinstance(code, int) and code > 0 else str(e)
    return f"{text} (errno {code})" if isinstance(code, int) else text


def _links(ipr: Any) -> dict[str, tuple[int, int | None]]:
    """{ifname: (index, mtu)} of every link in the socket's netns."""
    out = {}
    for link in ipr.link("dump"):
        name = link.get_attr("IFLA_IFNAME")
        if name is not None:
            out[name] = (link["index"], link.get_attr("IFLA_MTU"))
    return out


def _addresses(ipr: Any, index: int) -> list[str]:
    try:
        return [f"{a.get_attr('IFA_ADDRESS')}/{a['prefixlen']}"
                for a in ipr.addr("dump") if a["index"] == index]
    except Exception:  # only for an error message
        return []


def _route_devices(route: Any) -> list[int]:
    """Output interface indexes of a route: RTA_OIF, or each multipath hop's."""
    oif = route.get_attr("RTA_OIF")
    if oif is not None:
        return [oif]
    hops = route.get_attr("RTA_MULTIPATH") or []
    return [h["oif"] for h in hops]


def _same_ip(a: Any, b: str) -> bool:
    try:
        return a is not None and ipaddress.ip_address(a) == ipaddress.ip_address(b)
    except ValueError:
        return False


def _default_routes(ipr: Any, family: int) -> list[Any]:
    """Main-table default routes of one family (4/6) in the socket's netns."""
    out = []
    for r in ipr.route("dump", family=_AF[family]):
        table = r.get_attr("RTA_TABLE") or r["table"]
        if r["dst_len"] == 0 and table == MAIN_TABLE:
            out.append(r)
    return out


def _delete(ipr: Any, family: int, r: Any) -> None:
    """Delete exactly route `r` (as dumped); a route already gone is fine."""
    from pyroute2.netlink.exceptions import NetlinkError

    spec: dict[str, Any] = {
        "family": _AF[family], "dst_len": 0, "table": MAIN_TABLE, "tos": r["tos"],
        "proto": r["proto"], "scope": r["scope"], "type": r["type"],
        "priority": r.get_attr("RTA_PRIORITY") or 0,
    }
    hops = r.get_attr("RTA_MULTIPATH")
    if hops:
        spec["multipath"] = [
            {k: v for k, v in (("oif", h["oif"]), ("gateway", h.get_attr("RTA_GATEWAY")))
             if v is not None} for h in hops]
    else:
        spec["oif"] = r.get_attr("RTA_OIF")
        gw = r.get_attr("RTA_GATEWAY")
        if gw is not None:
            spec["gateway"] = gw
    try:
        ipr.route("del", **spec)
    except NetlinkError as e:
        if e.code != errno.ESRCH:
            raise


def apply_default_routes(netns_path: str,
                         attachments: Sequence[RouteTarget]) -> list[dict | None]:
    """Make the pod's default routes what the ``default-route`` key asks (spec §4.1.2.1.9).

    Args:
        netns_path: the pod's network namespace (``CNI_NETNS``).
        attachments: every attachment in order, the cluster default network
            first; at most one has ``default_route`` set.

    Inside the netns, when one attachment (the chosen one) has
    ``default_route``: for each of its gateways (at most one per family) a
    main-table default route via that gateway on the chosen interface is
    installed (replacing one with the same metric), then every other
    main-table default route, either family, whose device is an attachment's
    interface is deleted.  An attachment whose interface does not exist in
    the netns is skipped (only the chosen one must exist).

    Returns:
        One result per attachment, in order: new dicts (deep copies) updated
        by `with_default_routes` so their ``routes`` match the netns (the
        chosen one gets its gateways, the others lose their default routes);
        ``None`` stays ``None``.  When no attachment has ``default_route``
        nothing is done and the copies are unchanged.

    Raises:
        RouteError: the plan is invalid (see `plan_default_routes`), a result
            has an invalid shape (both before the netns is touched), the netns
            cannot be opened, the chosen interface is missing, a gateway is
            not reachable on the chosen interface (no connected subnet of it
            contains the gateway), or another netlink failure; the message
            names the network, interface and gateway.
    """
    plan = plan_default_routes([(a.ifname, a.default_route, a.network) for a in attachments])
    if plan is None:
        return [copy.deepcopy(a.result) for a in attachments]
    install = plan.by_family()
    results = [with_default_routes(a.result, list(install.values()) if i == plan.index else (),
                                   a.network)
               for i, a in enumerate(attachments)]

    from pyroute2.netlink.exceptions import NetlinkError

    with _rtnl(netns_path) as ipr:
        try:
            links = _links(ipr)
        except (NetlinkError, OSError) as e:
            raise RouteError(f"cannot list links in {netns_path}: {_netlink_reason(e)}") from e
        if plan.ifname not in links:
            raise RouteError(f"network {plan.network}: interface {plan.ifname} for the "
                             f"default route does not exist in {netns_path}")
        chosen = links[plan.ifname][0]
        for family, gw in install.items():
            try:
                ipr.route("replace", family=_AF[family], dst_len=0, table=MAIN_TABLE,
                          gateway=gw, oif=chosen, priority=DEFAULT_METRIC[family])
            except (NetlinkError, OSError) as e:
                code = getattr(e, "code", getattr(e, "errno", None))
                hint = ""
                if code in (errno.ENETUNREACH, errno.EHOSTUNREACH):
                    addrs = _addresses(ipr, chosen)
                    hint = (f": gateway {gw} is not reachable on {plan.ifname} (no subnet "
                            f"of {plan.ifname} contains it; {plan.ifname} has "
                            f"{', '.join(addrs) or 'no address'})")
                raise RouteError(f"network {plan.network}: cannot set the default route via "
                                 f"{gw} on {plan.ifname}{hint} [{_netlink_reason(e)}]") from e
        devices = {links[a.ifname][0] for a in attachments if a.ifname in links}
        for family in (4, 6):
            try:
                found = _default_routes(ipr, family)
            except (NetlinkError, OSError) as e:
                raise RouteError(f"cannot list the IPv{family} routes in {netns_path}: "
                                 f"{_netlink_reason(e)}") from e
            for r in found:
                if not devices.intersection(_route_devices(r)):
                    continue
                wanted = install.get(family)
                if (wanted is not None and r.get_attr("RTA_OIF") == chosen
                        and _same_ip(r.get_attr("RTA_GATEWAY"), wanted)
                        and (r.get_attr("RTA_PRIORITY") or 0) == DEFAULT_METRIC[family]):
                    continue  # the one just installed
                try:
                    _delete(ipr, family, r)
                except (NetlinkError, OSError) as e:
                    names = [n for n, (idx, _) in links.items() if idx in _route_devices(r)]
                    raise RouteError(
                        f"cannot delete the IPv{family} default route via "
                        f"{r.get_attr('RTA_GATEWAY') or 'multipath'} on {', '.join(names)} "
                        f"in {netns_path}: {_netlink_reason(e)}") from e
    return results
