"""Selection keys (multi-net spec §4.1.2.1.3 .. §4.1.2.1.11) through the plan and real
CNI plugins in real network namespaces (needs root).

Each test parses an annotation with `parse_network_selection`, plans it with
`plan_attachments` (cluster default network `eth0` first, a bridge), ADDs every
attachment with the chain engine as a runtime would, CHECKs it right away, looks
at the effect the way an admin would (`ip`, `tc`, `iptables`, `nft`, a TCP
connection), DELs in reverse order and proves that nothing is left.

Children: Debian's plugins in /usr/lib/cni (containernetworking-plugins 1.1.1,
CNI <= 1.0.0; configs written as cniVersion 1.0.0) and the reference plugins
v1.9.1 (CNI 1.1.0; cniVersion 1.1.0) in $NETATTACH_CNI_BIN. Every key is run
with both sets; portmap's nftables backend exists only in v1.9.1.
"""
from __future__ import annotations

import ipaddress
import json
import os
import random
import shlex
import socket
import subprocess
import sys
import uuid
from dataclasses import dataclass, field

import pytest

from netattach.cni import chain
from netattach.cni.chain import NetworkConfig, RuntimeConf
from netattach.cni.errors import ChildError
from netattach.cni.version import at_least as version_at_least
from netattach.spec.plan import Attachment, PlanError, default_burst, plan_attachments
from netattach.spec.selection import (
    NetworkSelectionElement,
    SelectionError,
    parse_network_selection,
)
from netattach_testbed import cluster as cl
from netattach_testbed import netns as tb
from netattach_testbed.node import NODE_NET

pytestmark = pytest.mark.integration

DEBIAN_BIN = "/usr/lib/cni"
NEEDED = ("bridge", "host-local", "static", "macvlan", "tuning", "portmap", "bandwidth")


@dataclass(frozen=True)
class Plugins:
    """One set of child plugins: where they are and the cniVersion to write."""
    name: str
    bin_dir: str
    version: str


def _require(bin_dir: str, what: str) -> None:
    missing = [p for p in NEEDED if not os.access(os.path.join(bin_dir, p), os.X_OK)]
    if missing:
        pytest.fail(f"{what} missing in {bin_dir}: {', '.join(missing)} "
                    "(run `make test`, which installs and builds them)")


@pytest.fixture(params=["debian", "ref"])
def plugins(request) -> Plugins:
    """Debian's plugins (CNI 1.0.0) or the reference v1.9.1 ones (CNI 1.1.0); fails if missing."""
    if request.param == "debian":
        _require(DEBIAN_BIN, "Debian CNI plugins (containernetworking-plugins)")
        return Plugins("debian", DEBIAN_BIN, "1.0.0")
    ref = str(request.getfixturevalue("cni_testbin"))
    _require(ref, "reference CNI plugins v1.9.1")
    return Plugins("ref", ref, "1.1.0")


# /24s of 198.18.0.0/15 in random order: a test that gives the host a gateway address
# does not collide with another session's test on the same machine. NODE_NET is left
# out: the real node's tests, which run beside these, put its pod bridge's gateway
# there, and a second host route to the same /24 sends the connection to the wrong bridge.
_FREE_SUBNETS = [str(net.network_address).rsplit(".", 1)[0]
                 for net in ipaddress.ip_network("198.18.0.0/15").subnets(new_prefix=24)
                 if not net.overlaps(ipaddress.ip_network(NODE_NET))]
random.shuffle(_FREE_SUBNETS)
_SUBNETS = iter(_FREE_SUBNETS)


def subnet() -> str:
    """A fresh "198.1x.y" prefix of a /24, outside the real node's NODE_NET."""
    return next(_SUBNETS)


def random_mac() -> str:
    """A random locally administered unicast MAC."""
    return "02:" + ":".join(f"{random.randrange(256):02x}" for _ in range(5))


def host_local(env: tb.HostEnv, prefix: str) -> dict:
    return {"type": "host-local", "subnet": f"{prefix}.0/24", "dataDir": str(env.ipam_dir)}


def conflist(plugins: Plugins, name: str, *plugin_list: dict) -> NetworkConfig:
    return NetworkConfig.from_dict({"cniVersion": plugins.version, "name": name,
                                    "plugins": list(plugin_list)}, f"NAD ns/{name}")


def make_plan(env: tb.HostEnv, plugins: Plugins, annotation: str,
              configs: dict[str, NetworkConfig]) -> list[Attachment]:
    """The plan for `annotation` in namespace "ns", behind a bridge cluster default network."""
    default = NetworkConfig.from_dict({
        "cniVersion": plugins.version, "name": "cluster", "type": "bridge",
        "bridge": env.bridge_name(), "ipam": host_local(env, subnet())}, "cluster file")
    elements = parse_network_selection(annotation, "ns")
    return plan_attachments(("cluster", default), "eth0", {},
                            [(e, configs[e.name]) for e in elements])


@dataclass
class Pod:
    """One pod sandbox: its netns and the attachments ADDed into it, DELed in reverse."""
    env: tb.HostEnv
    plugins: Plugins
    ns: str
    container_id: str = field(default_factory=lambda: f"cid-{uuid.uuid4().hex[:12]}")
    added: list[tuple[Attachment, RuntimeConf, dict | None]] = field(default_factory=list)
    host_ifaces: set[str] = field(default_factory=set)

    def runtime_conf(self, att: Attachment) -> RuntimeConf:
        return RuntimeConf(container_id=self.container_id, netns=tb.netns_path(self.ns),
                           ifname=att.ifname, args=(("IgnoreUnknown", "1"),),
                           capability_args=att.capability_args,
                           cni_path=(self.plugins.bin_dir,), bin_dirs=(), timeout=30)

    def add(self, plan: list[Attachment], no_check: frozenset[str] = frozenset()
            ) -> dict[str, dict]:
        """ADD then CHECK each attachment in plan order (CHECK skipped for the ifnames in
        `no_check`); results by ifname."""
        out = {}
        for att in plan:
            rt = self.runtime_conf(att)
            self.added.append((att, rt, None))       # DEL it even if its ADD fails half way
            result = chain.add(att.config, rt)
            self.added[-1] = (att, rt, result)
            self.host_ifaces |= {i["name"] for i in result.get("interfaces", [])
                                 if not i.get("sandbox")}
            if att.ifname not in no_check and version_at_least(att.config.cni_version, "0.4.0"):
                chain.check(att.config, rt, result)
            out[att.ifname] = result
        return out

    def delete(self) -> None:
        """DEL every attachment in reverse order; all run, the first failure is raised."""
        errors = []
        while self.added:
            att, rt, result = self.added.pop()
            try:
                chain.delete(att.config, rt, result)
            except Exception as e:  # noqa: BLE001 - go on, like netattach's DEL
                errors.append(e)
        if errors:
            raise errors[0]

    def assert_clean(self) -> None:
        """Only lo in the netns, no IP allocated, no host-side link the plugins made."""
        assert link_names(self.ns) == {"lo"}
        assert self.env.ipam_allocations() == []
        bridges = set(self.env.host_links)
        left = {l["ifname"] for l in tb.links()} & (self.host_ifaces - bridges)
        assert not left, f"host links left after DEL: {left}"


@pytest.fixture
def pod(host_env, plugins):
    p = Pod(host_env, plugins, host_env.new_netns())
    yield p
    p.delete()  # after a failed assertion; a no-op when the test DELed already


def link_names(ns: str) -> set[str]:
    return {link["ifname"] for link in tb.links(ns)}


def link(ns: str | None, ifname: str) -> dict:
    argv = ["ip", "-j", "-d"] + (["-n", ns] if ns else []) + ["link", "show", "dev", ifname]
    return json.loads(tb.run(*argv).stdout)[0]


def host_veth(result: dict, bridge: str) -> str:
    """The host end of the pod's veth in a bridge plugin's result."""
    names = [i["name"] for i in result["interfaces"] if not i.get("sandbox") and i["name"] != bridge]
    return names[0]


# ------------------------------------------------------------------ ips (§4.1.2.1.3)

def test_ips_with_static_ipam(host_env, plugins, pod):
    """runtimeConfig.ips reaches static IPAM: exactly the requested addresses, v4 and v6."""
    prefix = subnet()
    ips = [f"{prefix}.57/24", "fd18:5::57/64"]
    nad = conflist(plugins, "static-net", {
        "type": "macvlan", "master": host_env.master_link(), "mode": "bridge",
        "capabilities": {"ips": True}, "ipam": {"type": "static"}})
    plan = make_plan(host_env, plugins, json.dumps([{"name": "static-net", "ips": ips}]),
                     {"static-net": nad})
    assert [a.ifname for a in plan] == ["eth0", "net1"]
    assert plan[1].capability_args == {"ips": ips}

    results = pod.add(plan)
    assert sorted(tb.addresses(pod.ns, "net1")) == sorted(ips)
    assert sorted(i["address"] for i in results["net1"]["ips"]) == sorted(ips)

    pod.delete()
    pod.assert_clean()


# ------------------------------------------------------------------ mac (§4.1.2.1.4)

@pytest.mark.parametrize("via", ["macvlan", "tuning"])
def test_mac(host_env, plugins, pod, via):
    """runtimeConfig.mac reaches the plugin declaring the capability, which sets it."""
    mac = random_mac()
    main = {"type": "macvlan", "master": host_env.master_link(), "mode": "bridge",
            "ipam": host_local(host_env, subnet())}
    chained = [main]
    if via == "macvlan":
        main["capabilities"] = {"mac": True}
    else:
        chained.append({"type": "tuning", "capabilities": {"mac": True},
                        "dataDir": str(host_env.root / "tuning")})
    plan = make_plan(host_env, plugins, json.dumps([{"name": "mac-net", "mac": mac.upper()}]),
                     {"mac-net": conflist(plugins, "mac-net", *chained)})
    assert plan[1].capability_args == {"mac": mac}     # normalized by the selection parser

    results = pod.add(plan)
    assert tb.link_mac(pod.ns, "net1") == mac
    assert [i["mac"] for i in results["net1"]["interfaces"] if i["name"] == "net1"] == [mac]

    pod.delete()
    pod.assert_clean()
    assert not any((host_env.root / "tuning").rglob("*"))   # tuning's backup is gone


# ------------------------------------------------------------------ cni-args (§4.1.2.1.6)

def test_cni_args_reach_tuning_and_win_over_the_nad_args(host_env, plugins, pod):
    """tuning applies args.cni (its documented mac, mtu, promisc, sysctl); the annotation's
    cni-args win over the NAD's args, which otherwise stay."""
    mac = random_mac()
    nad = conflist(plugins, "args-net",
                   {"type": "macvlan", "master": host_env.master_link(), "mode": "bridge",
                    "ipam": host_local(host_env, subnet())},
                   # "sysctl": {} is needed: tuning (1.1.1 and v1.9.1) copies args.cni
                   # sysctls into the config's map and panics when there is none
                   {"type": "tuning", "dataDir": str(host_env.root / "tuning"), "sysctl": {},
                    "args": {"cni": {"mtu": 1300, "promisc": True}}})
    annotation = json.dumps([{"name": "args-net", "interface": "data0", "cni-args": {
        "mtu": 1400, "mac": mac, "sysctl": {"net.ipv4.conf.data0.arp_notify": "1"}}}])
    plan = make_plan(host_env, plugins, annotation, {"args-net": nad})
    assert plan[1].config.plugins[1]["args"]["cni"] == {
        "mtu": 1400, "promisc": True, "mac": mac,
        "sysctl": {"net.ipv4.conf.data0.arp_notify": "1"}}

    pod.add(plan)
    data0 = link(pod.ns, "data0")
    assert data0["mtu"] == 1400                       # annotation over NAD
    assert "PROMISC" in data0["flags"]                # NAD's arg kept
    assert data0["address"] == mac
    sysctl = tb.run("ip", "netns", "exec", pod.ns, "cat",
                    "/proc/sys/net/ipv4/conf/data0/arp_notify").stdout.strip()
    assert sysctl == "1"

    pod.delete()
    pod.assert_clean()
    assert not any((host_env.root / "tuning").rglob("*"))


# ------------------------------------------------------------------ portMappings (§4.1.2.1.7)

def nat_tables() -> set[str]:
    """nftables tables on the host ("ip nat", "ip cni_hostport", ...)."""
    out = tb.run("nft", "list", "tables").stdout.split("\n")
    return {line.removeprefix("table ").strip() for line in out if line.startswith("table ")}


IPTABLES = {"iptables": "ip", "ip6tables": "ip6"}   # tool -> nft family of its tables


def nat_rules(tool: str = "iptables") -> list[str]:
    return tb.run(tool, "-w", "-t", "nat", "-S").stdout.splitlines()


def nft_table(table: str) -> str:
    p = tb.run("nft", "list", "table", *table.split(), check=False)
    return p.stdout if p.returncode == 0 else ""


@pytest.fixture
def nat_restored():
    """What portmap leaves on purpose after the last DEL (its shared CNI-HOSTPORT-*
    chains and their jumps, in iptables and ip6tables, the nat tables iptables-nft made
    for them, nftables' cni_hostport table) is removed when it was not there before
    the test and holds no other container's mapping; then the host's tables are proven
    to be as before. The test itself asserts its own mapping gone right after DEL.
    Request it before `pod`, so that it is torn down after the pod's DEL."""
    tables_before = nat_tables()
    chains_before = {tool: {l.split()[1] for l in nat_rules(tool) if l.startswith("-N ")}
                     for tool in IPTABLES}
    yield
    for tool, family in IPTABLES.items():
        rules = nat_rules(tool)
        ours = {l.split()[1] for l in rules
                if l.startswith("-N ") and l.split()[1].startswith("CNI-")} - chains_before[tool]
        if ours and not any(l.startswith("-A CNI-DN-") for l in rules):
            for line in rules:   # jumps into the shared chains first, then the chains
                words = shlex.split(line)
                if words[0] == "-A" and words[-1] in ours and words[1] not in ours:
                    tb.run(tool, "-w", "-t", "nat", "-D", *words[1:])
            for verb in ("-F", "-X"):
                for name in ours:
                    tb.run(tool, "-w", "-t", "nat", verb, name)
        table = f"{family} nat"
        if table not in tables_before and table in nat_tables() \
                and not any(l.startswith(("-A", "-N")) for l in nat_rules(tool)):
            tb.run("nft", "delete", "table", family, "nat")
    for table in ("ip cni_hostport", "ip6 cni_hostport"):
        if table not in tables_before and table in nat_tables() \
                and "dnat" not in nft_table(table):
            tb.run("nft", "delete", "table", *table.split())
    assert nat_tables() == tables_before


def mapping_rules(backend: str, container_id: str) -> list[str]:
    """The nat rules portmap made for `container_id`."""
    if backend == "iptables":
        rules = nat_rules()
        dn = {l.split()[-1] for l in rules
              if l.startswith("-A CNI-HOSTPORT-DNAT") and container_id in l}
        return [l for l in rules if container_id in l or any(f"-A {c} " in l for c in dn)]
    text = nft_table("ip cni_hostport")
    return [l.strip() for l in text.splitlines() if f'comment "{container_id}"' in l]


def serve_once(ns: str, port: int, token: str) -> subprocess.Popen:
    """A TCP server in `ns` that answers one connection with `token`, then exits."""
    code = ("import socket,sys\n"
            "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            f"s.bind(('0.0.0.0', {port})); s.listen(1); print('ready', flush=True)\n"
            "c,_=s.accept(); c.sendall(sys.argv[1].encode()); c.close()\n")
    p = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", code, token],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def fetch(host: str, port: int) -> str:
    with socket.create_connection((host, port), timeout=5) as s:
        return s.recv(100).decode()


@pytest.mark.parametrize("plugins,backend", [
    ("debian", "iptables"), ("ref", "iptables"), ("ref", "nftables")],
    indirect=["plugins"])
def test_port_mappings_with_portmap(nat_restored, host_env, plugins, pod, backend):
    """runtimeConfig.portMappings reaches portmap chained after a bridge: its DNAT rule
    for the host port appears, a connection to the host port reaches the pod, and the
    rule is gone after DEL. Debian's 1.1.1 knows only iptables (here iptables-nft);
    v1.9.1 picks iptables by itself when it is installed, nftables when asked."""
    # a port no socket holds: portmap's DNAT takes it on every local address, so one in
    # use (an API server of the node tests running beside these) would lose its clients
    prefix, host_port = subnet(), cl.free_port("0.0.0.0")
    portmap = {"type": "portmap", "capabilities": {"portMappings": True}}
    if backend == "nftables":
        portmap["backend"] = "nftables"      # else v1.9.1 picks iptables, installed here
    br = host_env.bridge_name()
    nad = conflist(plugins, "pm-net",
                   {"type": "bridge", "bridge": br, "isGateway": True,
                    "ipam": host_local(host_env, prefix)}, portmap)
    annotation = json.dumps([{"name": "pm-net", "portMappings": [
        {"hostPort": host_port, "containerPort": 8080, "protocol": "TCP"}]}])
    plan = make_plan(host_env, plugins, annotation, {"pm-net": nad})
    assert plan[1].capability_args == {"portMappings": [
        {"hostPort": host_port, "containerPort": 8080, "protocol": "tcp"}]}

    # Debian's portmap 1.1.1 fails CHECK for a pod without IPv6: it looks for ip6tables
    # rules it never made (containernetworking/plugins#819, fixed in later releases)
    results = pod.add(plan, no_check=frozenset({"net1"} if plugins.name == "debian" else ()))
    if plugins.name == "debian":
        att, rt, result = pod.added[-1]
        with pytest.raises(ChildError, match="could not check ipv6 dnat"):
            chain.check(att.config, rt, result)
    pod_ip = results["net1"]["ips"][0]["address"].split("/")[0]
    rules = mapping_rules(backend, pod.container_id)
    assert any(f"dport {host_port}" in r and f"{pod_ip}:8080" in r for r in rules), rules

    token = uuid.uuid4().hex
    server = serve_once(pod.ns, 8080, token)
    try:
        assert fetch(f"{prefix}.1", host_port) == token   # the bridge's address is local
    finally:
        server.kill()
        server.wait()

    pod.delete()
    pod.assert_clean()
    assert mapping_rules(backend, pod.container_id) == []
    everything = "\n".join(nat_rules()) + nft_table("ip cni_hostport")
    assert str(host_port) not in everything and pod_ip not in everything


# ------------------------------------------------------------------ bandwidth (§4.1.2.1.8)

@pytest.fixture(scope="module")
def kernel_shaping():
    """The bandwidth plugin needs ifb devices (egress) and tbf/ingress/u32/mirred."""
    ifbs = json.loads(tb.run("ip", "-j", "-d", "link", "show", "type", "ifb").stdout or "[]")
    if not ifbs:
        pytest.fail("this kernel has no ifb support (no ifb0/ifb1 in `ip link`): "
                    "the bandwidth plugin cannot shape egress")


def qdiscs(dev: str) -> dict[str, dict]:
    return {q["kind"]: q for q in json.loads(tb.run("tc", "-j", "qdisc", "show", "dev", dev).stdout)}


def host_link_names() -> set[str]:
    return {l["ifname"] for l in tb.links()}


def test_bandwidth_with_the_bandwidth_plugin(host_env, plugins, pod, kernel_shaping):
    """runtimeConfig.bandwidth reaches the bandwidth plugin chained after a bridge: a tbf
    on the host veth for ingress (the default burst, not given in the annotation), an
    ingress qdisc redirecting to an ifb with a tbf for egress (the user's burst); the
    plugin's own CHECK accepts them; DEL removes the ifb, the veth goes with its qdiscs."""
    br = host_env.bridge_name()
    nad = conflist(plugins, "bw-net",
                   {"type": "bridge", "bridge": br, "ipam": host_local(host_env, subnet())},
                   {"type": "bandwidth", "capabilities": {"bandwidth": True}})
    annotation = json.dumps([{"name": "bw-net", "bandwidth": {
        "ingressRate": 10_000_000, "egressRate": 2_000_000, "egressBurst": 400_000}}])
    plan = make_plan(host_env, plugins, annotation, {"bw-net": nad})
    assert plan[1].capability_args == {"bandwidth": {
        "ingressRate": 10_000_000, "ingressBurst": default_burst(10_000_000),
        "egressRate": 2_000_000, "egressBurst": 400_000}}

    results = pod.add(plan)
    veth = host_veth(results["net1"], br)
    ifb = [i["name"] for i in results["net1"]["interfaces"] if i["name"].startswith("bwp")]
    assert len(ifb) == 1 and link(None, ifb[0])["linkinfo"]["info_kind"] == "ifb"
    on_veth = qdiscs(veth)
    assert on_veth["tbf"]["root"] and on_veth["tbf"]["options"]["rate"] == 10_000_000 // 8
    assert on_veth["tbf"]["options"]["burst"] == default_burst(10_000_000) // 8
    assert on_veth["ingress"]["handle"] == "ffff:"
    redirect = tb.run("tc", "filter", "show", "dev", veth, "parent", "ffff:").stdout
    assert "mirred" in redirect and f"to device {ifb[0]}" in redirect
    on_ifb = qdiscs(ifb[0])["tbf"]["options"]
    assert (on_ifb["rate"], on_ifb["burst"]) == (2_000_000 // 8, 400_000 // 8)

    pod.delete()
    pod.assert_clean()
    assert not {veth, ifb[0]} & host_link_names()


# ------------------------------------------------------------------ interface names, same network twice

def test_duplicate_interface_names_fail_at_plan_time():
    """§4.1.2.1.5: a name already used fails the request before any child runs."""
    nad = NetworkConfig.from_dict({"cniVersion": "1.0.0", "name": "n", "type": "bridge"}, "NAD")
    default = ("cluster", nad)
    with pytest.raises(PlanError, match="'eth0' is already used"):
        plan_attachments(default, "eth0", {},
                         [(e, nad) for e in parse_network_selection("n@eth0", "ns")])
    with pytest.raises(SelectionError, match="already requested"):
        parse_network_selection('[{"name":"n","interface":"d0"},{"name":"m","interface":"d0"}]',
                                "ns")
    # a defaultNetworks entry and a selected network asking for the same name
    first = NetworkSelectionElement(name="dn", namespace="kube-system", interface="d0")
    second = parse_network_selection("n@d0", "ns")[0]
    with pytest.raises(PlanError, match="'d0' is already used"):
        plan_attachments(default, "eth0", {}, [(first, nad), (second, nad)])


def test_same_network_twice_gets_two_interfaces_and_two_ips(host_env, plugins, pod):
    """§4.2: two attachments, distinct ifnames, distinct IPs from the same range."""
    nad = conflist(plugins, "twice",
                   {"type": "bridge", "bridge": host_env.bridge_name(),
                    "ipam": host_local(host_env, subnet())})
    plan = make_plan(host_env, plugins, "twice, ns/twice", {"twice": nad})
    assert [a.ifname for a in plan] == ["eth0", "net1", "net2"]

    results = pod.add(plan)
    ips = {name: tb.addresses(pod.ns, name) for name in ("net1", "net2")}
    assert len(ips["net1"]) == len(ips["net2"]) == 1 and ips["net1"] != ips["net2"]
    assert [results[n]["ips"][0]["address"] for n in ("net1", "net2")] == \
        [ips["net1"][0], ips["net2"][0]]
    assert len(host_env.ipam_allocations()) == 3          # eth0, net1, net2

    pod.delete()
    pod.assert_clean()


# ------------------------------------------------------------------ ipam-claim-reference (§4.1.2.1.11)

def test_ipam_claim_reference_is_ignored_by_plugins_that_do_not_implement_it(
        host_env, plugins, pod):
    """Real plugins get the claim in args.cni and (bridge declares it) runtimeConfig, and
    attach as usual: delegates that do not implement IPAMClaims ignore the request."""
    nad = conflist(plugins, "claim-net",
                   {"type": "bridge", "bridge": host_env.bridge_name(),
                    "capabilities": {"ipamClaimReference": True},
                    "ipam": host_local(host_env, subnet())},
                   {"type": "tuning", "dataDir": str(host_env.root / "tuning")})
    plan = make_plan(host_env, plugins,
                     '[{"name":"claim-net","ipam-claim-reference":"vm1.tenantblue"}]',
                     {"claim-net": nad})
    assert plan[1].capability_args == {"ipamClaimReference": "vm1.tenantblue"}
    assert all(p["args"]["cni"] == {"ipam-claim-reference": "vm1.tenantblue"}
               for p in plan[1].config.plugins)

    results = pod.add(plan)
    assert tb.addresses(pod.ns, "net1") == [results["net1"]["ips"][0]["address"]]

    pod.delete()
    pod.assert_clean()
