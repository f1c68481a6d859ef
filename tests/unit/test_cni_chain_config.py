"""NetworkConfig parsing and what each plugin gets on stdin (plugin_config). Pure."""
from __future__ import annotations

import copy

import pytest

from netattach.cni import chain
from netattach.cni.chain import NetworkConfig, RuntimeConf, plugin_config
from netattach.cni.errors import CniError

LIST = {"cniVersion": "1.0.0", "name": "mynet", "plugins": [
    {"type": "bridge", "bridge": "cni0", "cniVersion": "0.3.1", "name": "other",
     "ipam": {"type": "host-local", "subnet": "10.1.0.0/24"}},
    {"type": "portmap", "capabilities": {"portMappings": True, "ips": False}},
    {"type": "tuning", "capabilities": {"mac": True, "ips": True}, "x-custom": [1, 2]},
]}

RT = RuntimeConf(container_id="c1", netns="/var/run/netns/x", ifname="eth0",
                 args=(("IgnoreUnknown", "1"), ("K8S_POD_NAME", "p")),
                 capability_args={"portMappings": [{"hostPort": 80, "containerPort": 8080}],
                                  "ips": ["10.1.0.9/24"], "bandwidth": {"ingressRate": 1}},
                 cni_path=("/opt/cni/bin",), bin_dirs=("/x",), timeout=5.0)

PREV_110 = {"cniVersion": "1.1.0", "interfaces": [{"name": "eth0", "mtu": 1400}],
            "ips": [{"address": "10.1.0.5/24", "interface": 0}],
            "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1", "priority": 5}]}


# ------------------------------------------------------------------ NetworkConfig

def test_conflist_parsed():
    raw = copy.deepcopy(LIST)
    net = NetworkConfig.from_dict(raw, "/etc/cni/net.d/10-my.conflist")
    assert (net.name, net.cni_version, net.is_list) == ("mynet", "1.0.0", True)
    assert [p["type"] for p in net.plugins] == ["bridge", "portmap", "tuning"]
    assert net.source == "/etc/cni/net.d/10-my.conflist"
    assert (net.disable_check, net.disable_gc) == (False, False)
    assert raw == LIST  # input untouched
    assert net.raw == LIST and net.raw is not raw  # nothing lost, a copy
    raw["plugins"][0]["bridge"] = "changed"
    assert net.plugins[0]["bridge"] == "cni0"


def test_single_conf_parsed():
    conf = {"cniVersion": "0.3.1", "name": "n", "type": "bridge", "extra": {"a": 1}}
    net = NetworkConfig.from_dict(conf, "nad default/n")
    assert (net.name, net.cni_version, net.is_list) == ("n", "0.3.1", False)
    assert net.plugins == (conf,)
    assert net.raw == conf


def test_missing_version_is_010():
    assert NetworkConfig.from_dict({"name": "n", "type": "bridge"}, "s").cni_version == "0.1.0"
    assert NetworkConfig.from_dict({"name": "n", "plugins": [{"type": "x"}]}, "s").cni_version \
        == "0.1.0"


def test_cni_versions_highest_supported_wins():
    data = {"name": "n", "cniVersion": "1.0.0", "cniVersions": ["0.4.0", "1.1.0", "9.9.9"],
            "plugins": [{"type": "x"}]}
    assert NetworkConfig.from_dict(data, "s").cni_version == "1.1.0"


@pytest.mark.parametrize("flag,value,expected", [
    ("disableCheck", True, True), ("disableCheck", "TRUE", True), ("disableCheck", "false", False),
    ("disableGC", True, True), ("disableGC", False, False)])
def test_flags(flag, value, expected):
    data = {"name": "n", "cniVersion": "1.1.0", "plugins": [{"type": "x"}], flag: value}
    net = NetworkConfig.from_dict(data, "s")
    assert getattr(net, "disable_check" if flag == "disableCheck" else "disable_gc") is expected


@pytest.mark.parametrize("data,problem", [
    ({"cniVersion": "1.0.0", "plugins": [{"type": "x"}]}, "name"),
    ({"cniVersion": "1.0.0", "name": "", "type": "x"}, "name"),
    ({"cniVersion": "1.0.0", "name": 3, "type": "x"}, "name"),
    ({"cniVersion": "1.0.0", "name": "n", "plugins": []}, "plugins"),
    ({"cniVersion": "1.0.0", "name": "n", "plugins": {"type": "x"}}, "plugins"),
    ({"cniVersion": "1.0.0", "name": "n", "plugins": ["x"]}, "plugins[0]"),
    ({"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "x"}, {"mtu": 1}]}, "plugins[1]"),
    ({"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": ""}]}, "type"),
    ({"cniVersion": "1.0.0", "name": "n"}, "type"),
    ({"cniVersion": "1.0.0", "name": "n", "type": 5}, "type"),
    ({"cniVersion": 1, "name": "n", "type": "x"}, "cniVersion"),
    ({"cniVersion": "x.y", "name": "n", "type": "x"}, "cniVersion"),
    ({"cniVersion": "1.0.0", "name": "n", "type": "x", "capabilities": []}, "capabilities"),
    ({"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "x"}], "disableCheck": 1},
     "disableCheck"),
    ({"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "x"}], "cniVersions": "1.0.0"},
     "cniVersions"),
    ([], "object"),
])
def test_invalid_configs_name_source_and_problem(data, problem):
    with pytest.raises(CniError) as e:
        NetworkConfig.from_dict(data, "/etc/cni/net.d/bad.conf")
    assert e.value.code == 7
    assert "/etc/cni/net.d/bad.conf" in e.value.msg and problem in e.value.msg


def test_unsupported_version_is_incompatible():
    with pytest.raises(CniError) as e:
        NetworkConfig.from_dict({"cniVersion": "0.5.0", "name": "n", "type": "x"}, "src")
    assert e.value.code == 1 and "src" in e.value.msg


# ------------------------------------------------------------------ plugin_config

def net() -> NetworkConfig:
    return NetworkConfig.from_dict(LIST, "test")


def test_name_and_version_of_the_list_injected():
    n = net()
    conf = plugin_config(n, n.plugins[0], RT, None)
    assert conf["name"] == "mynet" and conf["cniVersion"] == "1.0.0"
    assert conf["ipam"] == {"type": "host-local", "subnet": "10.1.0.0/24"}
    assert "runtimeConfig" not in conf and "prevResult" not in conf


def test_runtime_config_only_declared_capabilities():
    n = net()
    assert plugin_config(n, n.plugins[1], RT, None)["runtimeConfig"] == {
        "portMappings": [{"hostPort": 80, "containerPort": 8080}]}
    # "mac" declared but not given by the runtime; "ips" declared and given
    assert plugin_config(n, n.plugins[2], RT, None)["runtimeConfig"] == {"ips": ["10.1.0.9/24"]}


def test_runtime_config_replaced_or_removed():
    n = NetworkConfig.from_dict({"cniVersion": "1.0.0", "name": "n", "plugins": [
        {"type": "a", "capabilities": {"ips": True}, "runtimeConfig": {"mac": "x", "ips": ["1"]}},
        {"type": "b", "runtimeConfig": {"portMappings": []}}]}, "s")
    assert plugin_config(n, n.plugins[0], RT, None)["runtimeConfig"] == {"ips": ["10.1.0.9/24"]}
    assert "runtimeConfig" not in plugin_config(n, n.plugins[1], RT, None)


def test_capability_must_be_true():
    n = NetworkConfig.from_dict({"name": "n", "cniVersion": "1.0.0", "type": "x",
                                 "capabilities": {"ips": "true", "portMappings": 1}}, "s")
    assert "runtimeConfig" not in plugin_config(n, n.plugins[0], RT, None)


def test_prev_result_converted_to_network_version():
    n = net()
    conf = plugin_config(n, n.plugins[2], RT, PREV_110)
    assert conf["prevResult"] == {
        "cniVersion": "1.0.0", "interfaces": [{"name": "eth0"}],
        "ips": [{"address": "10.1.0.5/24", "interface": 0}],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}]}
    n040 = NetworkConfig.from_dict({**LIST, "cniVersion": "0.4.0"}, "t")
    assert plugin_config(n040, n040.plugins[0], RT, PREV_110)["prevResult"]["ips"] == [
        {"version": "4", "address": "10.1.0.5/24", "interface": 0}]


def test_prev_result_without_version_read_as_network_version():
    n = net()
    prev = {"ips": [{"address": "10.1.0.5/24"}]}
    assert plugin_config(n, n.plugins[0], RT, prev)["prevResult"] == {
        "ips": [{"address": "10.1.0.5/24"}], "cniVersion": "1.0.0"}


def test_stale_prev_result_in_plugin_replaced_or_removed():
    n = NetworkConfig.from_dict({"name": "n", "cniVersion": "1.0.0", "type": "x",
                                 "prevResult": {"cniVersion": "1.0.0", "ips": []}}, "s")
    assert "prevResult" not in plugin_config(n, n.plugins[0], RT, None)


def test_single_conf_uses_its_own_name_and_version():
    n = NetworkConfig.from_dict({"name": "solo", "type": "bridge"}, "s")
    conf = plugin_config(n, n.plugins[0], RT, None)
    assert conf["name"] == "solo" and conf["cniVersion"] == "0.1.0"


def test_plugin_config_copies_deeply():
    n = net()
    before = copy.deepcopy(n.plugins[2]), copy.deepcopy(dict(RT.capability_args)), \
        copy.deepcopy(PREV_110)
    conf = plugin_config(n, n.plugins[2], RT, PREV_110)
    conf["x-custom"].append(3)
    conf["runtimeConfig"]["ips"].append("x")
    conf["prevResult"]["ips"].append("x")
    assert (n.plugins[2], dict(RT.capability_args), PREV_110) == before


def test_cni_args_rendering():
    assert RT.cni_args() == "IgnoreUnknown=1;K8S_POD_NAME=p"
    assert RuntimeConf("c", "", "eth0").cni_args() == ""
    env = RT.plugin_env()
    assert (env.container_id, env.netns, env.ifname, env.args, env.path) == \
        ("c1", "/var/run/netns/x", "eth0", "IgnoreUnknown=1;K8S_POD_NAME=p", "/opt/cni/bin")
    bare = RT.bare_env()
    assert (bare.container_id, bare.ifname, bare.args, bare.path) == ("", "", "", "/opt/cni/bin")


# ------------------------------------------------------------------ version gates (no plugin runs)

def _gated(version: str, **flags) -> NetworkConfig:
    return NetworkConfig.from_dict({"cniVersion": version, "name": "n", **flags,
                                    "plugins": [{"type": "does-not-exist"}]}, "s")


@pytest.mark.parametrize("version", ["0.1.0", "0.2.0", "0.3.0", "0.3.1"])
def test_check_needs_040(version):
    with pytest.raises(CniError) as e:
        chain.check(_gated(version), RT, None)
    assert e.value.code == 1 and "CHECK" in e.value.msg


def test_check_skipped_when_disabled():
    chain.check(_gated("1.0.0", disableCheck=True), RT, None)  # would fail to find the plugin


@pytest.mark.parametrize("version", ["0.4.0", "1.0.0"])
def test_status_and_gc_are_noops_below_110(version):
    chain.status(_gated(version), RT)
    chain.gc(_gated(version), RT, [])


def test_gc_skipped_when_disabled():
    chain.gc(_gated("1.1.0", disableGC=True), RT, [])


def test_missing_plugin_is_invalid_config_naming_it():
    with pytest.raises(CniError) as e:
        chain.status(_gated("1.1.0"), RT)
    assert e.value.code == 7 and "does-not-exist" in e.value.msg


@pytest.mark.parametrize("rt,code", [
    (RuntimeConf("-bad", "/x", "eth0"), 4), (RuntimeConf("c1", "/x", "a/b"), 4)])
def test_add_validates_ids_first(rt, code):
    with pytest.raises(CniError) as e:
        chain.add(_gated("1.0.0"), rt)
    assert e.value.code == code


def test_add_validates_network_name():
    n = NetworkConfig.from_dict({"cniVersion": "1.0.0", "name": "bad name", "type": "x"}, "s")
    with pytest.raises(CniError) as e:
        chain.add(n, RT)
    assert e.value.code == 7 and "bad name" in e.value.msg
