"""The node daemon's hot-plug worker (daemon/hotplug.py), its pure parts: which pod
changes wake it, the per-pod rate limit that coalesces edits, the backoff of failed
steps, and the network-status a change leaves (kept entries in order, removed ones
dropped, new ones appended; commands/hotplug.py). The change itself, the command, is
table-tested with fakes in tests/unit/test_commands_hotplug.py, and runs real plugins in
a real netns in tests/e2e/test_hotplug_e2e.py."""
from __future__ import annotations

import json
import threading
import time

from netattach.commands.hotplug import synced_status
from netattach.daemon import hotplug as hp
from netattach.node.state import HotplugContext, SavedAttachment, SavedState
from netattach.spec.pod import PodRef
from netattach.spec.status import encode_status


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


def test_a_gone_sandbox_is_forgotten_with_its_pods_bookkeeping(tmp_path):
    """A sandbox whose state is gone (GC DELed it) is forgotten at its next look, with its
    pod's bookkeeping and its steps' backoff. A NAD event wakes nothing (issue 21: a
    failed step waits for its backoff, not for the next NAD event): the NAD cache has
    no hot-plug listener."""
    from netattach.node.statestore import StateStore
    w, _ = worker(60.0, tmp_path)
    assert not hasattr(w, "nad_changed")
    w.track(str(tmp_path), "c1", ("ns", "p"))
    w.track(str(tmp_path), "c2", ("ns", "q"))
    with w.lock:
        w._last[("ns", "p")] = 1.0
        w.backoff.failed(("c1", "add", "ns/a"), 0.0)
        w.backoff.failed(("c2", "add", "ns/a"), 0.0)
    hp.Hotplugger.reconcile(w, StateStore(str(tmp_path)), "c1")  # no state file: gone
    with w.lock:
        assert ("ns", "p") not in w._sandboxes and ("ns", "p") not in w._last
        assert w._sandboxes == {("ns", "q"): {"c2": str(tmp_path)}}
        assert w.backoff.due(("c1", "add", "ns/a")) is None
        assert w.backoff.due(("c2", "add", "ns/a")) is not None


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
            assert len(w._due) == 1 and list(w._queued) == [("ns", "p")]
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
    entries = json.loads(synced_status(state))
    assert [(e["name"], e["interface"]) for e in entries] == [
        ("cluster-net", "eth0"), ("other/net-b", "data0"), ("ns/net-c", "net3")]
    assert entries[0] == recorded[0] and entries[1] == recorded[2]
    assert entries[2]["ips"] == ["10.3.0.2"] and entries[2]["default"] is False
    # the recorded entries as they were (an ADD's of the CIDR form, or of a release that
    # wrote it), the new one in the form the sandbox's configuration says
    cidr = json.loads(synced_status(state, cidr=True))
    assert cidr[:2] == entries[:2] and cidr[2]["ips"] == ["10.3.0.2/24"]
    # net-c as net3 removed, then added again before the status was sent: its recorded
    # entry is the old attachment's, and is made anew
    state.hotplug = HotplugContext({}, "", "", encode_status(
        recorded + [entry("ns/net-c", "net3", "10.3.0.99/24")]))
    entries = json.loads(synced_status(state, {("ns/net-c", "net3")}))
    assert [e["ips"] for e in entries if e["name"] == "ns/net-c"] == [["10.3.0.2"]]
    state.hotplug = HotplugContext({}, "", "", "")
    assert synced_status(state) is None


# ---------------------------------------------------------------- bounded work (issue 21)

class Clock:
    """The worker's clock, moved by the test (monotonic seconds)."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_the_queue_holds_one_entry_per_pod_however_many_edits():
    """10 000 wake-ups of 50 pods (edits, backoff ends) leave 50 entries: a pod already
    queued keeps its one entry, moved earlier by an earlier wake-up, never later."""
    clock = Clock()
    w = hp.Hotplugger(Pods(), "/nonexistent", make_api=None, drop_writes=None,  # type: ignore[arg-type]
                      interval=2.0, clock=clock)
    pods = [("ns", f"p{i}") for i in range(50)]
    for n in range(10_000):
        w.notify(pods[n % 50], at=clock.now + 100 - n % 7)
    assert w.queued() == 50 and len(w._queued) == 50
    with w.lock:
        assert sorted(w._due) == sorted((due, pod) for pod, due in w._queued.items())
        assert w._queued[("ns", "p0")] == clock.now + 100 - 6  # the earliest asked for
    w.notify(("ns", "p0"))  # an edit: as soon as the rate limit allows, i.e. now
    w.notify(("ns", "p0"), at=clock.now + 500)  # later: the earlier entry stays
    with w.lock:
        assert w._queued[("ns", "p0")] == clock.now and w._due[0] == (clock.now, ("ns", "p0"))
    assert w.queued() == 50


def test_a_failed_step_waits_for_its_backoff_whatever_the_edits():
    """An element whose ADD failed is skipped (deferred) at every look until its backoff
    ends, then tried once; each failure in a row doubles the wait up to the cap; the
    container is due again when its backoff ends; a success forgets it. 20 looks (one
    per edit) over 19 s of a standing failure: 2 tries (at 0 s and 10 s), not 20."""
    from netattach.daemon.backoff import Backoff
    clock = Clock()
    w = hp.Hotplugger(Pods(), "/nonexistent", make_api=None, drop_writes=None,  # type: ignore[arg-type]
                      interval=1.0, clock=clock, backoff=Backoff(10.0, 40.0))
    key = ("c1", "add", "ns/net-fault")
    start, tries = clock.now, []
    for _ in range(20):  # one look per edit, a second apart
        if key[1:] in w._waiting("c1"):
            w._defer("c1", key)  # the command skipped it
        else:
            tries.append(clock.now - start)
            w._outcome("c1", key, False)
        clock.now += 1.0
    assert tries == [0.0, 10.0]
    assert w.changes["deferred"] == 18
    assert w.backoff.due(key) == start + 10.0 + 20.0  # the 2nd failure waits twice as long
    assert w._retry["c1"] == start + 10.0  # the earliest end seen since the last look
    waits = []
    for _ in range(5):
        clock.now = w.backoff.due(key)
        assert key[1:] not in w._waiting("c1")
        w._outcome("c1", key, False)
        waits.append(w.backoff.due(key) - clock.now)
    assert waits == [40.0] * 5  # capped
    w._outcome("c1", key, True)
    assert w.backoff.due(key) is None and w._waiting("c1") == set()


def test_the_pod_is_looked_at_again_when_a_backoff_ends(tmp_path):
    """A look whose step failed queues the pod for the end of that step's backoff, with
    no edit; untracking the sandbox forgets its backoff."""
    from netattach.daemon.backoff import Backoff
    w = hp.Hotplugger(Pods(), str(tmp_path), make_api=None, drop_writes=None,  # type: ignore[arg-type]
                      interval=0.0, backoff=Backoff(3600.0, 7200.0))
    looks: list = []

    def look(store, cid) -> None:
        looks.append(cid)
        w._outcome(cid, (cid, "add", "ns/a"), False)
    w.reconcile = look  # type: ignore[method-assign]
    w.track(str(tmp_path), "c1", ("ns", "p"))
    w.start()
    try:
        wait(lambda: looks and w._queued.get(("ns", "p"), 0) > time.monotonic() + 3000,
             "the pod queued for its backoff's end")
        with w.lock:
            due = w._queued[("ns", "p")]
            assert due == w.backoff.due(("c1", "add", "ns/a")) and due > time.monotonic() + 3000
        assert looks == ["c1"]
    finally:
        w.stop()
    w.untrack("c1")
    assert len(w.backoff) == 0


def test_backoff_rule():
    """client-go's flowcontrol.Backoff: initial, doubling to the cap; idle for twice the
    cap starts again at initial, and gc drops it; reset forgets."""
    import pytest

    from netattach.daemon.backoff import Backoff
    b = Backoff(10.0, 300.0)
    assert not b.waiting("k", 0.0) and b.due("k") is None
    assert [b.failed("k", t) for t in (0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0)] == \
        [10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0]
    assert b.waiting("k", 305.9) and not b.waiting("k", 306.0) and b.due("k") == 306.0
    assert b.failed("k", 6.0 + 601.0) == 10.0  # idle for more than 2 x 300 s
    b.gc(607.0 + 600.0)
    assert len(b) == 1
    b.gc(607.0 + 601.0)
    assert len(b) == 0
    b.failed(("c1", "add", "x"), 0.0)
    b.failed(("c2", "add", "x"), 0.0)
    b.forget("c1")
    assert b.due(("c1", "add", "x")) is None and b.due(("c2", "add", "x")) == 10.0
    b.reset(("c2", "add", "x"))
    assert len(b) == 0
    with pytest.raises(ValueError):
        Backoff(10.0, 5.0)
