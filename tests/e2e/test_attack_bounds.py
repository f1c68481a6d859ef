"""Issue 21, "Bounded work per pod", end to end: a pod whose
`k8s.v1.cni.cncf.io/networks` annotation selects more networks than netattach's caps
allow (`maxNetworksPerPod`, default 32; `maxSameNetworkPerPod`, default 4) is refused
with CNI code 7 before anything runs, in both modes, through the built artifact, a real
API server and real plugins in a real netns:
* the answer is one CNI error on stdout naming the pod, the annotation, the conf key
  and its value; a Warning InvalidNetworkSelection event on the pod says the same;
* nothing ran: no interface in the pod's netns (not even the cluster default
  network's eth0), no address allocated, no state file; the selected
  NetworkAttachmentDefinitions need not even exist (none is read);
* a pod exactly at a cap is attached whole, and the runtime's DEL frees it;
* hot-plug (thick mode) refuses an edit over a cap and changes nothing.
No assertion is about time: waits poll for their condition under a hang guard.
"""
from __future__ import annotations

import json

import pytest

from netattach_testbed import scenario as sc
from tests.e2e.test_faults_children import del_twice

ANNOTATION = "k8s.v1.cni.cncf.io/networks"


def distinct(n: int, json_form: bool) -> str:
    """n elements naming n different networks, none of which exists."""
    if json_form:
        return json.dumps([{"name": f"no-such-net-{i}"} for i in range(n)])
    return ",".join(f"no-such-net-{i}" for i in range(n))


def assert_refused(admin_api, s: sc.Scenario, run: sc.PluginRun, *texts: str) -> str:
    """The ADD answered one CNI error, code 7, naming the pod, the annotation and
    `texts` (the conf key=value); nothing of the pod exists on the node; a Warning
    InvalidNetworkSelection event with the same message is on the pod. Then the
    runtime's DEL (it sends one for a failed ADD) succeeds with nothing to do.
    Returns the message."""
    assert run.code == 1, run.stdout + s.log_text()
    doc = run.doc  # exactly one JSON document on stdout
    assert set(doc) <= {"cniVersion", "code", "msg", "details"} and doc["code"] == 7, doc
    msg = doc["msg"]
    assert msg.startswith(f"pod {s.namespace}/{s.pod_name}: {ANNOTATION} selects "), msg
    for text in texts:
        assert text in msg, (text, msg)
    assert sc.pod_links(s) == ["lo"]  # not even eth0: no child ran
    assert s.env.ipam_allocations() == []
    assert s.env.state_files() == []
    sc.writes_sent(s)  # thick mode sends its events after the answer
    warnings = [(t, r, m) for t, r, m in sc.pod_events(admin_api, s.namespace, s.pod_name)
                if t == "Warning"]
    assert warnings == [("Warning", "InvalidNetworkSelection", msg)], warnings
    run = s.run("DEL")
    assert (run.code, run.stdout) == (0, ""), run.stdout + s.log_text()
    sc.assert_clean(s)
    return msg


@pytest.mark.parametrize("json_form", [False, True], ids=["comma", "json"])
def test_over_the_default_network_cap_nothing_runs(admin_api, make_scenario, json_form):
    """33 elements, one over the default maxNetworksPerPod: refused before the cluster
    default network's child and before any NAD is read (none of them exists, so reading
    one would fail differently)."""
    s = make_scenario(networks=distinct(33, json_form))
    msg = assert_refused(admin_api, s, s.run("ADD"), "maxNetworksPerPod=32")
    assert "selects 33 networks; at most 32 are allowed per pod" in msg


def test_at_and_over_a_configured_network_cap(admin_api, make_scenario):
    """maxNetworksPerPod 3 in netattach's conf: a pod with 3 networks (net-a twice,
    other/net-b) is attached whole; a pod with 4 is refused naming the value set."""
    capped = {"maxNetworksPerPod": 3}
    s = make_scenario(networks="net-a,net-a@second,other/net-b@data0")
    s.netconf = {**s.netconf, **capped}
    run = s.run("ADD")
    assert run.code == 0, run.stdout + s.log_text()
    assert sc.pod_links(s) == ["data0", "eth0", "lo", "net1", "second"]
    assert len(s.env.ipam_allocations()) == 4
    del_twice(s)

    over = make_scenario(networks="net-a,net-a@second,other/net-b@data0,other/net-b")
    over.netconf = {**over.netconf, **capped}
    assert_refused(admin_api, over, over.run("ADD"), "maxNetworksPerPod=3",
                   "selects 4 networks")


@pytest.mark.parametrize("json_form", [False, True], ids=["comma", "json"])
def test_at_and_over_the_default_same_network_cap(admin_api, make_scenario, json_form):
    """net-a 4 times (the default maxSameNetworkPerPod) is attached as net1..net4; 5
    times is refused naming the network and the cap."""
    def selection(n: int) -> str:
        return json.dumps([{"name": "net-a"}] * n) if json_form else ",".join(["net-a"] * n)

    s = make_scenario(networks=selection(4))
    run = s.run("ADD")
    assert run.code == 0, run.stdout + s.log_text()
    assert sc.pod_links(s) == ["eth0", "lo", "net1", "net2", "net3", "net4"]
    del_twice(s)

    over = make_scenario(networks=selection(5))
    assert_refused(admin_api, over, over.run("ADD"), "maxSameNetworkPerPod=4",
                   f"selects network {over.namespace}/net-a 5 times")


@pytest.mark.parametrize("mode", ["thick"])
def test_hotplug_refuses_an_edit_over_a_cap(admin_api, make_scenario, mode):
    """Hot-plug takes the edited selection through the same caps: an edit to 33
    networks is refused with a Warning HotplugRefused event naming the cap, and the
    running pod keeps what it has."""
    from tests.e2e.test_hotplug_e2e import NET_A, add, hotplug, select, snapshot, wait_event
    s = hotplug(make_scenario(networks="net-a"))
    add(admin_api, s, NET_A)
    s.settle()
    before = snapshot(admin_api, s)
    select(admin_api, s, distinct(33, json_form=False))
    wait_event(admin_api, s, "Warning", "HotplugRefused", f"pod {s.namespace}/{s.pod_name}",
               ANNOTATION, "maxNetworksPerPod=32")
    s.settle()
    assert snapshot(admin_api, s) == before
    assert s.daemon.metric("netattach_hotplug_changes_total", result="added") == 0
    del_twice(s)
