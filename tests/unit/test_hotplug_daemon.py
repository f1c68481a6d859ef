"""The node daemon's hot-plug worker (daemon/hotplug.py), its pure parts: which pod
changes wake it, the per-pod rate limit that coalesces edits, and the network-status a
change leaves (kept entries in order, removed ones dropped, new ones appended). The
change itself runs real plugins in a real netns: tests/e2e/test_hotplug_e2e.py."""
from __future__ import annotations

import json
import threading
import time

from netattach.daemon import hotplug as hp
from netattach.state import HotplugContext, PodRef, SavedAttachment, SavedState
from netattach.status import encode_status


class Pods:
    """The pod cache as the worker reads it: synced, no pods."""

    def __init__(self) -> None:
        self.synced = threading.Event()
        self.synced.set()

    def get(self, namespace: str, name: str) -> None:
        return None


def pod(networks: str | None, **more: str) -> dict:
    annotations = dict(more)
    if networks is not None:
        annotations[hp.NETWORKS_ANNOTATION] = networks
    return {"metadata": {"namespace": "ns", "name": "p", "annotations": annotations}}


def worker(interval: float, tmp_path) -> tuple[hp.Hotplugger, list]:
    w = hp.Hotplugger(Pods(), str(tmp_path), make_api=None, drop_writes=None,  # type: ignore[arg-type]
                      interval=interval)
    calls: list = []
    w.reconcile = lambda store, cid: calls.append(cid)  # type: ignore[method-assign]
    return w, calls


def wait(predicate, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_only_a_tracked_pod_whose_watched_annotations_changed_wakes_it(tmp_path):
    w, _ = worker(60.0, tmp_path)
    woken: list = []
    w.notify = woken.append  # type: ignore[method-assign]
    w.pod_changed(pod("a"), pod("a,b"))  # not tracked: nothing
    assert woken == []
    with w.lock:
        w._sandboxes[("ns", "p")] = {"c1": str(tmp_path)}
    w.pod_changed(pod("a"), pod("a", other="x"))  # another annotation: nothing
    w.pod_changed(pod("a"), None)  # deleted: its DEL comes
    assert woken == []
    w.pod_changed(pod("a"), pod("a,b"))
    w.pod_changed(pod("a"), pod("a", **{hp.OPT_OUT_ANNOTATION: "false"}))
    w.pod_changed(pod("a"), pod("a", **{hp.DEFAULT_NETWORK_ANNOTATION: "x"}))
    w.pod_changed(None, pod("a"))  # first seen (a LIST): looked at
    assert woken == [("ns", "p")] * 4


def test_a_new_nad_wakes_every_tracked_pod_and_a_gone_sandbox_is_forgotten(tmp_path):
    """A NAD created (not changed, not deleted) may be one a failed hot-plug ADD could
    not find: every tracked pod is looked at again. A sandbox whose state is gone (GC
    DELed it) is forgotten at its next look, with its pod's bookkeeping."""
    from netattach.state import StateStore
    w, _ = worker(60.0, tmp_path)
    woken: list = []
    real_notify = w.notify
    w.notify = woken.append  # type: ignore[method-assign]
    w.track(str(tmp_path), "c1", ("ns", "p"))
    w.track(str(tmp_path), "c2", ("ns", "q"))
    woken.clear()
    w.nad_changed({"metadata": {}}, {"metadata": {}})  # changed: nothing
    w.nad_changed({"metadata": {}}, None)  # deleted: nothing
    assert woken == []
    w.nad_changed(None, {"metadata": {"namespace": "ns", "name": "n"}})
    assert sorted(woken) == [("ns", "p"), ("ns", "q")]
    w.notify = real_notify  # type: ignore[method-assign]
    with w.lock:
        w._last[("ns", "p")] = 1.0
    hp.Hotplugger.reconcile(w, StateStore(str(tmp_path)), "c1")  # no state file: gone
    with w.lock:
        assert ("ns", "p") not in w._sandboxes and ("ns", "p") not in w._last
        assert w._sandboxes == {("ns", "q"): {"c2": str(tmp_path)}}


def test_edits_within_the_interval_are_coalesced_into_one_later_change(tmp_path):
    """The first change of a pod runs at once; the edits that follow within the interval
    wait in one queued entry, due when the interval since that change ends."""
    w, calls = worker(3600.0, tmp_path)
    w.track(str(tmp_path), "c1", ("ns", "p"))  # looked at once, at once
    w.start()
    try:
        wait(lambda: calls == ["c1"], "the first change")
        for _ in range(5):
            w.notify(("ns", "p"))
        with w.lock:
            assert len(w._due) == 1 and w._queued == {("ns", "p")}
            assert w._due[0][0] >= w._last[("ns", "p")] + 3600.0
        assert calls == ["c1"]
        w.untrack("c1")
        with w.lock:
            assert w._sandboxes == {}
    finally:
        w.stop()


def test_a_refusal_is_reported_once_while_it_stands(tmp_path):
    """The same refused change seen at every look at the pod: one Warning event and one
    count; once it no longer stands it is forgotten, and reported if it comes back."""
    w, _ = worker(60.0, tmp_path)
    events: list = []

    def report(*reasons: str) -> None:
        w._refuse("c1", list(reasons), "ns/p", lambda *e: events.append(e))

    report("default-network changed")
    report("default-network changed")
    assert events == [("Warning", "HotplugRefused", "default-network changed")]
    report("default-network changed", "ips of ns/a changed")
    assert len(events) == 2 and w.changes["refused"] == 2
    report()
    report("default-network changed")
    assert len(events) == 3 and events[-1][2] == "default-network changed"


def entry(name: str, ifname: str, ip: str, default: bool = False) -> dict:
    return {"name": name, "interface": ifname, "ips": [ip], "mac": "02:00:00:00:00:01",
            "default": default}


def att(network: str, ifname: str, ip: str | None, *, element: bool = True,
        default: bool = False, change: str | None = None) -> SavedAttachment:
    result = None if ip is None else {
        "cniVersion": "1.0.0", "interfaces": [{"name": ifname, "mac": "02:00:00:00:00:02",
                                               "sandbox": "/var/run/netns/gone"}],
        "ips": [{"address": ip, "interface": 0}]}
    return SavedAttachment(network=network, ifname=ifname, config={"type": "bridge"},
                           default=default, attempted=True, result=result, change=change,
                           selection={"requested": True, "params": {}} if element else None)


def test_network_status_keeps_the_entries_it_had_drops_the_removed_appends_the_new():
    """The ADD's entries (with what only it knew, e.g. default-route) stay as they were
    for the attachments kept; a removed attachment's entry goes; a hot-plugged one is
    appended; a step still in progress (change) gets none. Nothing recorded: None."""
    recorded = [dict(entry("cluster-net", "eth0", "10.0.0.2/24", True), **{
        "default-route": ["10.0.0.1"]}), entry("ns/net-a", "net1", "10.1.0.2/24"),
        entry("other/net-b", "data0", "10.2.0.2/24")]
    state = SavedState(
        container_id="c1", netns="/var/run/netns/gone", ifname="eth0", pod=PodRef("ns", "p"),
        attachments=[att("cluster-net", "eth0", "10.0.0.2/24", element=False, default=True),
                     att("other/net-b", "data0", "10.2.0.2/24"),
                     att("ns/net-c", "net3", "10.3.0.2/24"),
                     att("ns/net-d", "net4", None, change="add")],
        hotplug=HotplugContext({}, "", "", encode_status(recorded)))
    entries = json.loads(hp._synced_status(state))
    assert [(e["name"], e["interface"]) for e in entries] == [
        ("cluster-net", "eth0"), ("other/net-b", "data0"), ("ns/net-c", "net3")]
    assert entries[0] == recorded[0] and entries[1] == recorded[2]
    assert entries[2]["ips"] == ["10.3.0.2/24"] and entries[2]["default"] is False
    # net-c as net3 removed, then added again before the status was sent: its recorded
    # entry is the old attachment's, and is made anew
    state.hotplug = HotplugContext({}, "", "", encode_status(
        recorded + [entry("ns/net-c", "net3", "10.3.0.99/24")]))
    entries = json.loads(hp._synced_status(state, {("ns/net-c", "net3")}))
    assert [e["ips"] for e in entries if e["name"] == "ns/net-c"] == [["10.3.0.2/24"]]
    state.hotplug = HotplugContext({}, "", "", "")
    assert hp._synced_status(state) is None
