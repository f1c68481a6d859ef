"""The attachment plan: order, interface names, runtimeConfig (§7.5), capabilities, cni-args."""
import pytest

from netattach.cni.chain import NetworkConfig
from netattach.plan import PlanError, plan_attachments
from netattach.selection import NetworkSelectionElement, parse_network_selection

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
    import json
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
