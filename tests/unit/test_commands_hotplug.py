"""Hot-plug's command (commands/hotplug.py) through the orchestrator's seams, without
root, an API server or a daemon: test_attach.py's fakes (an API seam that sends its
writes after the answer, as the node daemon's; an executor recording every child call),
the real state files in a temp dir. A sandbox is ADDed with `hotplug` by the real ADD,
then its pod's selection changes and `cmd_hotplug` applies the change.

The recovery matrix, in milliseconds: a change interrupted in its ADD or its DEL (the
daemon killed mid-child: the executor raises a BaseException there, as a SIGKILL stops
everything), a failed ADD whose undo fails, an undo that fails, a step in backoff, a
DEL of the sandbox before or during the look, the daemon restarted (its worker from the
saved state alone). Each row says which children ran (command, plugin, interface), what
the state holds after, and the Outcome; then the runtime's DEL releases exactly what
the state holds. The same changes run real plugins in tests/e2e/test_hotplug_e2e.py.
"""
from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from netattach.cni.errors import CniError
from netattach.commands.hotplug import OPT_OUT_ANNOTATION, Outcome, StepKey, cmd_hotplug
from netattach.commands.orchestrator import Orchestrator
from netattach.node import netnsinfo
from netattach.node.statestore import StateStore
from tests.unit.test_attach import CID, NS, POD, UID, AfterAnswerApi, Bed, FakeExecutor

NETWORKS = "k8s.v1.cni.cncf.io/networks"
STATUS = "k8s.v1.cni.cncf.io/network-status"
A = f"{NS}/net-a"  # fake-macvlan + fake-tuning, unnamed (net1 when it is the first element)
B = "other/net-b"  # fake-ptp, named data0


class Killed(BaseException):
    """The daemon SIGKILLed while a child runs: nothing after it runs, no handler."""


@dataclass
class Exe(FakeExecutor):
    """FakeExecutor, and: `kill` = {(command, type)}: that call raises Killed (recorded
    first); `hold` = {(command, type): Event}: that call waits for the event, after
    setting `entered`."""
    kill: set[tuple[str, str]] = field(default_factory=set)
    hold: dict[tuple[str, str], threading.Event] = field(default_factory=dict)
    entered: threading.Event = field(default_factory=threading.Event)

    def run(self, path: str, command: str, config: dict[str, Any], env: Any,
            timeout: float) -> dict[str, Any] | None:
        ptype = path.rsplit("/", 1)[1]
        if (command, ptype) in self.kill:
            self.calls.append((command, ptype, env.ifname, env.netns))
            raise Killed(f"{command} {ptype}")
        if (command, ptype) in self.hold:
            self.entered.set()
            assert self.hold[(command, ptype)].wait(30), "the test never released it"
        return super().run(path, command, config, env, timeout)


@dataclass
class HotplugBed(Bed):
    """test_attach's Bed with the node daemon's kind of API seam, `hotplug` on and a
    netns path that exists (a sandbox whose netns is gone is never changed)."""
    api: AfterAnswerApi = field(default_factory=AfterAnswerApi)
    exe: Exe = field(default_factory=Exe)
    environs: list[dict[str, str]] = field(default_factory=list)
    pod_reads: int = 0

    @property
    def netns(self) -> str:
        path = self.tmp / "netns"
        path.touch()
        return str(path)

    def attach(self, networks: str) -> None:
        """The runtime's ADD of the sandbox selecting `networks`; the fakes' records
        cleared."""
        self.api.networks = networks
        self.run("ADD", netns=self.netns, hotplug=True)
        self.clear()

    def clear(self) -> None:
        self.api.calls.clear()
        self.api.events.clear()
        self.api.patched.clear()
        self.exe.calls.clear()
        self.environs.clear()

    def pod(self, networks: str, **annotations: str) -> dict[str, Any]:
        """The pod as the daemon's watch cache has it, selecting `networks`."""
        return {"metadata": {"namespace": NS, "name": POD, "uid": UID,
                             "resourceVersion": "42",
                             "annotations": {NETWORKS: networks, **annotations}}}

    def pods(self, networks: str | None, **annotations: str
             ) -> Callable[[str, str], dict[str, Any] | None]:
        """The cache's lookup; None: the pod is not in it."""
        def get(namespace: str, name: str) -> dict[str, Any] | None:
            self.pod_reads += 1
            if networks is None or (namespace, name) != (NS, POD):
                return None
            return self.pod(networks, **annotations)
        return get

    def orchestrator(self, environ: dict[str, str]) -> Orchestrator:
        """The seams of one operation, as the daemon builds them (its API, executor,
        drop_writes), given the sandbox's ADD's CNI variables."""
        self.environs.append(environ)
        return Orchestrator(api=lambda conf: self.api, executor=self.exe,
                            clock=lambda: self.now[0], drop_writes=self.dropped.append)

    def look(self, networks: str | None, waiting: tuple[StepKey, ...] = (),
             **annotations: str) -> Outcome:
        """One look of the worker at the sandbox with its pod selecting `networks`."""
        return cmd_hotplug(self.orchestrator, self.store, CID,
                           self.pods(networks, **annotations), waiting)

    def children(self) -> list[tuple[str, str, str]]:
        return [(c, t, i) for c, t, i, _ in self.exe.calls]

    def saved(self) -> list[tuple[str, str, str | None, str]]:
        """(network, interface, change mark, how far: "up" with a result, "failed" its
        ADD failed, "begun" attempted without a result) of each saved attachment."""
        state = self.store.load(CID)
        assert state is not None
        return [(a.network, a.ifname, a.change,
                 "failed" if a.add_failed else "up" if a.result is not None else "begun")
                for a in state.attachments]


@pytest.fixture
def bed(tmp_path, monkeypatch):
    # the netns is a plain file: no MTU to read there
    monkeypatch.setattr(netnsinfo, "link_mtus", lambda netns, ifnames: {i: 1500 for i in ifnames})
    return HotplugBed(tmp_path)


# ---------------------------------------------------------------- how a state is reached

def _attached(b: HotplugBed) -> None:
    """Whole: eth0 and net-a as net1."""
    b.attach("net-a")


def _full(b: HotplugBed) -> None:
    """Whole: eth0, net-a as net1, net-b as data0."""
    b.attach("net-a,other/net-b@data0")


def _b_only(b: HotplugBed) -> None:
    """Whole: eth0, net-b as data0."""
    b.attach("other/net-b@data0")


def _killed(b: HotplugBed, networks: str, where: tuple[str, str]) -> None:
    """A look that selects `networks` and is killed in the child call `where`."""
    b.exe.kill = {where}
    with pytest.raises(Killed):
        b.look(networks)
    b.exe.kill = set()
    b.clear()


def _add_killed(b: HotplugBed) -> None:
    """net-b@data0 added to _attached's sandbox; the daemon killed in its child's ADD."""
    _attached(b)
    _killed(b, "net-a,other/net-b@data0", ("ADD", "fake-ptp"))
    assert b.saved()[-1] == (B, "data0", "add", "begun")


def _remove_killed(b: HotplugBed) -> None:
    """net-a removed from _full's sandbox; the daemon killed in the DEL of its
    conflist's first plugin (fake-tuning's DEL ran)."""
    _full(b)
    _killed(b, "other/net-b@data0", ("DEL", "fake-macvlan"))
    assert b.saved()[1] == (A, "net1", "remove", "up")


def _add_failed_undo_failed(b: HotplugBed) -> None:
    """net-a added to _b_only's sandbox: its second plugin's ADD fails, and the undo's
    DEL of its first plugin fails too."""
    _b_only(b)
    b.exe.fail = {("ADD", "fake-tuning"), ("DEL", "fake-macvlan")}
    outcome = b.look("other/net-b@data0,net-a")
    assert [(s.kind, s.ok) for s in outcome.steps] == [("add", False)]
    b.exe.fail = set()
    b.clear()


def _undo_failed(b: HotplugBed) -> None:
    """_add_killed, then a look whose undo's DEL fails."""
    _add_killed(b)
    b.exe.fail = {("DEL", "fake-ptp")}
    b.look("net-a,other/net-b@data0")
    b.exe.fail = set()
    b.clear()


def _deleted(b: HotplugBed) -> None:
    """The runtime's DEL ran before the look: a tombstone, no state."""
    _full(b)
    b.run("DEL", netns=b.netns)
    b.clear()


def _del_began(b: HotplugBed) -> None:
    """The runtime's DEL began and failed: the state is kept for its retry, without the
    hot-plug context (DEL drops it before any child runs)."""
    _full(b)
    b.exe.fail = {("DEL", "fake-bridge")}
    with pytest.raises(CniError):
        b.run("DEL", netns=b.netns)
    b.exe.fail = set()
    b.clear()


SETUP = {"attached": _attached, "full": _full, "b-only": _b_only, "add-killed": _add_killed,
         "remove-killed": _remove_killed, "add-failed-undo-failed": _add_failed_undo_failed,
         "undo-failed": _undo_failed, "deleted": _deleted, "del-began": _del_began}

ETH0 = ("cluster-net", "eth0", None, "up")
NET1 = (A, "net1", None, "up")
DATA0 = (B, "data0", None, "up")
A_DELS = [("DEL", "fake-tuning", "net1"), ("DEL", "fake-macvlan", "net1")]
A_ADDS = [("ADD", "fake-macvlan", "net1"), ("ADD", "fake-tuning", "net1")]
HELD = f"network {B}: interface data0 is still held by {B}, whose removal failed"


@dataclass
class Row:
    state: str                    # SETUP's key
    networks: str | None          # the pod's selection at the look (None: not in the cache)
    children: list[tuple[str, str, str]]   # (command, plugin type, CNI_IFNAME) in order
    saved: list[tuple[str, str, str | None, str]] | None   # HotplugBed.saved; None: no state
    steps: list[tuple[str, str, bool]]     # Outcome.steps: (kind, interface, ok)
    events: list[str] = field(default_factory=list)   # reasons: Outcome.events, status_events
    refused: list[str] | None = field(default_factory=list)
    deferred: list[StepKey] = field(default_factory=list)
    fail: set[tuple[str, str]] = field(default_factory=set)  # child calls failing at the look
    waiting: tuple[StepKey, ...] = ()
    gone: bool = False
    looked: bool = True           # Outcome.pod set
    annotations: dict[str, str] = field(default_factory=dict)


MATRIX = {
    # the changes themselves
    "add": Row("attached", "net-a,other/net-b@data0", [("ADD", "fake-ptp", "data0")],
               [ETH0, NET1, DATA0], [("add", "data0", True)], ["AddedInterface"]),
    "remove": Row("full", "other/net-b@data0", A_DELS, [ETH0, DATA0],
                  [("remove", "net1", True)], ["RemovedInterface"]),
    "add-fails": Row("attached", "net-a,other/net-b@data0",
                     [("ADD", "fake-ptp", "data0"), ("DEL", "fake-ptp", "data0")],
                     [ETH0, NET1], [("add", "data0", False)], ["ErrorAddingNetwork"],
                     fail={("ADD", "fake-ptp")}),
    "remove-fails": Row("full", "other/net-b@data0", A_DELS, [ETH0, NET1, DATA0],
                        [("remove", "net1", False)], ["ErrorRemovingNetwork"],
                        fail={("DEL", "fake-macvlan")}),
    # interrupted add: undone (its DEL), then the selection applied anew
    "interrupted-add": Row("add-killed", "net-a,other/net-b@data0",
                           [("DEL", "fake-ptp", "data0"), ("ADD", "fake-ptp", "data0")],
                           [ETH0, NET1, DATA0], [("undo", "data0", True), ("add", "data0", True)],
                           ["AddedInterface"]),
    "interrupted-add-withdrawn": Row("add-killed", "net-a", [("DEL", "fake-ptp", "data0")],
                                     [ETH0, NET1], [("undo", "data0", True)]),
    "interrupted-add-opted-out": Row("add-killed", "net-a,other/net-b@data0",
                                     [("DEL", "fake-ptp", "data0")], [ETH0, NET1],
                                     [("undo", "data0", True)], refused=None,
                                     annotations={OPT_OUT_ANNOTATION: "false"}),
    # interrupted remove: undone (its whole DEL again), the element added back if selected
    "interrupted-remove": Row("remove-killed", "other/net-b@data0", A_DELS, [ETH0, DATA0],
                              [("undo", "net1", True)]),
    "interrupted-remove-back": Row("remove-killed", "net-a,other/net-b@data0",
                                   A_DELS + A_ADDS, [ETH0, DATA0, NET1],
                                   [("undo", "net1", True), ("add", "net1", True)],
                                   ["AddedInterface"]),
    # failed undo: an interrupted step's undo fails: its mark stays, the name stays held
    "undo-fails": Row("add-killed", "net-a,other/net-b@data0", [("DEL", "fake-ptp", "data0")],
                      [ETH0, NET1, (B, "data0", "add", "begun")], [("undo", "data0", False)],
                      refused=[HELD], fail={("DEL", "fake-ptp")}),
    "undo-in-backoff": Row("undo-failed", "net-a,other/net-b@data0", [],
                           [ETH0, NET1, (B, "data0", "add", "begun")], [], refused=[HELD],
                           deferred=[("undo", B, "data0")], waiting=(("undo", B, "data0"),)),
    "undo-retried": Row("undo-failed", "net-a,other/net-b@data0",
                        [("DEL", "fake-ptp", "data0"), ("ADD", "fake-ptp", "data0")],
                        [ETH0, NET1, DATA0], [("undo", "data0", True), ("add", "data0", True)],
                        ["AddedInterface"]),
    # failed undo of a failed ADD: the attachment stays with its "add" mark, so the next
    # look undoes it again (an interrupted ADD), then adds the element anew
    "add-fails-undo-fails": Row("b-only", "other/net-b@data0,net-a",
                                [("ADD", "fake-macvlan", "net2"), ("ADD", "fake-tuning", "net2"),
                                 ("DEL", "fake-tuning", "net2"), ("DEL", "fake-macvlan", "net2")],
                                [ETH0, DATA0, (A, "net2", "add", "failed")],
                                [("add", "net2", False)], ["ErrorAddingNetwork"],
                                fail={("ADD", "fake-tuning"), ("DEL", "fake-macvlan")}),
    "add-fails-undo-fails-next-look": Row(
        "add-failed-undo-failed", "other/net-b@data0,net-a",
        [("DEL", "fake-tuning", "net2"), ("DEL", "fake-macvlan", "net2"),
         ("ADD", "fake-macvlan", "net2"), ("ADD", "fake-tuning", "net2")],
        [ETH0, DATA0, (A, "net2", None, "up")], [("undo", "net2", True), ("add", "net2", True)],
        ["AddedInterface"]),
    # a step in backoff is skipped, whatever the selection says
    "add-in-backoff": Row("attached", "net-a,other/net-b@data0", [], [ETH0, NET1], [],
                          deferred=[("add", B)], waiting=(("add", B),)),
    "remove-in-backoff": Row("full", "other/net-b@data0", [], [ETH0, NET1, DATA0], [],
                             deferred=[("remove", A, "net1")], waiting=(("remove", A, "net1"),)),
    # DEL racing: it ran first (the state gone), or began (the context dropped)
    "deleted": Row("deleted", "net-a", [], None, [], refused=None, gone=True, looked=False),
    "del-began": Row("del-began", "net-a", [], [ETH0, NET1, DATA0], [], refused=None,
                     looked=False),
    "pod-gone": Row("full", None, [], [ETH0, NET1, DATA0], [], refused=None, looked=False),
}


@pytest.mark.parametrize("row", MATRIX.values(), ids=MATRIX.keys())
def test_hotplug_recovery_matrix(bed, caplog, row):
    SETUP[row.state](bed)
    bed.exe.fail = set(row.fail)
    caplog.set_level(logging.DEBUG, logger="netattach")
    outcome = bed.look(row.networks, row.waiting, **row.annotations)
    assert outcome.error is None, outcome.error
    assert bed.children() == row.children
    assert (bed.saved() if row.saved is not None else None) == row.saved
    if row.saved is None:
        assert bed.files() == [f"{CID}.deleted"]
    assert [(s.kind, s.ifname, s.ok) for s in outcome.steps] == row.steps
    assert [r for _, r, _ in outcome.events + outcome.status_events] == row.events
    assert outcome.refused == row.refused
    assert outcome.deferred == row.deferred
    assert outcome.gone is row.gone
    assert (outcome.pod is not None) is row.looked
    assert outcome.retry is (bool(row.deferred) or any(not ok for _, _, ok in row.steps))
    # the command asks the API only for the NADs it adds, writes the network-status
    # only when it changed, and never posts an Event itself (the daemon does)
    assert {c[0] for c in bed.api.calls} <= {"GET nad", "PATCH pod status"}
    assert all(c[1].endswith(("/net-a", "/net-b")) for c in bed.api.calls if c[0] == "GET nad")
    if any(s.kind == "undo" for s in outcome.steps):
        assert "was interrupted: undoing it" in caplog.text
    if row.looked:  # the orchestrator of the sandbox's own ADD
        assert [(e["CNI_COMMAND"], e["CNI_CONTAINERID"], e["CNI_IFNAME"])
                for e in bed.environs] == [("ADD", CID, "eth0")]
        assert f"K8S_POD_UID={UID}" in bed.environs[0]["CNI_ARGS"]
    else:
        assert bed.environs == []
    # the network-status in line with the state: recorded pending, then PATCHed
    if row.saved is not None and row.state != "del-began":
        state = bed.store.load(CID)
        assert state.hotplug is not None
        up = [(n, i) for n, i, change, how in row.saved if change is None and how == "up"]
        recorded = [(e["name"], e["interface"]) for e in json.loads(state.hotplug.network_status)]
        assert recorded == up
        if bed.api.patched:
            assert bed.api.patched == [state.status_pending.annotations]
            assert json.loads(bed.api.patched[0][STATUS]) == json.loads(state.hotplug.network_status)
    # the runtime's DEL then releases exactly what the state holds
    if row.saved is not None:
        bed.exe.calls.clear()
        bed.exe.fail = set()
        bed.run("DEL", netns=bed.netns)
        assert sorted({i for c, _, i in bed.children() if c == "DEL"}) == \
            sorted({i for _, i, _, _ in row.saved})
        assert bed.files() == [f"{CID}.deleted"]


@pytest.mark.parametrize("conf, form", [({}, "{}"), ({"networkStatusIPFormat": "cidr"}, "{}/24")])
def test_a_hot_plugged_entry_has_its_ips_in_the_form_of_the_sandbox_conf(bed, conf, form):
    """The configuration the ADD saved says the form of a hot-plugged entry's `ips`
    (networkStatusIPFormat), as of the ADD's entries."""
    bed.api.networks = "net-a"
    bed.run("ADD", netns=bed.netns, hotplug=True, **conf)
    added = json.loads(bed.api.patched[0][STATUS])
    bed.clear()
    outcome = bed.look("net-a,other/net-b@data0")
    assert [(s.kind, s.ifname, s.ok) for s in outcome.steps] == [("add", "data0", True)]
    status = json.loads(bed.api.patched[0][STATUS])
    assert status[:2] == added
    # the fake plugins number their addresses by the ADDs they saw (bed.clear resets)
    assert [e["ips"] for e in status] == [[form.format(a)] for a in ("10.0.1.2", "10.0.2.2",
                                                                      "10.0.1.2")]


def test_a_del_holding_the_lock_makes_the_look_wait_then_find_the_sandbox_gone(bed):
    """The runtime's DEL holds the container's lock (spec §7.3) while its children run;
    a look that starts then waits for the lock, finds no state, runs no child and
    reports the sandbox gone, for the worker to forget."""
    _full(bed)
    release = threading.Event()
    bed.exe.hold = {("DEL", "fake-ptp"): release}
    errors: list[BaseException] = []

    def runtime_del() -> None:
        try:
            bed.run("DEL", netns=bed.netns)
        except BaseException as e:  # reported by the assertion below
            errors.append(e)

    deleting = threading.Thread(target=runtime_del)
    deleting.start()
    assert bed.exe.entered.wait(30)  # DEL is in its first child, holding the lock
    outcomes: list[Outcome] = []
    looking = threading.Thread(target=lambda: outcomes.append(
        bed.look("net-a,other/net-b@data0")))
    looking.start()
    release.set()
    deleting.join(30)
    looking.join(30)
    assert errors == [] and len(outcomes) == 1
    assert outcomes[0].gone and outcomes[0].steps == [] and outcomes[0].error is None
    assert bed.children() == [("DEL", "fake-ptp", "data0"), *A_DELS,
                              ("DEL", "fake-bridge", "eth0")]  # the DEL's only
    assert bed.files() == [f"{CID}.deleted"] and bed.environs == []


def _failing_save(monkeypatch, when: Callable[[Any, bool], bool]) -> None:
    """StateStore.save raising StateError (disk full) for the saves `when` picks."""
    from netattach.node.state import StateError
    real = StateStore.save

    def save(store: StateStore, state: Any, durable: bool = True) -> None:
        if when(state, durable):
            raise StateError("cannot write state file x: No space left on device")
        real(store, state, durable)

    monkeypatch.setattr(StateStore, "save", save)


def test_a_state_that_cannot_be_saved_stops_the_command_after_its_steps(bed, monkeypatch):
    """What stops the command (here the network-status cannot be recorded: its save is
    the one not fsync'ed) is Outcome.error, after the steps it ran, which the worker
    still acts on; nothing is PATCHed."""
    from netattach.node.state import StateError
    _attached(bed)
    _failing_save(monkeypatch, lambda state, durable: not durable)
    outcome = bed.look("net-a,other/net-b@data0")
    assert isinstance(outcome.error, StateError)
    assert [(s.kind, s.ifname, s.ok) for s in outcome.steps] == [("add", "data0", True)]
    assert bed.api.patched == [] and outcome.status_events == []


def test_a_mark_that_cannot_be_saved_fails_that_add_before_its_child(bed, monkeypatch):
    """add.attach_one's rule, as for the runtime's ADD: the attachment's mark is saved
    before its child runs; when it cannot be, its ADD fails there and is undone (its
    DEL; no plugin's ADD ran, so a failure of that DEL would be excused)."""
    _attached(bed)
    _failing_save(monkeypatch, lambda state, durable: any(a.change == "add"
                                                          for a in state.attachments))
    outcome = bed.look("net-a,other/net-b@data0")
    assert outcome.error is None
    assert bed.children() == [("DEL", "fake-ptp", "data0")]
    assert [(s.kind, s.ifname, s.ok) for s in outcome.steps] == [("add", "data0", False)]
    assert [r for _, r, m in outcome.events] == ["ErrorAddingNetwork"]
    assert "No space left on device" in outcome.events[0][2]
    assert bed.saved() == [ETH0, NET1]


# ---------------------------------------------------------------- the daemon restarted

class Pods:
    """The daemon's pod cache: synced, one pod."""

    def __init__(self, obj: dict[str, Any]) -> None:
        self.obj = obj
        self.synced = threading.Event()
        self.synced.set()
        self.reads: list[tuple[str, str]] = []

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads.append((namespace, name))
        return self.obj if (namespace, name) == (NS, POD) else None


def test_a_restarted_daemon_finishes_an_interrupted_change_from_the_saved_state_alone(bed):
    """The daemon killed in a hot-plug ADD; a new worker (nothing in memory: no backoff,
    no refusal reported) finds the sandbox by scanning --cni-dir, undoes the
    interrupted ADD and applies the selection anew, from the saved state and its pod
    cache only: the API is asked for the added element's NAD, nothing else is read;
    then it acts on the command's Outcome: metrics, Events through the API seam."""
    from netattach.daemon.hotplug import Hotplugger
    _add_killed(bed)
    pods = Pods(bed.pod("net-a,other/net-b@data0"))
    made: list[tuple[dict[str, str], Any]] = []

    def make_api(environ: dict[str, str], conf: Any) -> AfterAnswerApi:
        made.append((environ, conf))
        return bed.api

    w = Hotplugger(pods, str(bed.tmp / "state"), make_api, bed.dropped.append,  # type: ignore[arg-type]
                   interval=0.0, executor=bed.exe)
    w._scan()
    assert w._sandboxes == {(NS, POD): {CID: str(bed.tmp / "state")}} and w.queued() == 1
    w.reconcile(StateStore(str(bed.tmp / "state")), CID)
    assert bed.children() == [("DEL", "fake-ptp", "data0"), ("ADD", "fake-ptp", "data0")]
    assert bed.saved() == [ETH0, NET1, DATA0]
    assert [c[0] for c in bed.api.calls] == ["GET nad", "PATCH pod status", "POST event"]
    assert [r for r, _ in bed.api.events] == ["AddedInterface"]
    assert pods.reads == [(NS, POD)]
    assert [e["CNI_CONTAINERID"] for e, _ in made] == [CID]
    assert w.changes == {"added": 1, "removed": 0, "failed": 0, "refused": 0, "deferred": 0}
    assert len(w.backoff) == 0 and w._retry == {}


def test_the_worker_records_a_failed_step_and_reports_a_refusal_once(bed):
    """The worker acts on the Outcome: a failed ADD grows its step's backoff and queues
    the pod for its end; the next look skips it (deferred), and a standing refusal is
    one Event, not one per look."""
    from netattach.daemon.backoff import Backoff
    from netattach.daemon.hotplug import Hotplugger
    _attached(bed)
    pods = Pods(bed.pod("net-a,other/net-b@data0",
                        **{"v1.multus-cni.io/default-network": "other"}))
    now = [1000.0]
    w = Hotplugger(pods, str(bed.tmp / "state"), lambda environ, conf: bed.api,  # type: ignore[arg-type]
                   bed.dropped.append, interval=0.0, clock=lambda: now[0], executor=bed.exe,
                   backoff=Backoff(10.0, 40.0))
    bed.exe.fail = {("ADD", "fake-ptp")}
    store = StateStore(str(bed.tmp / "state"))
    w.reconcile(store, CID)
    assert bed.children() == [("ADD", "fake-ptp", "data0"), ("DEL", "fake-ptp", "data0")]
    assert w.backoff.due((CID, "add", B)) == 1010.0 and w._retry == {CID: 1010.0}
    assert [r for r, _ in bed.api.events] == ["ErrorAddingNetwork", "HotplugRefused"]
    bed.clear()
    now[0] = 1005.0
    w.reconcile(store, CID)  # within the backoff: nothing runs, nothing is reported again
    assert bed.children() == [] and bed.api.events == []
    assert w.changes == {"added": 0, "removed": 0, "failed": 1, "refused": 1, "deferred": 1}
    now[0] = 1010.0
    bed.exe.fail = set()
    w.reconcile(store, CID)
    assert bed.children() == [("ADD", "fake-ptp", "data0")]
    assert [r for r, _ in bed.api.events] == ["AddedInterface"]
    assert w.backoff.due((CID, "add", B)) is None and w.changes["added"] == 1
