"""A chain that fails half way (issue 21): a NAD whose conflist is bridge + host-local
followed by a plugin that is missing, or that fails.

Before: the rollback's DEL of the conflist stopped at the later plugin (as libcni's
DelNetworkList stops at its first failure), that failure was logged as "ignored", and
the tombstone was written, so the bridge's interface and its host-local address leaked
behind a quiet runtime DEL. Now every plugin's DEL is attempted, in reverse, past the
failure; a tombstone is written only when nothing is left, and otherwise the state
stays and the runtime's DEL fails, naming the pod, the network, the plugin and the
cause, until it succeeds.

Both modes (the `mode` fixture): the runtime execs `netattach` (thin), or
`netattach-shim`, whose daemon runs the children (thick). Real plugins in a real netns
against the real kube-apiserver; the bridge runs through a recording wrapper
(testbed/netattach_testbed/faults.py, fault "none") so the test sees its ADD and DELs and the address
it was given. Nothing here depends on timing.
"""
from __future__ import annotations

import ipaddress
import json

import pytest

from netattach_testbed import faults
from netattach_testbed import netns as tb
from netattach_testbed import scenario as sc
from netattach_testbed.statefiles import tombstones

pytestmark = pytest.mark.e2e

CHAIN_SUBNET = "198.18.21.0/24"
ADD_FAILURE = "injected: the chained plugin fails its ADD"

# What "chain-fail" runs in place of a real plugin (faults.install's `real`): nothing on
# ADD (the wrapper then fails it with ADD_FAILURE); on DEL a CNI error while the switch
# file exists, success once it is gone. The switch is the test's, outside netattach.
DEL_SWITCH = """#!/bin/sh
cat > /dev/null
if [ "$CNI_COMMAND" = DEL ] && [ -e @switch@ ]; then
  printf '{"cniVersion":"1.0.0","code":111,"msg":"injected: DEL fails while %s exists"}\\n' @switch@
  exit 1
fi
exit 0
"""


def chain_scenario(make_scenario, admin_api, later: dict) -> tuple[sc.Scenario, faults.FaultPlugin]:
    """Scenario 1's pod selecting NAD `net-chain` only (net1), in the test's mode: the
    conflist [bridge + host-local (through the recording wrapper "chain-bridge"), `later`].
    Returns the scenario (its bridges["net-chain"] the host bridge) and the wrapper."""
    s = make_scenario(networks="net-chain")
    bridge = faults.install(s.bin_dir, "none", name="chain-bridge")
    s.bridges["net-chain"] = s.env.bridge_name()
    first = sc.bridge_conf(s.bridges["net-chain"], CHAIN_SUBNET, s.env.ipam_dir, name=None,
                           version="1.0.0", gateway=False)
    conflist = {"cniVersion": "1.0.0", "name": "net-chain",
                "plugins": [{**first, "type": bridge.name}, later]}
    sc.apply_nad(admin_api, sc.nad(s.namespace, "net-chain", conflist))
    return s, bridge


def error_of(run: sc.PluginRun, s: sc.Scenario) -> dict:
    """The one CNI error the runtime got: exit 1, one JSON object on stdout."""
    assert run.code == 1, run.stdout + s.log_text()
    err = run.doc
    assert set(err) <= {"cniVersion", "code", "msg", "details"}, err
    return err


def assert_rolled_back(s: sc.Scenario, bridge: faults.FaultPlugin) -> None:
    """The bridge's ADD had really attached net1 with an address of CHAIN_SUBNET, and the
    rollback's DEL ran past the later plugin and released both: no link in the pod but
    lo, no port left on the host bridge, no host-local allocation."""
    added = json.loads(bridge.result.read_text())
    assert ipaddress.ip_interface(added["ips"][0]["address"]) in ipaddress.ip_network(CHAIN_SUBNET)
    host_bridge = added["interfaces"][0]["name"]
    assert host_bridge == s.bridges["net-chain"] and "sandbox" not in added["interfaces"][0]
    assert bridge.invocations() == [("ADD", "net1"), ("DEL", "net1")]
    assert sc.pod_links(s) == ["lo"]
    assert [l["ifname"] for l in tb.links() if l.get("master") == host_bridge] == []
    assert s.env.ipam_allocations() == []


def test_a_missing_later_plugin_is_rolled_back_whole_and_the_del_is_quiet(
        admin_api, make_scenario, k8s_namespace):
    """[bridge + host-local, "nonexistent"]: the ADD fails with code 7 naming the pod, the
    network, the interface and the missing plugin; the rollback DELs the bridge past it
    (the missing plugin's ADD never ran, so its failing DEL leaves nothing), then writes
    the tombstone; the runtime's DEL is a quiet no-op that runs no child."""
    s, bridge = chain_scenario(make_scenario, admin_api, {"type": "nonexistent"})
    err = error_of(s.run("ADD"), s)
    assert err["code"] == 7, err
    assert err["msg"].startswith(
        f"pod {k8s_namespace}/{s.pod_name}: network {k8s_namespace}/net-chain (interface "
        "net1): plugin type='nonexistent' name='net-chain' failed (add): failed to find "
        "plugin 'nonexistent' in path ["), err
    assert "rollback" not in err.get("details", ""), err
    assert_rolled_back(s, bridge)
    assert s.env.state_files() == [] and tombstones(s.env.state_dir) == [s.container_id]
    assert (f"DEL of network {k8s_namespace}/net-chain (interface net1): plugin "
            "type='nonexistent' name='net-chain' failed (del): failed to find plugin "
            "'nonexistent'") in s.log_text()
    assert "ignored: its ADD never ran" in s.log_text()

    for attempt in ("DEL", "DEL again"):
        run = s.run("DEL")
        assert run.code == 0 and run.stdout == "", f"{attempt}: {run.stdout}{s.log_text()}"
        sc.assert_clean(s)
    assert bridge.invocations() == [("ADD", "net1"), ("DEL", "net1")]  # nothing was left


def test_a_failing_later_plugin_is_rolled_back_past_and_its_del_retried_until_it_succeeds(
        admin_api, make_scenario, k8s_namespace, tmp_path):
    """[bridge + host-local, "chain-fail"]: chain-fail fails its ADD, and its DEL
    otherwise (while the test's switch file exists), so it may hold something. The ADD
    fails with chain-fail's code and message, its details saying what the rollback left;
    the rollback DELs the bridge past chain-fail all the same (interface and address
    freed) and keeps the state, no tombstone. Each runtime DEL attempts every plugin
    again and fails with code 11 naming the pod, the network, the plugin and the cause,
    the state kept; once the switch is gone it succeeds and leaves nothing."""
    switch = tmp_path / "chain-fail-del-fails"
    switch.write_text("")
    real = tmp_path / "chain-fail-real"
    real.write_text(DEL_SWITCH.replace("@switch@", str(switch)))
    real.chmod(0o755)
    s, bridge = chain_scenario(make_scenario, admin_api, {"type": "chain-fail"})
    failing = faults.install(s.bin_dir, "fail", name="chain-fail", real=str(real),
                             message=ADD_FAILURE)
    where = f"pod {k8s_namespace}/{s.pod_name}: network {k8s_namespace}/net-chain (interface net1)"
    del_failure = (f"network {k8s_namespace}/net-chain (interface net1): plugin "
                   "type='chain-fail' name='net-chain' failed (del): injected: DEL fails "
                   f"while {switch} exists")

    err = error_of(s.run("ADD"), s)
    assert err["code"] == 110, err
    assert err["msg"] == f"{where}: plugin type='chain-fail' name='net-chain' failed (add): " \
                         f"{ADD_FAILURE}", err
    assert err["details"] == ("the rollback's DEL failed for 1 attachment(s), kept for the "
                              f"runtime's DEL to retry: {del_failure}"), err
    assert failing.invocations() == [("ADD", "net1"), ("DEL", "net1")]
    assert_rolled_back(s, bridge)
    assert s.env.state_files() == [f"{s.container_id}.json"]
    assert tombstones(s.env.state_dir) == []
    assert f"rollback: {del_failure}" in s.log_text()

    for retry in (1, 2):  # fails as long as the cause is there, every plugin attempted
        err = error_of(s.run("DEL"), s)
        assert err["code"] == 11, err
        assert err["msg"] == (f"pod {k8s_namespace}/{s.pod_name}: DEL failed for 1 "
                              f"attachment(s), kept for the next DEL to retry: {del_failure}"), err
        assert failing.invocations()[-1] == ("DEL", "net1")
        assert len(failing.invocations()) == 2 + retry
        assert len(bridge.invocations()) == 2 + retry
        assert s.env.state_files() == [f"{s.container_id}.json"]
        assert tombstones(s.env.state_dir) == []
        assert sc.pod_links(s) == ["lo"] and s.env.ipam_allocations() == []

    switch.unlink()  # the cause fixed
    run = s.run("DEL")
    assert run.code == 0 and run.stdout == "", run.stdout + s.log_text()
    sc.assert_clean(s)
    assert tombstones(s.env.state_dir) == [s.container_id]
    assert len(failing.invocations()) == 5 and len(bridge.invocations()) == 5
    run = s.run("DEL")  # the runtime's second DEL: the tombstone, no child
    assert run.code == 0 and run.stdout == "", run.stdout + s.log_text()
    assert len(failing.invocations()) == 5 and len(bridge.invocations()) == 5
    sc.assert_clean(s)


def test_a_chain_whose_failing_plugin_fails_its_del_as_its_add_does_not_strand_the_pod(
        admin_api, make_scenario, k8s_namespace):
    """[macvlan + host-local on a master that does not exist, tuning]: the real macvlan
    fails ADD and DEL alike ("Link not found", at its config, before host-local runs).
    That DEL failure leaves nothing of the ADD and is logged, not kept as an error,
    which would fail every runtime DEL of the sandbox forever: tombstone, quiet DEL."""
    s = make_scenario(networks="net-chain")
    conflist = {"cniVersion": "1.0.0", "name": "net-chain", "plugins": [
        {"type": "macvlan", "master": "nomaster0", "mode": "bridge",
         "ipam": {"type": "host-local", "subnet": CHAIN_SUBNET, "dataDir": str(s.env.ipam_dir)}},
        {"type": "tuning"}]}
    sc.apply_nad(admin_api, sc.nad(s.namespace, "net-chain", conflist))
    err = error_of(s.run("ADD"), s)
    assert err["msg"] == (f"pod {k8s_namespace}/{s.pod_name}: network {k8s_namespace}/"
                          "net-chain (interface net1): plugin type='macvlan' name='net-chain' "
                          "failed (add): Link not found"), err
    assert "rollback" not in err.get("details", ""), err
    assert ("plugin type='macvlan' name='net-chain' failed (del): Link not found; ignored: "
            "it fails as its ADD did") in s.log_text()
    sc.assert_clean(s)
    assert tombstones(s.env.state_dir) == [s.container_id]
    run = s.run("DEL")
    assert run.code == 0 and run.stdout == "", run.stdout + s.log_text()
    sc.assert_clean(s)
