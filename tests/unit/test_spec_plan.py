"""The attachment plan: order, interface names, runtimeConfig (§7.5), capabilities, cni-args,
default bandwidth bursts, ipam-claim-reference."""
import json

import pytest

from netattach.cni import chain
from netattach.cni.chain import NetworkConfig
from netattach.spec.plan import (
    BANDWIDTH_MAX_BURST,
    IPAM_CLAIM_ARGS_KEY,
    PlanError,
    default_burst,
    plan_attachments,
)
from netattach.spec.selection import (
    NetworkSelectionElement,
    SelectionError,
    parse_network_selection,
)

DEFAULT = ("cluster-net", NetworkConfig.from_dict(
    {"cniVersion": "1.0.0", "name": "cluster-net", "type": "bridge",
     "capabilities": {"portMappings": True}}, "file"))


def conf(name="n", **plugin):
    return NetworkConfig.from_dict({"cniVersion": "1.0.0", "name": name,
                                    "plugins": [{"type": "macvlan", **plugin}]}, f"NAD {name}")


def plan(annotation, configs=None, runtime_config=None):
    elements = parse_network_selection(annotation, "ns")
    pairs = [(e, (configs or {}).get(e.name, conf(e.name))) for e in elements]
    return plan_attachments(DEFAULT, "eth0", runtime_config or {}, pairs)


@pytest.mark.parametrize("annotation,ifnames", [
    ("", ["eth0"]),
    ("a,b,c", ["eth0", "net1", "net2", "net3"]),
    ("a,other/b@data0", ["eth0", "net1", "data0"]),
    ("a,a", ["eth0", "net1", "net2"]),                        # §4.2: same network twice
    ("a,b@net1", ["eth0", "net2", "net1"]),                   # generated skips a requested name
    ("a@net2,b,c", ["eth0", "net2", "net3", "net4"]),
    ('[{"name":"a","interface":"ext"},{"name":"b"}]', ["eth0", "ext", "net2"]),
])
def test_interface_names(annotation, ifnames):
    assert [a.ifname for a in plan(annotation)] == ifnames


def test_requested_name_equal_to_runtime_ifname_fails():
    with pytest.raises(PlanError, match="'eth0' is already used"):
        plan("a@eth0")


def test_order_names_and_default_flag():
    p = plan("a,other/b")
    assert [(a.network, a.default) for a in p] == [
        ("cluster-net", True), ("ns/a", False), ("other/b", False)]


def test_runtime_config_goes_to_the_default_network_only():
    rc = {"portMappings": [{"hostPort": 80, "containerPort": 80, "protocol": "tcp"}]}
    p = plan("a", runtime_config=rc)
    assert p[0].capability_args == rc
    assert p[1].capability_args == {}


def test_selection_keys_become_runtime_config_when_declared():
    c = conf("a", capabilities={"ips": True, "mac": True})
    p = plan('[{"name":"a","ips":["198.18.0.5/24"],"mac":"02:00:00:00:00:01"}]', {"a": c})
    assert p[1].capability_args == {"ips": ["198.18.0.5/24"], "mac": "02:00:00:00:00:01"}


@pytest.mark.parametrize("key,value,capability", [
    ("ips", ["198.18.0.5/24"], "ips"),
    ("mac", "02:00:00:00:00:01", "mac"),
    ("portMappings", [{"hostPort": 8080, "containerPort": 80}], "portMappings"),
    ("bandwidth", {"ingressRate": 1000, "ingressBurst": 100}, "bandwidth"),
    ("infiniband-guid", "24:8a:07:03:00:8d:ae:2f", "infinibandGUID"),
])
def test_missing_capability_fails_naming_key_and_fix(key, value, capability):
    with pytest.raises(PlanError) as e:
        plan(json.dumps([{"name": "a", key: value}]))
    assert f"'{capability}'" in str(e.value) and "ns/a" in str(e.value)
    assert f'"capabilities": {{"{capability}": true}}' in str(e.value)


def test_cni_args_merge_annotation_wins_and_config_is_not_mutated():
    c = NetworkConfig.from_dict({"cniVersion": "1.0.0", "name": "a", "plugins": [
        {"type": "macvlan", "args": {"cni": {"spoofchk": "off", "keep": "1"}}},
        {"type": "tuning"}]}, "NAD a")
    p = plan('[{"name":"a","cni-args":{"spoofchk":"on"}}]', {"a": c})
    plugins = p[1].config.plugins
    assert plugins[0]["args"]["cni"] == {"spoofchk": "on", "keep": "1"}
    assert plugins[1]["args"]["cni"] == {"spoofchk": "on"}
    assert c.plugins[0]["args"]["cni"]["spoofchk"] == "off"


def test_default_networks_elements_are_planned_like_selected_ones():
    e = NetworkSelectionElement(name="dn", namespace="kube-system")
    p = plan_attachments(DEFAULT, "eth0", {}, [(e, conf("dn"))])
    assert [(a.network, a.ifname) for a in p] == [("cluster-net", "eth0"), ("kube-system/dn", "net1")]


# ------------------------------------------------------------------ bandwidth default bursts

TICK_OVERFLOW_SECONDS = 2**32 * 64e-9  # tbf's u32 bucket in 64 ns ticks: 274.9 s


@pytest.mark.parametrize("rate,burst", [
    (1, 200),                               # 200 s cap: no burst is both a frame and safe
    (2048, 409_600),                        # the spec example's rate: still the cap
    (2622, 524_288),                        # from here on the 64 KiB floor
    (1_000_000, 524_288),
    (5_242_880, 524_288),                   # floor == 100 ms of traffic
    (10_000_000, 1_000_000),                # 100 ms of traffic
    (10**11, 10**10),
    (10**12, BANDWIDTH_MAX_BURST),          # the plugin's 4 GB limit
    (2**63 - 1, BANDWIDTH_MAX_BURST),
])
def test_default_burst(rate, burst):
    assert default_burst(rate) == burst


@pytest.mark.parametrize("rate", [1, 7, 8, 100, 2047, 2621, 2622, 10**4, 10**6, 5_242_879,
                                  5_242_881, 10**9, 34_359_738_351, 10**12, 2**63 - 1])
def test_default_burst_is_always_accepted_by_the_bandwidth_plugin(rate):
    burst = default_burst(rate)
    assert burst >= 8 and burst // 8 < 2**32 - 1       # plugin: "burst cannot be more than 4GB"
    assert burst / rate < TICK_OVERFLOW_SECONDS          # the bucket does not wrap around
    if rate >= 2622:
        assert burst >= 64 * 1024 * 8                   # a whole 64 KiB packet fits


def bw_conf(name="a"):
    return NetworkConfig.from_dict({"cniVersion": "1.0.0", "name": name, "plugins": [
        {"type": "bridge"}, {"type": "bandwidth", "capabilities": {"bandwidth": True}}]},
        f"NAD {name}")


@pytest.mark.parametrize("requested,passed", [
    ({"ingressRate": 10_000_000}, {"ingressRate": 10_000_000, "ingressBurst": 1_000_000}),
    ({"egressRate": 2048}, {"egressRate": 2048, "egressBurst": 409_600}),
    # a burst the user gave is never changed, however small
    ({"ingressRate": 2048, "ingressBurst": 300, "egressRate": 8000},
     {"ingressRate": 2048, "ingressBurst": 300, "egressRate": 8000, "egressBurst": 524_288}),
    ({"ingressRate": 1, "ingressBurst": 2**40, "egressRate": 9, "egressBurst": 9},
     {"ingressRate": 1, "ingressBurst": 2**40, "egressRate": 9, "egressBurst": 9}),
])
def test_bandwidth_rate_without_burst_gets_the_default(requested, passed):
    p = plan(json.dumps([{"name": "a", "bandwidth": requested}]), {"a": bw_conf()})
    assert p[1].capability_args == {"bandwidth": passed}
    assert p[1].element.bandwidth == requested          # the element is not modified


@pytest.mark.parametrize("mapping,passed", [
    ({"hostPort": 8080, "containerPort": 80}, {"hostPort": 8080, "containerPort": 80,
                                               "protocol": "tcp"}),
    ({"hostPort": 53, "containerPort": 53, "protocol": "UDP"},
     {"hostPort": 53, "containerPort": 53, "protocol": "udp"}),
    ({"hostPort": 1, "containerPort": 2, "protocol": "Sctp", "hostIP": "198.18.0.1"},
     {"hostPort": 1, "containerPort": 2, "protocol": "sctp", "hostIP": "198.18.0.1"}),
])
def test_port_mappings_in_the_conventions_shape(mapping, passed):
    """Lower-case protocols, as CONVENTIONS.md and kubelet: portmap's nftables backend
    writes the protocol verbatim into an nft rule, which only knows `tcp`."""
    c = conf("a", capabilities={"portMappings": True})
    p = plan(json.dumps([{"name": "a", "portMappings": [mapping]}]), {"a": c})
    assert p[1].capability_args == {"portMappings": [passed]}


def test_runtime_bandwidth_of_the_default_network_is_passed_unchanged():
    rc = {"bandwidth": {"ingressRate": 1000}}
    assert plan("", runtime_config=rc)[0].capability_args == rc


# ------------------------------------------------------------------ ipam-claim-reference

def claim_conf(declared: bool, nad_args: dict | None = None):
    ipam_plugin = {"type": "macvlan", "ipam": {"type": "claim-aware"}}
    if declared:
        ipam_plugin["capabilities"] = {"ipamClaimReference": True}
    if nad_args is not None:
        ipam_plugin["args"] = {"cni": nad_args}
    return NetworkConfig.from_dict({"cniVersion": "1.0.0", "name": "a", "plugins": [
        ipam_plugin, {"type": "tuning"}]}, "NAD a")


@pytest.mark.parametrize("element,nad_args,args_cni", [
    # the claim alone
    ({"ipam-claim-reference": "vm123.tenantblue"}, None,
     {"ipam-claim-reference": "vm123.tenantblue"}),
    # the annotation wins over the NAD's args; other NAD args stay
    ({"ipam-claim-reference": "vm1"}, {"ipam-claim-reference": "old", "keep": "1"},
     {"ipam-claim-reference": "vm1", "keep": "1"}),
    # the dedicated key wins over the same name in the element's own cni-args
    ({"ipam-claim-reference": "vm1", "cni-args": {"ipam-claim-reference": "x", "k": "v"}}, None,
     {"ipam-claim-reference": "vm1", "k": "v"}),
])
@pytest.mark.parametrize("declared", [True, False])
def test_ipam_claim_reference_goes_to_args_cni_of_every_plugin_and_runtime_config(
        element, nad_args, args_cni, declared):
    c = claim_conf(declared, nad_args)
    p = plan(json.dumps([{"name": "a", **element}]), {"a": c})   # never a PlanError
    att = p[1]
    assert att.capability_args == {"ipamClaimReference": element["ipam-claim-reference"]}
    assert att.config.plugins[0]["args"]["cni"] == args_cni
    # the second plugin had no args: it gets the annotation's values only
    assert att.config.plugins[1]["args"]["cni"] == {
        k: v for k, v in args_cni.items() if k != "keep"}
    # the chain engine passes runtimeConfig.ipamClaimReference only where it is declared
    rt = chain.RuntimeConf("cid", "/var/run/netns/x", att.ifname,
                           capability_args=att.capability_args)
    stdin = [chain.plugin_config(att.config, pl, rt, None) for pl in att.config.plugins]
    expected = {"ipamClaimReference": element["ipam-claim-reference"]} if declared else None
    assert stdin[0].get("runtimeConfig") == expected
    assert "runtimeConfig" not in stdin[1]
    assert c.plugins[0].get("args", {"cni": None})["cni"] == nad_args   # NAD not mutated


def test_no_claim_leaves_the_delegate_alone():
    c = claim_conf(True)
    p = plan('[{"name":"a"}]', {"a": c})
    assert p[1].config is c and p[1].capability_args == {}
    assert IPAM_CLAIM_ARGS_KEY == "ipam-claim-reference"


def test_ips_with_a_claim_is_rejected_before_planning():
    with pytest.raises(SelectionError, match="ipam-claim-reference"):
        plan('[{"name":"a","ips":["198.18.0.5/24"],"ipam-claim-reference":"vm1"}]',
             {"a": claim_conf(True)})
