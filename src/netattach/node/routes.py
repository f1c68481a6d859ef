"""Default routes applied in the pod netns (multi-net spec v1.3 §4.1.2.1.9): the netlink
half; spec/routes.py plans them (which attachment, which gateways) and rewrites the
results.

The children have already configured their interfaces when this runs;
`apply_default_routes` rewrites the default routes inside the pod's network
namespace over netlink (pyroute2) and returns the CNI results rewritten to match
(spec.routes.with_default_routes).  pyroute2 is imported inside the functions only
(about 250 ms of imports), so an ADD without ``default-route`` never pays for it.

Decisions (each is tested; what "the default route" is, one gateway per family and
the results' rewriting are spec/routes.py's):

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
* **Metric.**  The routes are installed (NLM_F_REPLACE) with the kernel's
  default metric for a route without one: 0 for IPv4, 1024 for IPv6, which
  is what a plugin's own default route has, so a plugin's default route on
  the chosen interface is replaced in place.
* **Order.**  The new routes are installed first, then the others deleted:
  an unreachable gateway fails before anything was removed.  A failure on the
  second family can leave the first one installed; the ADD fails then and
  the attachments are torn down anyway.
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

from ..spec.routes import MAIN_TABLE, RouteError, plan_default_routes, with_default_routes
from . import netns

__all__ = [
    "RouteTarget",
    "apply_default_routes",
]

DEFAULT_METRIC = {4: 0, 6: 1024}  # what the kernel gives a route added without a metric
_AF = {4: socket.AF_INET, 6: socket.AF_INET6}


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
    result: dict[str, Any] | None
    default_route: tuple[str, ...] | None
    network: str


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
                         attachments: Sequence[RouteTarget]) -> list[dict[str, Any] | None]:
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
