"""Hot-plug (issue 13), on the real API server, real plugins and a real netns in thick
mode: the runtime ADDs a sandbox through `netattach-shim` with `"hotplug": true` in
netattach's netconf, then the test edits the running pod's
`k8s.v1.cni.cncf.io/networks` annotation, and the test's `netattach daemon` (the built
artifact) DELs the attachments no longer selected and ADDs the new ones in the pod's
netns, updates its network-status and records Events.

* a network added, then one removed: the interface and its address come and go, the
  rest of the pod is untouched, and the runtime's DEL frees exactly what remains;
* a hot-plug ADD whose child fails, crashes or hangs rolls back that attachment only;
* the daemon SIGKILLed between the DEL and the ADD of one change, then restarted (or
  left down): the interrupted step is undone, the annotation applied, and DEL frees all;
* 20 pods changed at once: each gets its change, nothing leaks;
* refused changes (the default network, an element's parameters in place, an element
  with default-route), a pod that opts out, a sandbox ADDed without `hotplug`: nothing
  changes;
* a network named before its NAD exists is attached once the NAD is created;
* an unnamed attachment keeps its generated name; edits made while the container's
  lock is held (a runtime call in progress) wait for it and are applied together.
No assertion is about time: every wait polls for its condition under a hang guard.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import signal
from concurrent.futures import ThreadPoolExecutor

import pytest

from netattach.node.statestore import StateStore
from netattach_testbed import faults
from netattach_testbed import netns as tb
from netattach_testbed import scenario as sc
from tests.e2e.test_concurrency import make_pods, run_all
from tests.e2e.test_faults_children import (
    FAULT_SUBNET,
    HANG_TIMEOUT,
    del_twice,
    saved_state,
    with_fault_network,
)

pytestmark = pytest.mark.e2e

WAIT = 120  # hang guard of every wait for the daemon (a change waits --hotplug-interval too)
DEFAULT = {"eth0": sc.SUBNETS["default"]}
NET_A = {**DEFAULT, "net1": sc.SUBNETS["net-a"]}
FULL = {**NET_A, "data0": sc.SUBNETS["net-b"]}


@pytest.fixture
def mode() -> str:
    """Hot-plug is the node daemon's: every test here is thick (conftest's make_scenario
    starts the daemon)."""
    return "thick"


def hotplug(s: sc.Scenario, on: bool = True) -> sc.Scenario:
    """`s` with `"hotplug": true` in netattach's netconf (the conflist entry the runtime
    passes on stdin); `on=False`: without the key, as every conf so far."""
    conf = {k: v for k, v in s.netconf.items() if k != "hotplug"}
    return dataclasses.replace(s, netconf={**conf, "hotplug": True} if on else conf)


def attached(admin_api, s: sc.Scenario) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(the pod's netns: link -> addresses, lo left out; its network-status: interface
    -> ips, {} while it has none)."""
    links = {k: v for k, v in tb.addresses_by_link(s.netns).items() if k != "lo"}
    status = sc.read_pod_annotations(admin_api, s.namespace, s.pod_name).get(sc.STATUS)
    return links, {e["interface"]: e["ips"] for e in json.loads(status or "[]")}


def wait_attached(admin_api, s: sc.Scenario, expected: dict[str, str]) -> dict[str, str]:
    """Until the pod's netns has exactly the interfaces of `expected` (ifname -> subnet)
    besides lo, each with one address, and its network-status lists exactly those, with
    those addresses, bare (the daemon sends it after the ADD or the change). Asserts each
    address is in its subnet; returns ifname -> address (CIDR, as on the link)."""
    def done() -> bool:
        links, status = attached(admin_api, s)
        return (sorted(links) == sorted(expected) and all(len(a) == 1 for a in links.values())
                and status == {k: tb.bare(v) for k, v in links.items()})
    faults.wait_for(f"pod {s.pod_name} to have {sorted(expected)} in its netns and status",
                    done, timeout=WAIT)
    got = {ifname: addrs[0] for ifname, addrs in attached(admin_api, s)[0].items()}
    for ifname, subnet in expected.items():
        assert sc.in_subnet(got[ifname], subnet), (s.pod_name, ifname, got[ifname])
    return got


def add(admin_api, s: sc.Scenario, expected: dict[str, str]) -> dict[str, str]:
    """The runtime's ADD, then wait_attached."""
    run = s.run("ADD")
    assert run.code == 0, run.stdout + s.log_text()
    return wait_attached(admin_api, s, expected)


def select(admin_api, s: sc.Scenario, networks: str) -> str:
    """Edit the running pod's selection to `networks`, as a user does; returns the pod's
    new resourceVersion."""
    return sc.patch_pod_annotations(admin_api, s.namespace, s.pod_name, {sc.NETWORKS: networks})


def wait_event(admin_api, s: sc.Scenario, type_: str, reason: str, *texts: str) -> str:
    """Until an Event `type_` `reason` whose message contains every one of `texts` is
    recorded on the pod; returns that message."""
    found: list[str] = []

    def recorded() -> bool:
        found[:] = [m for t, r, m in sc.pod_events(admin_api, s.namespace, s.pod_name)
                    if t == type_ and r == reason and all(x in m for x in texts)]
        return bool(found)
    faults.wait_for(f"a {type_} {reason} event on pod {s.pod_name} with {texts}", recorded,
                    timeout=WAIT)
    return found[0]


def reasons(admin_api, s: sc.Scenario) -> list[str]:
    return sorted(r for _, r, _ in sc.pod_events(admin_api, s.namespace, s.pod_name))


def allocated(s: sc.Scenario, subnet: str) -> list[str]:
    """The addresses host-local holds in `subnet` (its allocation files are named by
    address), sorted."""
    return sorted(p.name for p in s.env.ipam_allocations()
                  if ipaddress.ip_address(p.name) in ipaddress.ip_network(subnet))


def snapshot(admin_api, s: sc.Scenario) -> tuple:
    """All a hot-plug could change of one pod: its netns links and addresses, its
    network-status, host-local's allocations for its container (an allocation file
    holds the container ID, then the interface), the saved attachments."""
    mine = sorted((p.name, p.read_text()) for p in s.env.ipam_allocations()
                  if p.read_text().splitlines()[0].strip() == s.container_id)
    return attached(admin_api, s), mine, saved_state(s)["attachments"]


# ---------------------------------------------------------------- acceptance 1

def test_a_network_added_then_one_removed_on_a_running_pod(admin_api, make_scenario):
    """A running pod with net-a gets other/net-b@data0 when it is added to its
    annotation: data0 appears in its netns with an address of net-b's subnet, its
    network-status lists it, an AddedInterface event says so, and net1 and eth0 keep
    their addresses. Then net-a is removed from the annotation: net1 goes, host-local
    no longer holds its address, a RemovedInterface event says so, data0 stays as it
    was. The runtime's CHECK passes, and its DEL frees exactly what remains."""
    s = hotplug(make_scenario(networks="net-a"))
    before = add(admin_api, s, NET_A)

    select(admin_api, s, "net-a,other/net-b@data0")
    grown = wait_attached(admin_api, s, FULL)
    assert {k: grown[k] for k in before} == before
    wait_event(admin_api, s, "Normal", "AddedInterface",
               f"Add data0 {tb.bare([grown['data0']])} from other/net-b")
    assert allocated(s, sc.SUBNETS["net-b"]) == [grown["data0"].split("/")[0]]

    select(admin_api, s, "other/net-b@data0")
    final = wait_attached(admin_api, s, {**DEFAULT, "data0": sc.SUBNETS["net-b"]})
    assert final == {k: grown[k] for k in ("eth0", "data0")}
    assert allocated(s, sc.SUBNETS["net-a"]) == []  # net1's address is free
    wait_event(admin_api, s, "Normal", "RemovedInterface", f"Remove net1 from {s.namespace}/net-a")
    assert [a["ifname"] for a in saved_state(s)["attachments"]] == ["eth0", "data0"]
    assert len(s.env.ipam_allocations()) == 2
    run = s.run("CHECK")  # the runtime's CHECK agrees with what the pod has now
    assert run.code == 0 and run.stdout == "", run.stdout + s.log_text()
    del_twice(s)


def test_an_unnamed_attachment_keeps_its_generated_name(admin_api, make_scenario):
    """An element that names no interface keeps the name it got: net-a,other/net-b gives
    net1 and net2; net-a removed, net-b keeps net2 (a fresh ADD would call it net1,
    its address is the same); net-a added back after it gets the next free name, net3."""
    s = hotplug(make_scenario(networks="net-a,other/net-b"))
    first = add(admin_api, s, {**NET_A, "net2": sc.SUBNETS["net-b"]})
    select(admin_api, s, "other/net-b")
    assert wait_attached(admin_api, s, {**DEFAULT, "net2": sc.SUBNETS["net-b"]})[
        "net2"] == first["net2"]
    select(admin_api, s, "other/net-b,net-a")
    wait_attached(admin_api, s, {**DEFAULT, "net2": sc.SUBNETS["net-b"],
                                 "net3": sc.SUBNETS["net-a"]})
    del_twice(s)


# ---------------------------------------------------------------- acceptance 2

@pytest.mark.parametrize("fault, text", [
    ("fail", "injected: failed after the real bridge ADD"),
    ("segv", "was killed by SIGSEGV (11)"),
    ("hang", f"timed out after {HANG_TIMEOUT} seconds (ADD)"),
])
def test_a_failed_hot_plug_add_rolls_back_that_network_only(admin_api, make_scenario, fault,
                                                            text):
    """net-fault added to a running pod: its child really attaches (bridge + host-local),
    then fails / crashes / hangs past delegateTimeout. The daemon DELs that attachment
    only: the pod keeps eth0, net1 and data0 with their addresses, nothing of net-fault
    remains (no interface, no allocation, nothing in the state), network-status is
    unchanged, and a Warning ErrorAddingNetwork event names the network and carries the
    child's error. The runtime's DEL then frees the rest."""
    s = hotplug(make_scenario())
    plugin = with_fault_network(admin_api, s, fault,
                                message="injected: failed after the real bridge ADD")
    if fault == "hang":
        s.netconf["delegateTimeout"] = HANG_TIMEOUT
    add(admin_api, s, FULL)
    s.settle()
    before = snapshot(admin_api, s)

    select(admin_api, s, "net-a,other/net-b@data0,net-fault")
    wait_event(admin_api, s, "Warning", "ErrorAddingNetwork",
               f"{s.namespace}/net-fault (interface net3)", text)
    # its child ran and was undone: ADD then the rollback's DEL, as net3 (3rd element)
    assert plugin.invocations() == [("ADD", "net3"), ("DEL", "net3")]
    if fault == "hang":  # killed with its descendants, not left for HANG_SECONDS
        faults.wait_for("the hung plugin and its descendants to die",
                        lambda: not any(faults.alive(p) for p in plugin.recorded_pids()))
    s.settle()
    assert snapshot(admin_api, s) == before
    assert allocated(s, FAULT_SUBNET) == []
    assert reasons(admin_api, s).count("AddedInterface") == 3  # the runtime ADD's only
    del_twice(s)


# ---------------------------------------------------------------- acceptance 3

@pytest.mark.parametrize("then", ["restarted", "left-down"])
def test_daemon_killed_between_the_del_and_the_add_of_one_change(admin_api, make_scenario,
                                                                 then):
    """One edit replaces net-a by net-fault: the daemon DELs net1 (net-a), then runs
    net-fault's ADD, whose child attaches and blocks; the daemon is SIGKILLed there.
    The state file holds the ADD as begun, net-a no longer.
    restarted (the child now works): the new daemon undoes the interrupted ADD (its DEL
    frees the address) and applies the annotation anew: the pod ends with eth0 and
    net-fault's net1 as network-status says, and the runtime's DEL frees everything.
    left-down: the runtime's DEL, served by the shim in thin mode from the state file,
    frees everything, the begun ADD included."""
    s = hotplug(make_scenario(networks="net-a"))
    plugin = with_fault_network(admin_api, s, "hang")
    s.netconf["delegateTimeout"] = 3600  # the daemon is killed in the ADD, never times out
    add(admin_api, s, NET_A)

    select(admin_api, s, "net-fault")
    faults.wait_for("net-fault's hot-plug ADD to attach and block",
                    lambda: len(plugin.recorded_pids()) == 3, timeout=WAIT)
    s.daemon.kill()
    for pid in plugin.recorded_pids():  # the killed daemon's orphans: gone with a node's pod
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    faults.wait_for("the hung plugin's processes to die",
                    lambda: not any(faults.alive(p) for p in plugin.recorded_pids()))
    atts = saved_state(s)["attachments"]
    assert [(a["ifname"], a.get("change")) for a in atts] == [("eth0", None), ("net1", "add")]
    assert atts[1]["network"] == f"{s.namespace}/net-fault"
    assert allocated(s, sc.SUBNETS["net-a"]) == [] and len(allocated(s, FAULT_SUBNET)) == 1
    assert sc.pod_links(s) == ["eth0", "lo", "net1"]  # net-fault's, half-way

    if then == "restarted":
        faults.install(s.bin_dir, "none", name=plugin.name)  # the same type, working now
        s.daemon.launch()
        final = wait_attached(admin_api, s, {**DEFAULT, "net1": FAULT_SUBNET})
        assert allocated(s, FAULT_SUBNET) == [final["net1"].split("/")[0]]
        assert allocated(s, sc.SUBNETS["net-a"]) == []
        assert "was interrupted: undoing it" in s.daemon.log_text()
        assert plugin.invocations() == [("ADD", "net1"), ("DEL", "net1"), ("ADD", "net1")]
        status = sc.network_status(admin_api, s.namespace, s.pod_name)
        assert [e["name"] for e in status] == ["cluster-net", f"{s.namespace}/net-fault"]
        assert [(a["ifname"], a.get("change")) for a in saved_state(s)["attachments"]] == [
            ("eth0", None), ("net1", None)]
    del_twice(s)
    assert plugin.invocations()[-1] == ("DEL", "net1")


# ---------------------------------------------------------------- acceptance 4

def test_twenty_pods_changed_at_once(admin_api, make_scenario, host_env, k8s_namespace):
    """20 running pods with net-a, all edited at once: half add other/net-b@data0, half
    replace net-a by it. Each ends with exactly its interfaces and network-status,
    addresses are unique, and after the runtime's 20 DELs nothing is left."""
    pods = [(hotplug(s), n) for s, n in
            make_pods(make_scenario, admin_api, host_env, k8s_namespace, ["net-a"] * 20)]
    runs = run_all([(s, "ADD") for s, _ in pods])
    assert [r.code for r in runs] == [0] * 20, [r.stdout for r in runs if r.code]
    for s, _ in pods:
        wait_attached(admin_api, s, NET_A)

    wanted = ["net-a,other/net-b@data0" if i % 2 else "other/net-b@data0" for i in range(20)]
    with ThreadPoolExecutor(len(pods)) as pool:
        list(pool.map(lambda p: select(admin_api, p[0], p[1]), zip([s for s, _ in pods],
                                                                  wanted)))
    addresses = []
    for (s, _), networks in zip(pods, wanted):
        expected = FULL if "net-a" in networks else {**DEFAULT, "data0": sc.SUBNETS["net-b"]}
        addresses += wait_attached(admin_api, s, expected).values()
    assert len({ipaddress.ip_interface(a).ip for a in addresses}) == len(addresses) == 50
    assert len(host_env.ipam_allocations()) == 50

    runs = run_all([(s, "DEL") for s, _ in pods])
    assert [r.code for r in runs] == [0] * 20, [r.stdout for r in runs if r.code]
    assert all(sc.pod_links(s) == ["lo"] for s, _ in pods)
    assert host_env.ipam_allocations() == [] and host_env.state_files() == []
    daemon = pods[0][0].daemon
    assert daemon.metric("netattach_hotplug_changes_total", result="added") == 20
    assert daemon.metric("netattach_hotplug_changes_total", result="removed") == 10
    assert daemon.metric("netattach_hotplug_changes_total", result="failed") == 0


# ---------------------------------------------------------------- what is not changed

@pytest.mark.parametrize("networks, edit, texts", [
    ("net-a", {sc.DEFAULT_NETWORK: "net-a"}, (f"{sc.DEFAULT_NETWORK} changed",)),
    ('[{"name": "net-a"}]', {sc.NETWORKS: '[{"name": "net-a", "mac": "02:00:00:00:00:aa"}]'},
     ("/net-a (interface net1)", "its parameters changed (mac)")),
    ('[{"name": "net-a", "interface": "net1"}]',
     {sc.NETWORKS: '[{"name": "net-a", "interface": "net1", "ips": ["198.18.2.200/24"]}]'},
     ("/net-a (interface net1)", "its parameters changed (ips)")),
    ("net-a", {sc.NETWORKS: '[{"name": "net-a"}, {"name": "net-b", "namespace": "other", '
                            '"interface": "data0", "default-route": ["198.18.3.1"]}]'},
     ("network other/net-b", "default-route is chosen when the pod is created")),
], ids=["default-network", "mac", "ips", "default-route"])
def test_a_refused_change_changes_nothing(admin_api, make_scenario, networks, edit, texts):
    """A change with no safe CNI equivalent: the pod's default network, or the
    parameters of an element whose attachment is kept (same net, same interface, other
    mac or ips). The daemon records a Warning HotplugRefused event saying why, and
    changes nothing: interfaces, addresses, network-status, allocations, state."""
    s = hotplug(make_scenario(networks=networks))
    add(admin_api, s, NET_A)
    s.settle()
    before = snapshot(admin_api, s)
    sc.patch_pod_annotations(admin_api, s.namespace, s.pod_name, edit)
    wait_event(admin_api, s, "Warning", "HotplugRefused", *texts)
    s.settle()
    assert snapshot(admin_api, s) == before
    assert s.daemon.metric("netattach_hotplug_changes_total", result="refused") >= 1
    assert s.daemon.metric("netattach_hotplug_changes_total", result="added") == 0
    del_twice(s)


def test_a_network_named_before_its_nad_exists_is_attached_when_it_appears(
        admin_api, make_scenario):
    """The selection names a NetworkAttachmentDefinition not created yet: the hot-plug
    ADD fails (a Warning event says why) and the pod keeps what it has; once the NAD is
    created, the daemon's NAD watch makes it look at the pod again, and the network is
    attached without another edit."""
    from tests.e2e.test_thick_mode import late_nad
    s = hotplug(make_scenario(networks="net-a"))
    add(admin_api, s, NET_A)
    select(admin_api, s, "net-a,net-late@data0")
    wait_event(admin_api, s, "Warning", "ErrorAddingNetwork", f"{s.namespace}/net-late")
    assert sorted(attached(admin_api, s)[0]) == ["eth0", "net1"]
    late_nad(admin_api, s)
    wait_attached(admin_api, s, {**NET_A, "data0": "198.18.6.0/24"})
    wait_event(admin_api, s, "Normal", "AddedInterface", "data0", f"{s.namespace}/net-late")
    del_twice(s)


@pytest.mark.parametrize("case", ["opt-out", "no-hotplug-key"])
def test_a_pod_that_is_not_hot_plugged_keeps_its_interfaces(admin_api, make_scenario,
                                                           host_env, k8s_namespace, case):
    """opt-out: a pod annotated netattach.io/hotplug "false", ADDed with `hotplug`;
    no-hotplug-key: a sandbox ADDed without `hotplug`. Its selection is edited, then
    that of a second pod (ADDed later, with `hotplug`): once the second pod's change is
    applied, the daemon's one hot-plug worker, which takes pods in the order their
    changes are due, has looked at the first, and the first still has exactly what it
    was ADDed with. opt-out: removing the annotation opts the pod back in, and its
    selection is then applied."""
    [(subject, _), (witness, _)] = make_pods(make_scenario, admin_api, host_env,
                                             k8s_namespace, ["net-a", "net-a"])
    subject, witness = hotplug(subject, on=case == "opt-out"), hotplug(witness)
    if case == "opt-out":
        sc.patch_pod_annotations(admin_api, subject.namespace, subject.pod_name,
                                 {sc.HOTPLUG_OPT_OUT: "false"})
    add(admin_api, subject, NET_A)
    add(admin_api, witness, NET_A)
    subject.settle()
    before = snapshot(admin_api, subject)

    select(admin_api, subject, "net-a,other/net-b@data0")
    select(admin_api, witness, "net-a,other/net-b@data0")
    wait_attached(admin_api, witness, FULL)
    subject.settle()
    assert snapshot(admin_api, subject) == before
    assert reasons(admin_api, subject) == ["AddedInterface"] * 2  # the ADD's

    if case == "opt-out":
        sc.patch_pod_annotations(admin_api, subject.namespace, subject.pod_name,
                                 {sc.HOTPLUG_OPT_OUT: None})
        wait_attached(admin_api, subject, FULL)
    assert subject.run("DEL").code == 0, subject.log_text()  # the pods share host_env:
    del_twice(witness)  # clean once both are DELed


def test_edits_made_while_the_container_is_locked_are_applied_together(
        admin_api, make_scenario):
    """The test holds the container's lock, as a runtime call in progress does, and
    edits the selection twice: net-fault (a recording plugin) added, then replaced by
    other/net-b@data0. Hot-plug waits for the lock, then applies the annotation as it
    is by then: data0 is added, net-fault's plugin never ran."""
    s = hotplug(make_scenario(networks="net-a"))
    plugin = with_fault_network(admin_api, s, "none")
    add(admin_api, s, NET_A)
    with StateStore(str(s.env.state_dir)).lock(s.container_id):
        select(admin_api, s, "net-a,net-fault")
        version = select(admin_api, s, "net-a,other/net-b@data0")
        s.daemon.wait_cache_event("Pod", s.namespace, s.pod_name, "MODIFIED",
                                  resource_version=version)
        assert sc.pod_links(s) == ["eth0", "lo", "net1"]
    wait_attached(admin_api, s, FULL)
    assert plugin.invocations() == []
    del_twice(s)
