"""The rule every delegate passes (policy.py, invoke.check_plugin_type, the executors'
meta-plugin check): no delegating meta-plugin by name or by file, in any `type`; a
tenant's config only names the node's allowedPluginTypes."""
from __future__ import annotations

import json
import os
import stat

import pytest

from netattach.cni import chroot, invoke
from netattach.cni.chain import NetworkConfig
from netattach.cni.errors import CniError, ConfigError
from netattach.spec import policy
from netattach.spec.netconf import parse_netconf

NAD = "NetworkAttachmentDefinition ns1/evil"


def _conf(**extra):
    return parse_netconf({"cniVersion": "1.0.0", "name": "n", "type": "netattach",
                          "clusterNetwork": "/etc/cni/net.d/10-x.conf", **extra})


def _executable(path, content=b"#!/bin/sh\nexit 0\n"):
    path.write_bytes(content)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.parametrize("ptype", sorted(invoke.META_PLUGIN_TYPES))
def test_a_meta_plugin_type_is_refused_by_name(ptype):
    with pytest.raises(invoke.MetaPluginRefused) as e:
        invoke.check_plugin_type(ptype)
    assert e.value.code == 7 and f"plugin type {ptype!r} is a delegating meta-plugin" in e.value.msg


def test_the_allowlist_refuses_other_types_and_never_allows_a_meta_plugin():
    allowed = frozenset({"macvlan", "host-local", "multus"})
    invoke.check_plugin_type("macvlan", allowed)
    with pytest.raises(ConfigError) as e:
        invoke.check_plugin_type("bridge", allowed)
    assert "plugin type 'bridge' is not in the node's allowedPluginTypes (host-local, " \
           "macvlan, multus)" in e.value.msg
    with pytest.raises(invoke.MetaPluginRefused):
        invoke.check_plugin_type("multus", allowed)


@pytest.mark.parametrize("how", ["symlink", "hardlink"])
def test_a_plugin_that_is_netattachs_file_under_another_name_is_refused(tmp_path, how):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    real = _executable(tmp_path / "netattach-real")
    (bin_dir / "netattach").symlink_to(real)
    alias = bin_dir / "innocent"
    if how == "symlink":
        alias.symlink_to(bin_dir / "netattach")
    else:
        os.link(real, alias)
    _executable(bin_dir / "bridge")
    executor = invoke.ProcessExecutor()
    assert executor.find("bridge", [str(bin_dir)]) == str(bin_dir / "bridge")
    with pytest.raises(invoke.MetaPluginRefused) as e:
        executor.find("innocent", [str(bin_dir)])
    assert f"is the same file as {bin_dir / 'netattach'}" in e.value.msg


def test_inside_a_root_a_hard_link_to_the_shim_is_refused(tmp_path):
    """ChrootExecutor (the thick daemon's): the meta-plugins' paths are resolved in the
    root, their symlinks included (the installed `netattach` is a link into
    `.netattach-*`; the shim is the script install_shim writes)."""
    bin_dir = tmp_path / "opt" / "cni" / "bin"
    (bin_dir / ".netattach-0123456789ab").mkdir(parents=True)
    netattach = _executable(bin_dir / ".netattach-0123456789ab" / "netattach")
    (bin_dir / "netattach").symlink_to("/opt/cni/bin/.netattach-0123456789ab/netattach")
    shim = _executable(bin_dir / "netattach-shim",
                       b"#!/opt/cni/bin/.netattach-0123456789ab/shim/bin/python3 -SI\n")
    os.link(shim, bin_dir / "innocent")
    os.link(netattach, bin_dir / "innocent2")
    _executable(bin_dir / "macvlan")
    executor = chroot.ChrootExecutor(str(tmp_path))
    assert executor.find("macvlan", ["/opt/cni/bin"]) == "/opt/cni/bin/macvlan"
    for name in ("innocent", "innocent2"):
        with pytest.raises(invoke.MetaPluginRefused):
            executor.find(name, ["/opt/cni/bin"])


def test_every_type_in_a_plugin_is_found():
    plugin = {"type": "flannel", "ipam": {"type": "host-local"},
              "delegate": {"type": "bridge", "x": [{"type": "netattach"}]}}
    assert sorted(policy.plugin_types(plugin)) == [
        ("delegate.type", "bridge", False), ("delegate.x[0].type", "netattach", False),
        ("ipam.type", "host-local", True), ("type", "flannel", True)]


@pytest.mark.parametrize("plugin, key", [
    ({"type": "bridge", "ipam": {"type": "netattach"}}, "plugins[1].ipam.type"),
    ({"type": "flannel", "delegate": {"type": "multus-shim"}}, "plugins[1].delegate.type"),
    ({"type": "netattach-shim"}, "plugins[1].type"),
])
def test_check_delegate_names_the_source_and_the_key(plugin, key):
    config = NetworkConfig.from_dict({"cniVersion": "1.0.0", "name": "evil", "plugins": [
        {"type": "tuning"}, plugin]}, NAD)
    with pytest.raises(invoke.MetaPluginRefused) as e:
        policy.check_delegate(config, _conf(), tenant=True)
    assert e.value.msg.startswith(f"{NAD}: {key}: plugin type ")


def test_the_allowlist_binds_tenants_configs_only():
    conf = _conf(allowedPluginTypes=["macvlan", "host-local"])
    nad = NetworkConfig.from_dict({"cniVersion": "1.0.0", "name": "n", "type": "macvlan",
                                   "ipam": {"type": "dhcp"}}, NAD)
    assert policy.from_tenant(nad)
    with pytest.raises(ConfigError) as e:
        policy.check_delegate(nad, conf, tenant=True)
    assert e.value.msg.startswith(f"{NAD}: ipam.type: plugin type 'dhcp' is not in the node's "
                                  "allowedPluginTypes")
    admins = NetworkConfig.from_dict(nad.raw, "/etc/cni/net.d/10-x.conf")
    assert not policy.from_tenant(admins)
    policy.check_delegate(admins, conf, tenant=False)
    assert policy.from_tenant(admins, claim=object())


def test_a_plugin_not_found_is_left_to_its_exec(tmp_path):
    config = NetworkConfig.from_dict({"cniVersion": "1.0.0", "name": "n", "type": "nowhere"},
                                     NAD)
    policy.check_delegate(config, _conf(), True, invoke.ProcessExecutor(), (str(tmp_path),))


@pytest.mark.parametrize("value", [["a/b"], ["x", "x"], "macvlan", [""]])
def test_allowed_plugin_types_must_be_a_list_of_file_names(value):
    with pytest.raises(CniError) as e:
        _conf(allowedPluginTypes=value)
    assert e.value.code == 7 and "allowedPluginTypes" in e.value.msg


def test_allowed_plugin_types_unset_is_none():
    assert _conf().allowed_plugin_types is None
    assert _conf(allowedPluginTypes=[]).allowed_plugin_types == frozenset()


def test_a_host_path_is_seen_inside_the_chroot_root(tmp_path):
    """The thick daemon's readinessindicatorfile: looked up in the host's root, links
    resolved in it (a link to /run/x is <root>/run/x, not this container's /run/x)."""
    (tmp_path / "run" / "flannel").mkdir(parents=True)
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "run").symlink_to("/run")
    executor = chroot.ChrootExecutor(str(tmp_path))
    assert invoke.host_path(executor, "/var/run/flannel/subnet.env") == \
        str(tmp_path / "run" / "flannel" / "subnet.env")
    assert invoke.host_path(executor, "/nowhere/x") == str(tmp_path / "nowhere" / "x")
    assert invoke.host_path(invoke.ProcessExecutor(), "/var/run/x") == "/var/run/x"


def test_a_configmap_value_never_leaves_in_a_status_an_event_or_the_error(monkeypatch):
    """A child's error may quote its config; a value a claim's argument read from a
    ConfigMap is replaced by the ConfigMap's name in the claim's status, the pod's
    events and the runtime's error (claims.redact)."""
    from netattach.cni.errors import ChildError
    from netattach.commands import add
    from netattach.spec import claims
    monkeypatch.setattr(claims, "_REDACTED", {})
    monkeypatch.setitem(claims._REDACTED, "vlan-secret-42", "<ConfigMap ns/cm key master>")
    error = ChildError(999, "plugin type='macvlan' failed (add): Link not found: "
                       "vlan-secret-42", "master vlan-secret-42")
    out = add._redacted(error)
    assert "vlan-secret-42" not in out.msg + out.details and out.code == 999
    assert "Link not found: <ConfigMap ns/cm key master>" in out.msg
    ref = claims.ClaimRef("ns", "c", "uid", "req", claims.DRIVER, "pool", "dev")
    entry = claims.device_status(ref, "net1", None, error.msg, "2026-11-28T00:00:00Z")
    assert "vlan-secret-42" not in json.dumps(entry)
    assert add._redacted(ChildError(1, "no secret here")).msg == "no secret here"


def test_inside_a_root_the_meta_plugins_paths_are_resolved_again_after_a_second(tmp_path):
    """ChrootExecutor reuses the meta-plugins' paths it resolved for the same dirs for
    META_PATHS_SECONDS (they are the admin's files, resolved with hundreds of lstat calls
    a pod); a meta-plugin installed later is seen once that time has passed."""
    bin_dir = tmp_path / "opt" / "cni" / "bin"
    bin_dir.mkdir(parents=True)
    _executable(bin_dir / "macvlan")
    now = [100.0]
    executor = chroot.ChrootExecutor(str(tmp_path), clock=lambda: now[0])
    assert executor.find("macvlan", ["/opt/cni/bin"]) == "/opt/cni/bin/macvlan"
    shim = _executable(bin_dir / "netattach-shim")
    os.link(shim, bin_dir / "innocent")
    now[0] += executor.META_PATHS_SECONDS
    with pytest.raises(invoke.MetaPluginRefused):
        executor.find("innocent", ["/opt/cni/bin"])
    # other dirs are resolved on their own, and the kept lists stay bounded
    for i in range(executor.META_PATHS_KEPT * 2):
        executor.find("macvlan", ["/opt/cni/bin", f"/none{i}"])
    assert len(executor._meta) <= executor.META_PATHS_KEPT  # noqa: SLF001
