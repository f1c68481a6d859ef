"""A tenant's attacks on the node (issue 21), each refused by the built artifact in thin
and thick mode against the real API server: the refusal names the pod, the object and
the key; a Warning event says it; nothing ran (no link in the pod's netns, no address,
no state) and nothing outside netattach's own dirs was touched (canary paths the
attacker's config names stay absent).

The attacker owns one namespace: they write NetworkAttachmentDefinitions there and
pods with annotations. Docs: docs/security.md."""
from __future__ import annotations

import dataclasses
import time
import uuid
from pathlib import Path

import pytest

from netattach_testbed import scenario as sc

DEFAULT_NETWORK = "v1.multus-cni.io/default-network"


def _nested(canary: Path, plugin_type: str = "netattach") -> dict:
    """A nested meta-plugin's config as an attacker writes it: its own paths, each a
    canary that must never appear."""
    return {"cniVersion": "1.0.0", "name": "evil", "type": plugin_type,
            "clusterNetwork": "/bin", "binDir": "/bin", "cniDir": str(canary / "cni"),
            "logFile": str(canary / "log"), "kubeconfig": str(canary / "kubeconfig"),
            "confDir": str(canary / "conf")}


def _attack(admin_api, make_scenario, k8s_namespace, tmp_path, nad_config: dict,
            annotations: dict[str, str], **conf) -> tuple[sc.Scenario, sc.PluginRun]:
    """NAD `evil` with `nad_config` in the attacker's namespace, a pod with `annotations`,
    its ADD (the conf's extra keys `conf`); returns (scenario, run)."""
    sc.apply_nad(admin_api, sc.nad(k8s_namespace, "evil", nad_config))
    base = make_scenario(networks=None)
    name = f"attacker-{uuid.uuid4().hex[:8]}"
    pod = sc.pod(k8s_namespace, name, None)
    pod["metadata"]["annotations"] = annotations
    uid = sc.create_pod(admin_api, pod)
    s = dataclasses.replace(base, pod_name=name, pod_uid=uid,
                            netconf={**base.netconf, **conf})
    return s, s.run("ADD")


def _assert_refused(admin_api, s: sc.Scenario, run: sc.PluginRun, canary: Path,
                    *fragments: str) -> None:
    assert run.code == 1, run.stdout + s.log_text()
    assert run.doc["code"] == 7, run.doc
    assert run.doc["msg"].startswith(f"pod {s.namespace}/{s.pod_name}: network "), run.doc
    for fragment in fragments:
        assert fragment in run.doc["msg"], run.doc
    assert not canary.exists() and list(canary.parent.iterdir()) == []
    sc.assert_clean(s)  # nothing ran: only lo, no address, no state
    deadline = time.monotonic() + 60  # thick mode records the event after answering
    while not [e for e in sc.pod_events(admin_api, s.namespace, s.pod_name)
               if e[:2] == ("Warning", "ErrorAddingNetwork") and run.doc["msg"] in e[2]]:
        assert time.monotonic() < deadline, sc.pod_events(admin_api, s.namespace, s.pod_name)
        time.sleep(0.1)
    assert s.run("DEL").code == 0
    sc.assert_clean(s)


@pytest.fixture
def canary(tmp_path) -> Path:
    """A path under an empty dir of the test's: nothing may create anything there."""
    d = tmp_path / "untouched"
    d.mkdir()
    return d / "canary"


@pytest.mark.parametrize("plugin_type", ["netattach", "netattach-shim", "multus"])
def test_a_nad_that_is_a_meta_plugin_is_refused(admin_api, make_scenario, k8s_namespace,
                                                tmp_path, canary, plugin_type):
    s, run = _attack(admin_api, make_scenario, k8s_namespace, tmp_path,
                     _nested(canary, plugin_type), {sc.NETWORKS: "evil"})
    _assert_refused(admin_api, s, run, canary,
                    f"NetworkAttachmentDefinition {k8s_namespace}/evil: type: plugin type "
                    f"{plugin_type!r} is a delegating meta-plugin")


def test_the_default_network_annotation_cannot_name_a_meta_plugin(
        admin_api, make_scenario, k8s_namespace, tmp_path, canary):
    """The path where the own-type check was missing in thin mode."""
    s, run = _attack(admin_api, make_scenario, k8s_namespace, tmp_path, _nested(canary),
                     {DEFAULT_NETWORK: f"{k8s_namespace}/evil"})
    _assert_refused(admin_api, s, run, canary, f"{k8s_namespace}/evil",
                    "type: plugin type 'netattach' is a delegating meta-plugin")


def test_a_link_to_netattach_under_another_name_is_refused(
        admin_api, make_scenario, k8s_namespace, tmp_path, canary, host_env):
    """A name in the plugin dirs that is netattach's file (here a symlink; a hard link
    is refused the same way, tests/unit/test_spec_policy.py)."""
    bin_dir = sc.install_bin_dir(host_env)
    (bin_dir / "innocent").symlink_to(bin_dir / "netattach")
    s, run = _attack(admin_api, make_scenario, k8s_namespace, tmp_path,
                     {**_nested(canary), "type": "innocent"}, {sc.NETWORKS: "evil"})
    _assert_refused(admin_api, s, run, canary, "type: plugin type 'innocent' is the same "
                    f"file as {bin_dir}/")


@pytest.mark.parametrize("where", ["ipam", "delegate"])
def test_a_meta_plugin_nested_in_a_plugin_is_refused(admin_api, make_scenario, k8s_namespace,
                                                     tmp_path, canary, where):
    """A plugin execs its IPAM plugin (and flannel its `delegate`) by type: those may not
    be a meta-plugin either."""
    config = {"cniVersion": "1.0.0", "name": "evil", "plugins": [
        {"type": "bridge", "bridge": "natevil0", where: _nested(canary)}]}
    s, run = _attack(admin_api, make_scenario, k8s_namespace, tmp_path, config,
                     {sc.NETWORKS: "evil"})
    _assert_refused(admin_api, s, run, canary,
                    f"plugins[0].{where}.type: plugin type 'netattach' is a delegating "
                    "meta-plugin")


def test_allowed_plugin_types_bind_the_nads_not_the_cluster_default_network(
        admin_api, make_scenario, k8s_namespace, tmp_path, canary, host_env):
    """The node admin's allowlist: the NAD's ipvlan is refused, the cluster default
    network (the admin's bridge) is not bound by it; a NAD within it works."""
    allowed = ["macvlan", "host-local", "tuning"]
    config = {"cniVersion": "1.0.0", "name": "evil", "type": "ipvlan", "master": "lo",
              "ipam": {"type": "host-local", "subnet": "198.18.9.0/24",
                       "dataDir": str(host_env.ipam_dir)}}
    s, run = _attack(admin_api, make_scenario, k8s_namespace, tmp_path, config,
                     {sc.NETWORKS: "evil,net-a"}, allowedPluginTypes=allowed)
    _assert_refused(admin_api, s, run, canary, f"{k8s_namespace}/evil",
                    "type: plugin type 'ipvlan' is not in the node's allowedPluginTypes "
                    "(host-local, macvlan, tuning)")
    ok = dataclasses.replace(s, container_id=uuid.uuid4().hex * 2)
    pod = sc.pod(k8s_namespace, f"ok-{uuid.uuid4().hex[:8]}", "net-a")
    ok = dataclasses.replace(ok, pod_name=pod["metadata"]["name"],
                             pod_uid=sc.create_pod(admin_api, pod))
    run = ok.run("ADD")
    assert run.code == 0, run.stdout + ok.log_text()
    assert sorted(sc.pod_links(ok)) == ["eth0", "lo", "net1"]
    assert ok.run("DEL").code == 0
    sc.assert_clean(ok)
