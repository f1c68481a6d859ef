"""routes.py with real plugins in real network namespaces (needs root).

The pod: eth0 from a bridge (isGateway, host-local with a default route) as
the cluster default network, net1 from macvlan on a host veth as the selected
network. The chain engine runs the plugins as the meta-plugin does; what the
pod ends up with is read with `ip`, as an admin would; then CHECK (which
compares prevResult routes with the netns) and DEL run with the results
`apply_default_routes` returned.

Debian's plugins (/usr/lib/cni) cover CNI 0.4.0 and 1.0.0, the reference
plugins v1.9.1 ($NETATTACH_CNI_BIN, `make testbin`) CNI 1.1.0.
"""
from __future__ import annotations

import json

import pytest

from netattach.cni import chain
from netattach.cni.errors import CniError
from netattach.node.netnsinfo import link_mtus
from netattach.node.routes import RouteTarget, apply_default_routes
from netattach.spec.routes import RouteError
from netattach_testbed import netns as tb

pytestmark = pytest.mark.integration

DEBIAN_BIN = "/usr/lib/cni"
# 198.18.0.0/15 only (the host is on 192.0.2.0/24), ULA prefixes not on the host (fd00::/64 is).
V4 = {"eth0": "198.18.211", "net1": "198.18.212"}
V6 = {"eth0": "fd4e:6174:211", "net1": "fd4e:6174:212"}


def gw4(ifname: str) -> str:
    return f"{V4[ifname]}.1"


def gw6(ifname: str) -> str:
    return f"{V6[ifname]}::1"


def ranges(ifname: str, v6: bool) -> list:
    out = [[{"subnet": f"{V4[ifname]}.0/24", "gateway": gw4(ifname)}]]
    if v6:
        out.append([{"subnet": f"{V6[ifname]}::/64", "gateway": gw6(ifname)}])
    return out


def default_net(env: tb.HostEnv, version: str, v6: bool = False) -> chain.NetworkConfig:
    """The cluster default network: a bridge that is the pod's gateway, default route(s)."""
    routes = [{"dst": "0.0.0.0/0"}] + ([{"dst": "::/0"}] if v6 else [])
    return chain.NetworkConfig.from_dict({
        "cniVersion": version, "name": "cluster", "type": "bridge",
        "bridge": env.bridge_name(), "isGateway": True,
        "ipam": {"type": "host-local", "ranges": ranges("eth0", v6), "routes": routes,
                 "dataDir": str(env.ipam_dir)}}, "test:cluster")


def second_net(env: tb.HostEnv, version: str, v6: bool = False, mtu: int | None = None,
               own_default: bool = False) -> chain.NetworkConfig:
    """The selected network: macvlan with its own subnet and a plain (non-default) route.

    The route names its gateway: Debian's plugins (1.1.1) fail CHECK on a route
    without "gw" that IPAM installed via the subnet gateway (the reference
    plugins v1.9.1 do not), with or without netattach.
    """
    routes = [{"dst": "198.19.212.0/24", "gw": gw4("net1")}]
    if own_default:
        routes.append({"dst": "0.0.0.0/0"})
    conf = {"cniVersion": version, "name": "net-b", "type": "macvlan",
            "master": env.master_link(), "mode": "bridge",
            "ipam": {"type": "host-local", "ranges": ranges("net1", v6), "routes": routes,
                     "dataDir": str(env.ipam_dir)}}
    if mtu:
        conf["mtu"] = mtu
    return chain.NetworkConfig.from_dict(conf, "test:net-b")


def rt(ns: str, ifname: str, bin_dir: str) -> chain.RuntimeConf:
    return chain.RuntimeConf(container_id="cid-routes", netns=tb.netns_path(ns), ifname=ifname,
                             args=(("IgnoreUnknown", "1"),), cni_path=(bin_dir,), timeout=30)


def default_routes(ns: str, family: str = "-4") -> list[dict]:
    return json.loads(tb.run("ip", "-j", family, "-n", ns, "route", "show", "default").stdout
                      or "[]")


def defaults_in(result: dict) -> list[dict]:
    return [r for r in result.get("routes", []) if r["dst"] in ("0.0.0.0/0", "::/0")]


@pytest.fixture(params=[("debian", "0.4.0"), ("debian", "1.0.0"), ("reference", "1.1.0")],
                ids=lambda p: f"{p[0]}-{p[1]}")
def plugins(request) -> tuple[str, str]:
    """(bin dir, config cniVersion)."""
    kind, version = request.param
    if kind == "debian":
        return DEBIAN_BIN, version
    return str(request.getfixturevalue("cni_testbin")), version


class Pod:
    """A netns with eth0 (default network) and net1 attached; delete() DELs both."""

    def __init__(self, env, bin_dir, version, v6=False, **net1_kw):
        self.ns = env.new_netns()
        self.bin_dir = bin_dir
        self.nets = {"eth0": default_net(env, version, v6),
                     "net1": second_net(env, version, v6, **net1_kw)}
        self.results = {}
        for ifname, net in self.nets.items():
            self.results[ifname] = chain.add(net, rt(self.ns, ifname, bin_dir))

    def targets(self, gateways):
        return [RouteTarget("eth0", self.results["eth0"], None, "cluster"),
                RouteTarget("net1", self.results["net1"], gateways, "ns/net-b")]

    def check(self, results):
        for ifname, net in self.nets.items():
            chain.check(net, rt(self.ns, ifname, self.bin_dir), results[ifname])

    def delete(self, results):
        for ifname in ("net1", "eth0"):
            chain.delete(self.nets[ifname], rt(self.ns, ifname, self.bin_dir), results[ifname])


def test_default_route_moves_to_the_selected_network(host_env, plugins):
    bin_dir, version = plugins
    pod = Pod(host_env, bin_dir, version)
    assert [(r["gateway"], r["dev"]) for r in default_routes(pod.ns)] == [(gw4("eth0"), "eth0")]

    r0, r1 = apply_default_routes(tb.netns_path(pod.ns), pod.targets(("198.18.212.1",)))

    assert [(r["gateway"], r["dev"]) for r in default_routes(pod.ns)] == [("198.18.212.1", "net1")]
    assert default_routes(pod.ns, "-6") == []
    # net1's own non-default route is still there and still in its result
    assert tb.run("ip", "-n", pod.ns, "route", "show", "198.19.212.0/24").stdout.strip()
    assert r0["cniVersion"] == r1["cniVersion"] == version
    assert defaults_in(r0) == []
    assert defaults_in(r1) == [{"dst": "0.0.0.0/0", "gw": "198.18.212.1"}]
    assert {"dst": "198.19.212.0/24", "gw": gw4("net1")} in r1["routes"]
    assert r0["ips"] == pod.results["eth0"]["ips"]                   # addresses untouched

    pod.check({"eth0": r0, "net1": r1})
    pod.delete({"eth0": r0, "net1": r1})
    assert host_env.ipam_allocations() == []
    assert {l["ifname"] for l in tb.links(pod.ns)} == {"lo"}


def test_replaces_the_selected_networks_own_default_route(host_env):
    pod = Pod(host_env, DEBIAN_BIN, "1.0.0", own_default=True)
    # both plugins installed a default route: metric 0 on eth0 and on net1
    assert {r["dev"] for r in default_routes(pod.ns)} == {"eth0", "net1"}

    r0, r1 = apply_default_routes(tb.netns_path(pod.ns), pod.targets(("198.18.212.254",)))

    assert [(r["gateway"], r["dev"]) for r in default_routes(pod.ns)] == [("198.18.212.254",
                                                                           "net1")]
    assert defaults_in(r1) == [{"dst": "0.0.0.0/0", "gw": "198.18.212.254"}]
    pod.check({"eth0": r0, "net1": r1})
    pod.delete({"eth0": r0, "net1": r1})
    assert host_env.ipam_allocations() == []


def test_empty_list_leaves_no_default_route(host_env):
    pod = Pod(host_env, DEBIAN_BIN, "1.0.0")

    r0, r1 = apply_default_routes(tb.netns_path(pod.ns), pod.targets(()))

    assert default_routes(pod.ns) == [] and default_routes(pod.ns, "-6") == []
    assert defaults_in(r0) == [] and defaults_in(r1) == []
    pod.check({"eth0": r0, "net1": r1})
    # the result as the plugin returned it no longer matches the pod: CHECK says so,
    # which is why the rewritten results are what must be saved
    stale = r"Expected Route \{Dst:\{IP:0.0.0.0 Mask:00000000\}.*not found"
    with pytest.raises(CniError, match=stale):
        pod.check({"eth0": pod.results["eth0"], "net1": r1})
    pod.delete({"eth0": r0, "net1": r1})
    assert host_env.ipam_allocations() == []


def test_ipv4_and_ipv6_gateways(host_env, plugins):
    bin_dir, version = plugins
    pod = Pod(host_env, bin_dir, version, v6=True)
    assert [r["dev"] for r in default_routes(pod.ns, "-6")] == ["eth0"]

    gateways = (gw4("net1"), gw6("net1"))
    r0, r1 = apply_default_routes(tb.netns_path(pod.ns), pod.targets(gateways))

    assert [(r["gateway"], r["dev"]) for r in default_routes(pod.ns)] == [(gw4("net1"), "net1")]
    assert [(r["gateway"], r["dev"]) for r in default_routes(pod.ns, "-6")] == [(gw6("net1"),
                                                                                 "net1")]
    assert defaults_in(r0) == []
    assert defaults_in(r1) == [{"dst": "0.0.0.0/0", "gw": gw4("net1")},
                               {"dst": "::/0", "gw": gw6("net1")}]
    pod.check({"eth0": r0, "net1": r1})
    pod.delete({"eth0": r0, "net1": r1})
    assert host_env.ipam_allocations() == []


def test_ipv6_gateway_alone_clears_ipv4_default_too(host_env):
    pod = Pod(host_env, DEBIAN_BIN, "1.0.0", v6=True)

    r0, r1 = apply_default_routes(tb.netns_path(pod.ns), pod.targets((gw6("net1"),)))

    assert default_routes(pod.ns) == []
    assert [(r["gateway"], r["dev"]) for r in default_routes(pod.ns, "-6")] == [(gw6("net1"),
                                                                                 "net1")]
    assert defaults_in(r1) == [{"dst": "::/0", "gw": gw6("net1")}]
    pod.check({"eth0": r0, "net1": r1})
    pod.delete({"eth0": r0, "net1": r1})


def test_multipath_is_removed_other_tables_and_other_links_are_kept(host_env):
    pod = Pod(host_env, DEBIAN_BIN, "1.0.0")
    ns = pod.ns
    ip = lambda *a: tb.run("ip", "-n", ns, *a)  # noqa: E731
    ip("route", "add", "default", "metric", "7", "nexthop", "via", gw4("eth0"), "dev", "eth0",
       "nexthop", "via", gw4("net1"), "dev", "net1")
    ip("route", "add", "default", "via", gw4("eth0"), "dev", "eth0", "table", "100")
    # a link that is no attachment's interface, with its own default route
    ip("link", "add", "xtra0", "type", "veth", "peer", "name", "xtra1")
    ip("link", "set", "xtra0", "up")
    ip("addr", "add", "198.18.215.2/24", "dev", "xtra0")
    ip("route", "add", "default", "via", "198.18.215.1", "dev", "xtra0", "metric", "9")

    r0, r1 = apply_default_routes(tb.netns_path(ns), pod.targets((gw4("net1"),)))

    assert sorted((r["gateway"], r["dev"], r.get("metric", 0)) for r in default_routes(ns)) == \
        [("198.18.212.1", "net1", 0), ("198.18.215.1", "xtra0", 9)]
    assert ip("route", "show", "table", "100").stdout.split() == \
        ["default", "via", gw4("eth0"), "dev", "eth0"]
    pod.check({"eth0": r0, "net1": r1})
    pod.delete({"eth0": r0, "net1": r1})


def test_unreachable_gateway_fails_and_changes_nothing(host_env):
    pod = Pod(host_env, DEBIAN_BIN, "1.0.0")
    before = tb.run("ip", "-n", pod.ns, "route", "show").stdout

    with pytest.raises(RouteError) as err:
        apply_default_routes(tb.netns_path(pod.ns), pod.targets(("198.19.99.1",)))

    msg = str(err.value)
    assert "ns/net-b" in msg and "198.19.99.1 is not reachable on net1" in msg
    assert "198.18.212.2/24" in msg                                  # what net1 does have
    assert tb.run("ip", "-n", pod.ns, "route", "show").stdout == before
    pod.delete(pod.results)


def test_missing_chosen_interface(host_env):
    ns = host_env.new_netns()
    targets = [RouteTarget("eth0", None, None, "cluster"),
               RouteTarget("net1", None, ("198.18.212.1",), "ns/net-b")]
    with pytest.raises(RouteError, match="ns/net-b: interface net1 for the default route does "
                                         "not exist"):
        apply_default_routes(tb.netns_path(ns), targets)


def test_link_mtus(host_env):
    """The network-status MTU reader (netnsinfo) on links made by real plugins."""
    pod = Pod(host_env, DEBIAN_BIN, "1.0.0", mtu=1400)
    path = tb.netns_path(pod.ns)
    assert link_mtus(path, ["eth0"]) == {"eth0": 1500}
    assert link_mtus(path, ["net1"]) == {"net1": 1400}
    assert link_mtus(path, ["lo", "net1", "net9"]) == {"lo": 65536, "net1": 1400}  # net9: none
    pod.delete(pod.results)
    assert link_mtus(str(host_env.root / "no-such-netns"), ["eth0"]) == {}  # never raises
    assert link_mtus(str(host_env.ipam_dir), ["eth0"]) == {}
