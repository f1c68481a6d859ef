"""NAD / on-disk CNI config -> delegate network config (multi-net spec v1.3 §3.4)."""
from __future__ import annotations

import copy
import json
import logging
import os

import pytest

from netattach.cni.chain import NetworkConfig
from netattach.cni.errors import INCOMPATIBLE_VERSION, INVALID_CONFIG, CniError
from netattach.spec.delegates import (
    CONF_EXTENSIONS,
    DelegateError,
    config_from_nad,
    find_on_disk,
    list_conf_files,
    load_conf_file,
    resolve_delegate,
)

# §3.2.1
SPEC_CONF = """{
    "cniVersion": "0.3.0",
    "name": "a-bridge-network",
    "type": "bridge",
    "bridge": "br0",
    "isGateway": true,
    "ipam": {
      "type": "host-local",
      "subnet": "192.168.5.0/24",
      "dataDir": "/mnt/cluster-ipam"
    }
  }"""

# §3.2.2
SPEC_CONFLIST = """{
    "cniVersion": "0.3.0",
    "name": "another-bridge-network",
    "plugins": [
      {
        "type": "bridge",
        "bridge": "br0",
        "ipam": {
          "type": "host-local",
          "subnet": "192.168.5.0/24"
        }
      },
      {
        "type": "port-forwarding"
      },
      {
        "type": "tuning",
        "sysctl": {
          "net.ipv4.conf.all.log_martians": "1"
        }
      }
    ]
  }"""

# §3.2.3 / §3.4.2.1
SPEC_THICK = """{
    "cniVersion": "0.3.0",
    "type": "awesome-plugin"
  }"""


def nad(name: str, config: object = None, namespace: str = "default", *, spec: object = ...) -> dict:
    obj: dict = {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                 "metadata": {"name": name, "namespace": namespace}}
    if spec is not ...:
        obj["spec"] = spec
    elif config is not None:
        obj["spec"] = {"config": config}
    return obj


def write(path, data) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def conf(name: str, ptype: str = "bridge", **extra) -> dict:
    return {"cniVersion": "1.0.0", "name": name, "type": ptype, **extra}


def conflist(name: str, *types: str, **extra) -> dict:
    return {"cniVersion": "1.0.0", "name": name,
            "plugins": [{"type": t} for t in (types or ("bridge",))], **extra}


# ---------------------------------------------------------------- config_from_nad


def test_spec_example_conf_in_object():
    # §3.2.1, §3.4.1 step 1
    cfg = config_from_nad(nad("a-bridge-network", SPEC_CONF), default_name="a-bridge-network")
    assert isinstance(cfg, NetworkConfig)
    assert (cfg.name, cfg.cni_version, cfg.is_list) == ("a-bridge-network", "0.3.0", False)
    assert cfg.plugins[0]["type"] == "bridge"
    assert cfg.raw == json.loads(SPEC_CONF)
    assert cfg.source == "NetworkAttachmentDefinition default/a-bridge-network"


def test_spec_example_conflist_in_object():
    # §3.2.2
    cfg = config_from_nad(nad("another-bridge-network", SPEC_CONFLIST, "ns1"),
                          default_name="another-bridge-network")
    assert cfg.is_list and cfg.name == "another-bridge-network"
    assert [p["type"] for p in cfg.plugins] == ["bridge", "port-forwarding", "tuning"]
    assert cfg.source == "NetworkAttachmentDefinition ns1/another-bridge-network"


def test_spec_example_name_injection():
    # §3.2.3 and §3.4.2.1: the delegate gets exactly the documented JSON
    cfg = config_from_nad(nad("a-bridge-network", SPEC_THICK), default_name="a-bridge-network")
    expected = {"cniVersion": "0.3.0", "name": "a-bridge-network", "type": "awesome-plugin"}
    assert cfg.raw == expected
    assert list(cfg.raw) == list(expected)  # name placed after cniVersion, as in the example
    assert cfg.name == "a-bridge-network"


def test_spec_example_implementation_specific_reference():
    # §3.2.4: no spec at all -> not step 1; the caller goes to disk
    assert config_from_nad(nad("a-bridge-network"), default_name="a-bridge-network") is None


@pytest.mark.parametrize("spec", [None, {}, {"config": None}, {"config": ""}, {"config": "  \n\t"}])
def test_no_config(spec):
    assert config_from_nad(nad("n", spec=spec), default_name="n") is None


@pytest.mark.parametrize(
    "config, expected_name",
    [
        ({"cniVersion": "1.0.0", "type": "macvlan"}, "net-x"),
        ({"cniVersion": "1.0.0", "name": "", "type": "macvlan"}, "net-x"),
        ({"cniVersion": "1.0.0", "name": None, "type": "macvlan"}, "net-x"),
        ({"type": "macvlan"}, "net-x"),
        # §3.4.3: a name different from the NAD's is allowed and kept
        ({"cniVersion": "1.0.0", "name": "other", "type": "macvlan"}, "other"),
    ],
)
def test_name_injection_cases(config, expected_name):
    cfg = config_from_nad(nad("net-x", json.dumps(config)), default_name="net-x")
    assert cfg.name == expected_name == cfg.raw["name"]


def test_name_injected_at_top_of_a_conflist():
    cfg = config_from_nad(nad("net-x", json.dumps({"cniVersion": "1.0.0",
                                                    "plugins": [{"type": "bridge"}, {"type": "tuning"}]})),
                          default_name="net-x")
    assert cfg.is_list and cfg.raw["name"] == "net-x"
    assert all("name" not in p for p in cfg.plugins)


def test_default_name_is_what_gets_injected():
    cfg = config_from_nad(nad("meta-name", SPEC_THICK), default_name="asked-name")
    assert cfg.name == "asked-name"


def test_nad_without_metadata_uses_default_name_in_messages():
    with pytest.raises(DelegateError) as info:
        config_from_nad({"spec": {"config": "{"}}, default_name="lonely")
    assert info.value.network == "lonely"


def test_nad_is_not_modified():
    obj = nad("net-x", SPEC_THICK)
    before = copy.deepcopy(obj)
    config_from_nad(obj, default_name="net-x")
    assert obj == before


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ({"config": "{"}, "not valid JSON"),
        ({"config": "not json"}, "not valid JSON"),
        ({"config": '{"type": "x",}'}, "not valid JSON"),
        ({"config": '{"type": "x", "mtu": NaN}'}, "not valid JSON"),
        ({"config": "[" * 5000 + "]" * 5000}, "not valid JSON"),
        ({"config": '[{"type": "x"}]'}, "must be a JSON object"),
        ({"config": '"x"'}, "must be a JSON object"),
        ({"config": "null"}, "must be a JSON object"),
        ({"config": {"type": "x"}}, "spec.config must be a string"),
        ({"config": 5}, "spec.config must be a string"),
        ({"config": '{"name": 5, "type": "x"}'}, '"name" in spec.config must be a string'),
        ("config", "spec must be an object"),
    ],
)
def test_bad_spec_config(spec, fragment):
    with pytest.raises(DelegateError) as info:
        config_from_nad(nad("bad-net", spec=spec, namespace="ns1"), default_name="bad-net")
    err = info.value
    assert err.network == "ns1/bad-net"
    assert "NetworkAttachmentDefinition ns1/bad-net" in str(err)
    assert fragment in str(err)
    assert err.msg == str(err) and err.code == 7


@pytest.mark.parametrize(
    "config, code",
    [
        ({"cniVersion": "1.0.0"}, INVALID_CONFIG),                       # no type
        ({"cniVersion": "1.0.0", "plugins": []}, INVALID_CONFIG),        # zero plugins
        ({"cniVersion": "1.0.0", "plugins": [{"bridge": "br0"}]}, INVALID_CONFIG),
        ({"cniVersion": "1.0.0", "plugins": {"type": "x"}}, INVALID_CONFIG),
        ({"cniVersion": "9.9.9", "type": "bridge"}, INCOMPATIBLE_VERSION),
        ({"cniVersion": "x", "type": "bridge"}, INVALID_CONFIG),
    ],
)
def test_invalid_cni_config_in_nad_chains_the_cni_error(config, code):
    with pytest.raises(DelegateError) as info:
        config_from_nad(nad("n", json.dumps(config)), default_name="n")
    assert isinstance(info.value.__cause__, CniError)
    assert info.value.__cause__.code == code
    assert "NetworkAttachmentDefinition default/n" in str(info.value)
    assert str(info.value).count("default/n") == 1


# ---------------------------------------------------------------- list_conf_files


def test_list_conf_files_filters_and_sorts(tmp_path):
    for name in ["10-b.conf", "05-a.conflist", "99.json", "20-c.conf", "Z.conf", "a.conf.bak",
                 "README", "x.yaml", "noext", ".conf", ".hidden.conflist"]:
        write(tmp_path / name, "{}")
    (tmp_path / "sub.conf").mkdir()
    (tmp_path / "link.conf").symlink_to(tmp_path / "10-b.conf")
    (tmp_path / "broken.conf").symlink_to(tmp_path / "missing")
    (tmp_path / "dirlink.conf").symlink_to(tmp_path / "sub.conf")
    got = [os.path.basename(p) for p in list_conf_files(str(tmp_path))]
    # libcni ConfFiles: every entry that is not itself a directory, symlinks included
    # wherever they point (the runtime lists them too, and fails to read the broken ones)
    assert got == [".conf", ".hidden.conflist", "05-a.conflist", "10-b.conf", "20-c.conf",
                   "99.json", "Z.conf", "broken.conf", "dirlink.conf", "link.conf"]
    assert all(os.path.dirname(p) == str(tmp_path) for p in list_conf_files(str(tmp_path)))
    assert CONF_EXTENSIONS == (".conf", ".conflist", ".json")


def test_list_conf_files_missing_dir(tmp_path):
    assert list_conf_files(str(tmp_path / "nope")) == []


def test_list_conf_files_not_a_dir(tmp_path):
    path = write(tmp_path / "file", "")
    with pytest.raises(OSError):
        list_conf_files(path)


# ---------------------------------------------------------------- load_conf_file


def test_load_conflist(tmp_path):
    path = write(tmp_path / "10-net.conflist", SPEC_CONFLIST)
    cfg = load_conf_file(path)
    assert cfg.is_list and cfg.name == "another-bridge-network" and cfg.source == path
    assert len(cfg.plugins) == 3


@pytest.mark.parametrize("ext", [".conf", ".json"])
def test_load_single_conf(tmp_path, ext):
    path = write(tmp_path / f"10-net{ext}", SPEC_CONF)
    cfg = load_conf_file(path)
    assert not cfg.is_list and cfg.name == "a-bridge-network" and cfg.source == path
    assert cfg.raw == json.loads(SPEC_CONF)


@pytest.mark.parametrize("ext", [".conf", ".json"])
def test_conf_holding_a_conflist_is_rejected(tmp_path, ext):
    # libcni/kubelet/CRI-O: "no 'type'; perhaps this is a .conflist?"
    path = write(tmp_path / f"10-net{ext}", SPEC_CONFLIST)
    with pytest.raises(DelegateError) as info:
        load_conf_file(path)
    assert "perhaps this is a .conflist?" in str(info.value)
    assert info.value.network == path


def test_conflist_holding_a_conf_is_rejected(tmp_path):
    path = write(tmp_path / "10-net.conflist", SPEC_CONF)
    with pytest.raises(DelegateError) as info:
        load_conf_file(path)
    assert "perhaps this is a .conf?" in str(info.value)


def test_conf_with_type_and_plugins_key_is_one_plugin(tmp_path):
    # libcni ignores "plugins" in a single conf and up-converts it to a one-plugin list
    data = conf("net-a", "thick", plugins=["opaque"])
    cfg = load_conf_file(write(tmp_path / "a.conf", data))
    assert cfg.name == "net-a" and cfg.cni_version == "1.0.0"
    assert cfg.plugins == (data,)


@pytest.mark.parametrize(
    "content, fragment",
    [
        ("{", "not valid JSON"),
        ("", "not valid JSON"),
        ("\ufeff{}", "not valid JSON"),
        ('{"name": "x", "type": "y", "mtu": Infinity}', "not valid JSON"),
        ("[]", "must hold a JSON object"),
        ('"x"', "must hold a JSON object"),
    ],
)
def test_load_unparsable(tmp_path, content, fragment):
    path = write(tmp_path / "x.conf", content)
    with pytest.raises(DelegateError) as info:
        load_conf_file(path)
    assert fragment in str(info.value) and path in str(info.value)


def test_load_invalid_utf8(tmp_path):
    path = tmp_path / "x.conf"
    path.write_bytes(b'{"name": "\xff", "type": "x"}')
    with pytest.raises(DelegateError):
        load_conf_file(str(path))


def test_load_missing_file(tmp_path):
    path = str(tmp_path / "gone.conf")
    with pytest.raises(DelegateError) as info:
        load_conf_file(path)
    assert info.value.network == path and "cannot read" in str(info.value)


def test_load_wrong_extension(tmp_path):
    path = write(tmp_path / "net.yaml", SPEC_CONF)
    with pytest.raises(DelegateError) as info:
        load_conf_file(path)
    assert "not a CNI config file" in str(info.value)


@pytest.mark.parametrize(
    "data, code",
    [
        ({"cniVersion": "1.0.0", "type": "bridge"}, INVALID_CONFIG),  # no name
        ({"cniVersion": "2.0.0", "name": "n", "type": "bridge"}, INCOMPATIBLE_VERSION),
    ],
)
def test_load_invalid_config_chains_cni_error(tmp_path, data, code):
    path = write(tmp_path / "n.conf", data)
    with pytest.raises(DelegateError) as info:
        load_conf_file(path)
    assert info.value.__cause__.code == code
    assert info.value.network == path
    assert str(info.value).count(path) == 1


def test_conflist_gets_plugins_from_its_directory(tmp_path):
    # libcni >= 1.2: <dir>/<name>/*.conf are appended after the inline plugins
    path = write(tmp_path / "10-net.conflist", conflist("net-a", "bridge"))
    write(tmp_path / "net-a" / "20-tuning.conf", {"type": "tuning"})
    write(tmp_path / "net-a" / "10-portmap.conf", {"type": "portmap", "capabilities": {"portMappings": True}})
    write(tmp_path / "net-a" / "30-ignored.json", {"type": "nope"})
    (tmp_path / "net-a" / "40-dir.conf").mkdir()
    cfg = load_conf_file(path)
    assert [p["type"] for p in cfg.plugins] == ["bridge", "portmap", "tuning"]


def test_conflist_made_only_of_directory_plugins(tmp_path):
    path = write(tmp_path / "10-net.conflist", {"cniVersion": "1.0.0", "name": "net-a"})
    write(tmp_path / "net-a" / "a.conf", {"type": "bridge"})
    cfg = load_conf_file(path)
    assert cfg.is_list and [p["type"] for p in cfg.plugins] == ["bridge"]


@pytest.mark.parametrize("flag", [True, "true", "TRUE"])
def test_load_only_inlined_plugins(tmp_path, flag):
    path = write(tmp_path / "10-net.conflist", conflist("net-a", "bridge", loadOnlyInlinedPlugins=flag))
    write(tmp_path / "net-a" / "a.conf", {"type": "tuning"})
    assert [p["type"] for p in load_conf_file(path).plugins] == ["bridge"]


@pytest.mark.parametrize(
    "data, side, fragment",
    [
        ({"cniVersion": "1.0.0", "name": "net-a", "loadOnlyInlinedPlugins": True}, None,
         "loadOnlyInlinedPlugins is true, and no 'plugins'"),
        (conflist("net-a", loadOnlyInlinedPlugins="yes"), None, "loadOnlyInlinedPlugins"),
        (conflist("net-a"), {"bridge": "br0"}, "has no 'type'"),
        (conflist("net-a"), "{", "not valid JSON"),
    ],
)
def test_directory_plugin_errors(tmp_path, data, side, fragment):
    path = write(tmp_path / "10-net.conflist", data)
    if side is not None:
        write(tmp_path / "net-a" / "a.conf", side)
    with pytest.raises(DelegateError) as info:
        load_conf_file(path)
    assert fragment in str(info.value)


def test_directory_plugins_ignore_unsafe_names(tmp_path):
    write(tmp_path / "evil.conf", {"type": "x"})
    path = write(tmp_path / "d" / "10.conflist", conflist(".."))
    assert [p["type"] for p in load_conf_file(path).plugins] == ["bridge"]


# ---------------------------------------------------------------- find_on_disk


def test_conflist_before_conf(tmp_path):
    # §3.4.1: step 2 (.conflist) before step 3 (.conf), whatever the file order
    write(tmp_path / "00-net.conf", conf("net-a", "from-conf"))
    lst = write(tmp_path / "99-net.conflist", conflist("net-a", "from-conflist"))
    cfg = find_on_disk(str(tmp_path), "net-a")
    assert cfg.source == lst and cfg.plugins[0]["type"] == "from-conflist"


def test_conf_when_no_conflist_matches(tmp_path):
    write(tmp_path / "00-other.conflist", conflist("other"))
    path = write(tmp_path / "50-net.conf", conf("net-a", "macvlan"))
    cfg = find_on_disk(str(tmp_path), "net-a")
    assert cfg.source == path and not cfg.is_list


def test_json_is_a_single_conf_in_step_3(tmp_path):
    path = write(tmp_path / "10-net.json", conf("net-a", "from-json"))
    write(tmp_path / "20-net.conf", conf("net-a", "from-conf"))
    assert find_on_disk(str(tmp_path), "net-a").source == path


def test_first_match_in_name_order(tmp_path):
    write(tmp_path / "b.conflist", conflist("net-a", "second"))
    write(tmp_path / "a.conflist", conflist("net-a", "first"))
    write(tmp_path / "B.conflist", conflist("net-a", "upper-sorts-first"))
    assert find_on_disk(str(tmp_path), "net-a").plugins[0]["type"] == "upper-sorts-first"


@pytest.mark.parametrize("wanted", ["net", "NET-A", "net-a ", ""])
def test_name_must_match_exactly(tmp_path, wanted):
    write(tmp_path / "a.conflist", conflist("net-a"))
    assert find_on_disk(str(tmp_path), wanted) is None


def test_missing_dir_and_no_match(tmp_path):
    assert find_on_disk(str(tmp_path / "nope"), "net-a") is None
    assert find_on_disk(str(tmp_path), "net-a") is None


def test_broken_files_are_skipped_with_a_warning(tmp_path, caplog):
    write(tmp_path / "00-broken.conflist", "{")
    write(tmp_path / "01-list.conflist", "[1]")
    bad_match = write(tmp_path / "02-bad.conflist", {"cniVersion": "1.0.0", "name": "net-a", "plugins": []})
    good = write(tmp_path / "03-good.conflist", conflist("net-a", "good"))
    with caplog.at_level(logging.WARNING, logger="netattach.delegates"):
        cfg = find_on_disk(str(tmp_path), "net-a")
    assert cfg.source == good
    warned = " ".join(r.getMessage() for r in caplog.records if r.name == "netattach.delegates")
    assert "00-broken.conflist" in warned and "01-list.conflist" in warned and bad_match in warned


def test_invalid_match_falls_through_to_conf(tmp_path):
    write(tmp_path / "10.conflist", {"cniVersion": "1.0.0", "name": "net-a", "plugins": [{}]})
    path = write(tmp_path / "20.conf", conf("net-a"))
    assert find_on_disk(str(tmp_path), "net-a").source == path


def test_valid_files_that_do_not_match_are_not_validated(tmp_path, caplog):
    write(tmp_path / "10.conflist", {"name": "other", "plugins": "garbage"})
    with caplog.at_level(logging.WARNING, logger="netattach.delegates"):
        assert find_on_disk(str(tmp_path), "net-a") is None
    assert not caplog.records


def test_unlistable_dir_is_a_warning_not_an_exception(tmp_path, caplog):
    path = write(tmp_path / "file", "")
    with caplog.at_level(logging.WARNING, logger="netattach.delegates"):
        assert find_on_disk(path, "net-a") is None
    assert "cannot list" in caplog.text


# ---------------------------------------------------------------- resolve_delegate


def test_resolve_nad_missing():
    with pytest.raises(DelegateError) as info:
        resolve_delegate(None, "ns1", "net-a", "/nonexistent")
    assert str(info.value) == "NetworkAttachmentDefinition ns1/net-a not found"
    assert info.value.network == "ns1/net-a"


def test_resolve_step1_wins_over_disk(tmp_path):
    write(tmp_path / "a.conflist", conflist("net-a", "disk"))
    cfg = resolve_delegate(nad("net-a", json.dumps(conf("net-a", "nad")), "ns1"), "ns1", "net-a",
                           str(tmp_path))
    assert cfg.plugins[0]["type"] == "nad"
    assert cfg.source == "NetworkAttachmentDefinition ns1/net-a"


@pytest.mark.parametrize("spec", [..., None, {}, {"config": ""}])
def test_resolve_falls_back_to_disk(tmp_path, spec):
    write(tmp_path / "a.conf", conf("net-a", "disk-conf"))
    lst = write(tmp_path / "b.conflist", conflist("net-a", "disk-list"))
    obj = nad("net-a", namespace="ns1") if spec is ... else nad("net-a", namespace="ns1", spec=spec)
    cfg = resolve_delegate(obj, "ns1", "net-a", str(tmp_path))
    assert cfg.source == lst


def test_resolve_step3(tmp_path):
    path = write(tmp_path / "a.conf", conf("net-a", "disk-conf"))
    assert resolve_delegate(nad("net-a", namespace="ns1"), "ns1", "net-a", str(tmp_path)).source == path


def test_resolve_step4_fails(tmp_path):
    write(tmp_path / "a.conf", conf("other"))
    with pytest.raises(DelegateError) as info:
        resolve_delegate(nad("net-a", namespace="ns1"), "ns1", "net-a", str(tmp_path))
    assert str(info.value) == (f"NetworkAttachmentDefinition ns1/net-a has no spec.config and no CNI "
                               f"config named 'net-a' in {tmp_path}")
    assert info.value.network == "ns1/net-a"


def test_resolve_step4_lists_skipped_files(tmp_path):
    for i in range(7):
        write(tmp_path / f"{i}.conflist", "{")
    with pytest.raises(DelegateError) as info:
        resolve_delegate(nad("net-a", namespace="ns1"), "ns1", "net-a", str(tmp_path))
    text = str(info.value)
    assert "(skipped: " in text and "0.conflist" in text and "and 2 more" in text


def test_resolve_invalid_spec_config_does_not_fall_back(tmp_path):
    write(tmp_path / "a.conflist", conflist("net-a"))
    with pytest.raises(DelegateError) as info:
        resolve_delegate(nad("net-a", "{", "ns1"), "ns1", "net-a", str(tmp_path))
    assert "not valid JSON" in str(info.value)


def test_resolve_uses_the_reference_name_for_disk(tmp_path):
    # the on-disk name to match is the NAD's name (§3.4.1), injected when missing
    write(tmp_path / "a.conf", conf("net-a"))
    cfg = resolve_delegate(nad("net-a", namespace="ns1"), "ns1", "net-a", str(tmp_path))
    assert cfg.name == "net-a"
    cfg = resolve_delegate(nad("net-b", SPEC_THICK, "ns1"), "ns1", "net-b", str(tmp_path))
    assert cfg.name == "net-b"
