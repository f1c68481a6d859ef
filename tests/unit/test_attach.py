"""The orchestrator through its seams, without root or an API server: a fake API (up,
down, or answering that the pod is gone), a fake executor recording every child call,
the real state files in a temp dir and a settable clock. ADD rollback and the whole DEL
recovery matrix (state whole / damaged / missing / pending / tombstone / marker x API up /
down / pod gone x retry window), in milliseconds. The real-component tests (tests/e2e,
tests/integration) run the same code with the live client and real plugins."""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from netattach.cni.chain import AddFailure
from netattach.cni.errors import CniError
from netattach.cni.request import parse_request
from netattach.commands.call import run_command
from netattach.commands.delete import DEL_RETRY_WINDOW
from netattach.commands.orchestrator import Orchestrator
from netattach.kube.client import KubeError
from netattach.node.state import PendingStatus, StateError
from netattach.node.statestore import StateStore
from netattach.spec.netconf import parse_netconf

NS, POD, UID, CID = "ns1", "web-0", "uid-1", "c0ffee"
NETNS = "/nonexistent/netns/pod"  # never entered: MTUs are informational, DEL gets ""
CLUSTER = {"cniVersion": "0.3.1", "name": "cluster-net", "type": "fake-bridge"}
NET_A = {"cniVersion": "1.0.0", "name": "net-a",
         "plugins": [{"type": "fake-macvlan"}, {"type": "fake-tuning"}]}
NET_B = {"cniVersion": "0.3.1", "type": "fake-ptp"}  # no name: §3.4.2 injects it


# ---------------------------------------------------------------- fakes

@dataclass
class FakeApi:
    """PodApi: `mode` "up", "down" (every request raises KubeError) or "gone" (the pod is
    not found). Records every request."""
    mode: str = "up"
    networks: str = "net-a,other/net-b@data0"
    calls: list[tuple[str, ...]] = field(default_factory=list)
    patched: list[dict[str, str]] = field(default_factory=list)
    events: list[tuple[str, str]] = field(default_factory=list)

    def _ask(self, *call: str) -> None:
        self.calls.append(call)
        if self.mode == "down":
            raise KubeError("API server https://192.0.2.1:6443 unreachable (ConnectError)")

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        self._ask("GET pod", f"{namespace}/{name}")
        if self.mode == "gone":
            return None
        return {"metadata": {"name": name, "namespace": namespace, "uid": UID,
                             "annotations": {"k8s.v1.cni.cncf.io/networks": self.networks}}}

    def get_nad(self, namespace: str, name: str) -> dict[str, Any] | None:
        self._ask("GET nad", f"{namespace}/{name}")
        config = {"net-a": NET_A, "net-b": NET_B}.get(name)
        return None if config is None else {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"config": json.dumps(config)}}

    def patch_pod_annotations(self, namespace: str, name: str, annotations: dict[str, str],
                              uid: str | None = None) -> None:
        self._ask("PATCH pod status", f"{namespace}/{name}")
        self.patched.append(annotations)

    def create_event(self, pod: dict[str, str], type_: str, reason: str, message: str) -> None:
        self._ask("POST event", reason)
        self.events.append((reason, message))

    def pause(self, seconds: float) -> bool:
        return True


@dataclass
class AfterAnswerApi(FakeApi):
    """A seam that sends its writes after the answer, as the node daemon's does."""
    WRITES_AFTER_ANSWER = True


def _result(version: str, ifname: str, address: str) -> dict[str, Any]:
    if version in ("0.1.0", "0.2.0"):
        return {"cniVersion": version, "ip4": {"ip": address}}
    ip: dict[str, Any] = {"address": address, "interface": 0}
    if version.startswith("0."):
        ip["version"] = "4"
    return {"cniVersion": version, "interfaces": [{"name": ifname, "sandbox": NETNS}],
            "ips": [ip]}


@dataclass
class FakeExecutor:
    """Executor: records (command, plugin type, CNI_IFNAME, CNI_NETNS) of every child call;
    ADD prints a result (a chained plugin passes its prevResult on), others nothing.
    `fail` = {(command, type)} makes those calls fail with code 110; `no_ip` makes the
    first plugins answer without an IP address; `missing` types are not found (code 7,
    as invoke.find_plugin)."""
    fail: set[tuple[str, str]] = field(default_factory=set)
    no_ip: bool = False
    calls: list[tuple[str, str, str, str]] = field(default_factory=list)
    missing: set[str] = field(default_factory=set)

    def find(self, plugin_type: str, dirs: Any) -> str:
        if plugin_type in self.missing:
            from netattach.cni.errors import ConfigError
            raise ConfigError(f"failed to find plugin {plugin_type!r} in path [/fake]")
        return f"/fake/{plugin_type}"

    def run(self, path: str, command: str, config: dict[str, Any], env: Any,
            timeout: float) -> dict[str, Any] | None:
        ptype = path.rsplit("/", 1)[1]
        self.calls.append((command, ptype, env.ifname, env.netns))
        if (command, ptype) in self.fail:
            from netattach.cni.errors import ChildError
            raise ChildError(110, f"{ptype} {command} failed on purpose", plugin=ptype)
        if command != "ADD":
            return None
        if "prevResult" in config:
            return config["prevResult"]
        if self.no_ip:
            return {"cniVersion": config["cniVersion"], "interfaces": [{"name": env.ifname}]}
        n = sum(1 for c in self.calls if c[0] == "ADD")
        return _result(config["cniVersion"], env.ifname, f"10.0.{n}.2/24")


@dataclass
class Bed:
    tmp: Path
    api: FakeApi = field(default_factory=FakeApi)
    exe: FakeExecutor = field(default_factory=FakeExecutor)
    now: list[float] = field(default_factory=lambda: [1_700_000_000.0])
    mono: list[float] | None = None
    """The monotonic clock, when a test moves it apart from the wall clock `now`."""
    version: str = "1.0.0"
    dropped: list[str] = field(default_factory=list)  # Orchestrator.drop_writes calls
    gone_after: int | None = None
    """Orchestrator.abandoned: True once this many children have been called (None:
    never), as the daemon's answers once the shim's connection closed."""

    def conf(self) -> dict[str, Any]:
        conf_dir = self.tmp / "net.d"
        conf_dir.mkdir(exist_ok=True)
        (conf_dir / "10-cluster.conf").write_text(json.dumps(CLUSTER))
        return {"cniVersion": self.version, "name": "netattach", "type": "netattach",
                "clusterNetwork": str(conf_dir / "10-cluster.conf"), "confDir": str(conf_dir),
                "cniDir": str(self.tmp / "state"), "binDir": "/fake",
                "deviceInfoDir": str(self.tmp / "devinfo"), "logToStderr": False}

    @property
    def store(self) -> StateStore:
        return StateStore(str(self.tmp / "state"))

    def files(self) -> list[str]:
        d = self.tmp / "state"
        return sorted(p.name for p in d.iterdir() if not p.name.startswith(".")) \
            if d.exists() else []

    def run(self, command: str, netns: str = NETNS, **conf: Any) -> dict[str, Any] | None:
        env = {"CNI_COMMAND": command, "CNI_CONTAINERID": CID, "CNI_NETNS": netns,
               "CNI_IFNAME": "eth0", "CNI_PATH": "/opt/cni/bin",
               "CNI_ARGS": f"IgnoreUnknown=1;K8S_POD_NAMESPACE={NS};K8S_POD_NAME={POD};"
                           f"K8S_POD_INFRA_CONTAINER_ID={CID};K8S_POD_UID={UID}"}
        if not netns:
            del env["CNI_NETNS"]
        stdin = {**self.conf(), **conf}
        req = parse_request(env, json.dumps(stdin).encode())
        orch = Orchestrator(api=lambda c: self.api, executor=self.exe, clock=lambda: self.now[0],
                            monotonic=lambda: self.mono[0] if self.mono else
                            self.now[0] - 1_699_000_000.0,
                            drop_writes=self.dropped.append,
                            libcni_cache_dir=str(self.tmp / "libcni"),
                            abandoned=lambda: self.gone_after is not None
                            and len(self.exe.calls) >= self.gone_after)
        return run_command(orch, req, parse_netconf(stdin))

    def added(self) -> None:
        """A whole ADD of scenario 1, then the fakes' records cleared."""
        self.run("ADD")
        assert self.files() == [f"{CID}.json"]
        self.api.calls.clear()
        self.exe.calls.clear()

    def dels(self) -> list[tuple[str, str]]:
        return [(t, i) for c, t, i, _ in self.exe.calls if c == "DEL"]


ALL_DELS = [("fake-ptp", "data0"), ("fake-tuning", "net1"), ("fake-macvlan", "net1"),
            ("fake-bridge", "eth0")]


@pytest.fixture
def bed(tmp_path):
    return Bed(tmp_path)


# ---------------------------------------------------------------- ADD

def test_add_attaches_in_order_saves_everything_and_reports(bed):
    out = bed.run("ADD")
    assert [(c, t, i) for c, t, i, _ in bed.exe.calls] == [
        ("ADD", "fake-bridge", "eth0"), ("ADD", "fake-macvlan", "net1"),
        ("ADD", "fake-tuning", "net1"), ("ADD", "fake-ptp", "data0")]
    assert out["cniVersion"] == "1.0.0" and out["ips"][0]["address"] == "10.0.1.2/24"
    saved = bed.store.load(CID)
    assert [(a.network, a.ifname, a.attempted, a.result is not None) for a in saved.attachments] \
        == [("cluster-net", "eth0", True, True), (f"{NS}/net-a", "net1", True, True),
            ("other/net-b", "data0", True, True)]
    assert saved.attachments[2].config["name"] == "net-b"  # §3.4.2
    status = json.loads(bed.api.patched[0]["k8s.v1.cni.cncf.io/network-status"])
    assert [(e["name"], e["interface"]) for e in status] == [
        ("cluster-net", "eth0"), (f"{NS}/net-a", "net1"), ("other/net-b", "data0")]
    assert [r for r, _ in bed.api.events] == ["AddedInterface"] * 3


def test_each_added_interface_event_is_queued_before_the_next_attachment_runs(bed,
                                                                             monkeypatch):
    """The node daemon queues an interface's AddedInterface Event as soon as its
    attachment is up, while the next ones still run (as Multus records it after each
    delegate): queued at the end, an ADD's Events met the kubelet starting the pod's
    containers, and the pod was Ready about 30 ms later on the real node
    (docs/bench-node.md, 2026-11-29 14:51-16:05). A failure after that rolls back and
    adds the Warning. Thin mode (a POST it waits for) keeps them after the PATCH, since
    no request may come between a child and the saving of its result."""
    bed.api = AfterAnswerApi()
    seen: list[tuple[str, list[tuple[str, str]]]] = []
    record = bed.api.create_event
    monkeypatch.setattr(bed.api, "create_event", lambda pod, type_, reason, message: (
        seen.append((message, [(c, t) for c, t, _, _ in bed.exe.calls])),
        record(pod, type_, reason, message)))
    bed.run("ADD")
    assert seen == [
        ("Add eth0 ['10.0.1.2'] from cluster-net", [("ADD", "fake-bridge")]),
        (f"Add net1 ['10.0.2.2'] from {NS}/net-a",
         [("ADD", "fake-bridge"), ("ADD", "fake-macvlan"), ("ADD", "fake-tuning")]),
        ("Add data0 ['10.0.4.2'] from other/net-b",
         [("ADD", "fake-bridge"), ("ADD", "fake-macvlan"), ("ADD", "fake-tuning"),
          ("ADD", "fake-ptp")])]
    assert [c[0] for c in bed.api.calls][-1] == "PATCH pod status"


def test_a_daemon_add_failing_after_its_children_has_their_events_then_the_warning(bed):
    """In the node daemon, the AddedInterface Events queued as the attachments came up
    stay; the rollback's ErrorAddingNetwork follows them (as with Multus)."""
    bed.api = AfterAnswerApi()
    bed.version = "0.2.0"
    bed.exe.no_ip = True
    with pytest.raises(CniError):
        bed.run("ADD")
    assert bed.dels() == ALL_DELS
    assert [r for r, _ in bed.api.events] == ["AddedInterface"] * 3 + ["ErrorAddingNetwork"]


@pytest.mark.parametrize("gone_after, added", [(1, []), (2, ["eth0"])])
def test_an_abandoned_daemon_add_queues_no_event_for_an_interface_it_rolls_back(
        bed, gone_after, added):
    """In the node daemon, an attachment that comes up after the shim gave up gets no
    AddedInterface Event: the runtime's DEL may have begun and dropped the queued ones,
    and the interface is rolled back at the next step; the ones before it keep theirs."""
    bed.api = AfterAnswerApi()
    bed.gone_after = gone_after
    with pytest.raises(CniError):
        bed.run("ADD")
    assert [(r, m.split()[1]) for r, m in bed.api.events if r == "AddedInterface"] == \
        [("AddedInterface", i) for i in added]
    assert [r for r, _ in bed.api.events][-1] == "ErrorAddingNetwork"


@pytest.mark.parametrize("conf, ips", [
    ({}, [["10.0.1.2"], ["10.0.2.2"], ["10.0.4.2"]]),                  # bare, as Multus
    ({"networkStatusIPFormat": "address"}, [["10.0.1.2"], ["10.0.2.2"], ["10.0.4.2"]]),
    ({"networkStatusIPFormat": "cidr"}, [["10.0.1.2/24"], ["10.0.2.2/24"], ["10.0.4.2/24"]]),
])
def test_add_writes_the_status_ips_in_the_configured_form(bed, conf, ips):
    """network-status `ips` are bare addresses unless the node's conf asks for the CIDR
    form (docs/configuration.md, networkStatusIPFormat); the AddedInterface events name
    them as written; the runtime's result keeps the CIDR the plugin gave."""
    out = bed.run("ADD", **conf)
    assert out["ips"][0]["address"] == "10.0.1.2/24"
    status = json.loads(bed.api.patched[0]["k8s.v1.cni.cncf.io/network-status"])
    assert [e["ips"] for e in status] == ips
    assert [m for _, m in bed.api.events][0] == f"Add eth0 {ips[0]} from cluster-net"


def test_a_bad_network_status_ip_format_is_refused_naming_the_key(bed):
    with pytest.raises(CniError) as e:
        bed.run("ADD", networkStatusIPFormat="CIDR")
    assert e.value.code == 7 and "networkStatusIPFormat" in e.value.msg
    assert bed.exe.calls == [] and bed.api.patched == []


POD_ANNOTATIONS = "io.kubernetes.cri.pod-annotations"


def test_add_takes_the_pods_annotations_from_the_runtime_without_a_pod_get(bed):
    """Issue 11: containerd passes the pod's annotations in runtimeConfig when the
    conflist declares the capability; ADD then asks the API server only for the NADs,
    and the network-status PATCH is for the UID in CNI_ARGS."""
    bed.run("ADD", runtimeConfig={POD_ANNOTATIONS: {
        "k8s.v1.cni.cncf.io/networks": "net-a", "kubernetes.io/config.source": "api"}})
    assert [c[0] for c in bed.api.calls] == ["GET nad", "PATCH pod status", "POST event",
                                             "POST event"]
    assert [(a.network, a.ifname) for a in bed.store.load(CID).attachments] == [
        ("cluster-net", "eth0"), (f"{NS}/net-a", "net1")]


@pytest.mark.parametrize("annotations", [
    {"k8s.v1.cni.cncf.io/networks": "net-a", "kubernetes.io/config.source": "file"},
    {"k8s.v1.cni.cncf.io/networks": "net-a", "kubernetes.io/config.mirror": "x"},
    {"k8s.v1.cni.cncf.io/networks": 7},
    "net-a",
], ids=["static-pod", "mirror-pod", "not-strings", "not-a-map"])
def test_add_gets_the_pod_when_the_runtimes_annotations_cannot_stand_in(bed, annotations):
    bed.run("ADD", runtimeConfig={POD_ANNOTATIONS: annotations})
    assert bed.api.calls[0] == ("GET pod", f"{NS}/{POD}")
    assert len(bed.store.load(CID).attachments) == 3  # the API server's selection


def test_a_failing_child_rolls_back_everything_attempted_and_tombstones(bed):
    bed.exe.fail = {("ADD", "fake-ptp")}
    with pytest.raises(CniError) as e:
        bed.run("ADD")
    assert e.value.code == 110
    assert e.value.msg.startswith(f"pod {NS}/{POD}: network other/net-b (interface data0): ")
    assert bed.dels() == ALL_DELS  # the failed one too, then the others in reverse
    assert bed.files() == [f"{CID}.deleted"] and bed.api.patched == []
    assert ("ErrorAddingNetwork", e.value.msg) in bed.api.events
    # the runtime's cleanup DEL: nothing to do, no API request, no child
    bed.api.calls.clear()
    bed.exe.calls.clear()
    assert bed.run("DEL") is None
    assert bed.api.calls == [] and bed.exe.calls == []


def test_a_failure_after_the_children_ran_rolls_back(bed):
    """Defect 1: a 0.2.0 netattach config whose default result has no IP failed after
    every child ran, PATCHed network-status and rolled nothing back."""
    bed.version = "0.2.0"
    bed.exe.no_ip = True
    with pytest.raises(CniError) as e:
        bed.run("ADD")
    assert e.value.code == 1 and "no IP address" in e.value.msg
    assert e.value.msg.startswith(f"pod {NS}/{POD}: ")
    assert bed.dels() == ALL_DELS
    assert bed.api.patched == [] and [r for r, _ in bed.api.events] == ["ErrorAddingNetwork"]
    assert bed.files() == [f"{CID}.deleted"]


@pytest.mark.parametrize("version", ["2.0.0", "1.2.0"])
def test_an_unsupported_netattach_version_runs_nothing(bed, version):
    """Defect 1: refused before anything runs, as libcni's skel (code 1)."""
    with pytest.raises(CniError) as e:
        bed.run("ADD", cniVersion=version)
    assert e.value.code == 1
    assert bed.exe.calls == [] and bed.api.calls == [] and bed.files() == []


def test_a_device_info_write_failure_is_an_io_failure_and_rolls_back(bed, monkeypatch):
    """Defect 6: a failed device-info write was reported as code 7 (invalid config)."""
    from netattach.node import devices
    monkeypatch.setattr(devices, "nad_resource_name",
                        lambda nad: "example.com/nic" if nad["metadata"]["name"] == "net-a"
                        else None)
    monkeypatch.setattr(devices, "pod_devices",  # the kubelet's answer
                        lambda *a, **k: {"example.com/nic": ["0000:18:02.5"]})
    devinfo = bed.tmp / "devinfo"
    dp = Path(devices.dp_device_info_path("example.com/nic", "0000:18:02.5", str(devinfo)))
    dp.parent.mkdir(parents=True)
    dp.write_text(json.dumps({"type": "pci", "version": "1.1.0", "pci": {}}))
    (devinfo / "cni").write_text("a file where the directory should be")
    with pytest.raises(CniError) as e:
        bed.run("ADD")
    assert e.value.code == 5 and "device-info" in e.value.msg and "net-a" in e.value.msg
    assert bed.dels() == [("fake-tuning", "net1"), ("fake-macvlan", "net1"),
                          ("fake-bridge", "eth0")]


def test_add_with_the_api_down_leaves_a_marker_then_a_tombstone(bed):
    """Defect 8: the ADD saves a marker before its first API request; failing there, it
    attached nothing, and the runtime's DEL succeeds at once without the API server."""
    bed.api.mode = "down"
    with pytest.raises(CniError) as e:
        bed.run("ADD")
    assert e.value.code == 11 and "unreachable" in e.value.msg
    assert bed.exe.calls == [] and bed.files() == [f"{CID}.deleted"]
    bed.api.calls.clear()
    assert bed.run("DEL") is None
    assert bed.api.calls == [] and bed.exe.calls == []


def test_a_killed_add_marker_is_released_by_del_without_the_api(bed):
    """netattach SIGKILLed during its first API request leaves only the marker."""
    from netattach.node.state import SavedState
    from netattach.spec.pod import PodRef
    store = bed.store
    req_like = type("R", (), {"container_id": CID, "netns": NETNS, "ifname": "eth0",
                              "args": ()})()
    store.save(SavedState.for_request(req_like, PodRef(NS, POD, UID), parse_netconf(bed.conf()).cni_version))
    bed.api.mode = "down"
    assert bed.run("DEL") is None
    assert bed.api.calls == [] and bed.exe.calls == [] and bed.files() == [f"{CID}.deleted"]


ABANDONED = "the runtime stopped waiting for its answer"


@pytest.mark.parametrize("gone_after, step, adds", [
    (0, "before its plan was made", []),
    (1, f"before network {NS}/net-a (interface net1)", [("fake-bridge", "eth0")]),
    # net-a's conflist is one attachment: its second plugin runs before the next check
    (2, "before network other/net-b (interface data0)",
     [("fake-bridge", "eth0"), ("fake-macvlan", "net1"), ("fake-tuning", "net1")]),
    (4, "after its last attachment, before its answer",
     [("fake-bridge", "eth0"), ("fake-macvlan", "net1"), ("fake-tuning", "net1"),
      ("fake-ptp", "data0")]),
], ids=["before-the-plan", "after-eth0", "mid-conflist", "after-the-last"])
def test_an_abandoned_add_stops_at_its_next_step_and_rolls_back(bed, gone_after, step, adds):
    """Issue 21: the caller gone (the daemon's shim closed its connection), the ADD runs
    no further attachment, DELs every one it attempted in reverse, writes the tombstone
    and the Warning event, and publishes no network-status; the runtime's DEL is then
    quiet, with no API request and no child."""
    bed.gone_after = gone_after
    with pytest.raises(CniError) as e:
        bed.run("ADD")
    assert e.value.code == 11
    assert e.value.msg.startswith(f"pod {NS}/{POD}: ADD abandoned {step}: {ABANDONED}")
    assert [(t, i) for c, t, i, _ in bed.exe.calls if c == "ADD"] == adds
    assert bed.dels() == [(t, i) for t, i in reversed(adds)]
    assert bed.files() == [f"{CID}.deleted"] and bed.api.patched == []
    assert ("ErrorAddingNetwork", e.value.msg) in bed.api.events
    bed.gone_after = None
    bed.api.calls.clear()
    bed.exe.calls.clear()
    assert bed.run("DEL") is None
    assert bed.api.calls == [] and bed.exe.calls == []


def test_an_abandoned_add_whose_rollback_fails_keeps_the_state_for_the_del(bed):
    """The rollback of an abandoned ADD follows a failed ADD's rules: a DEL that fails
    keeps the state, and the runtime's DEL retries it."""
    bed.gone_after = 1
    bed.exe.fail = {("DEL", "fake-bridge")}
    with pytest.raises(CniError) as e:
        bed.run("ADD")
    assert e.value.code == 11 and "ADD abandoned before network" in e.value.msg
    assert "the rollback's DEL failed for 1 attachment(s)" in e.value.details
    assert bed.files() == [f"{CID}.json"]
    assert [(a.ifname, a.attempted) for a in bed.store.load(CID).attachments] == [
        ("eth0", True), ("net1", False), ("data0", False)]
    bed.gone_after = None
    bed.exe.fail = set()
    bed.exe.calls.clear()
    assert bed.run("DEL") is None
    assert bed.dels() == [("fake-bridge", "eth0")] and bed.files() == [f"{CID}.deleted"]


def test_a_del_is_never_abandoned(bed):
    """Only ADD stops for a caller gone: a DEL goes on releasing everything."""
    bed.added()
    bed.gone_after = 0
    assert bed.run("DEL") is None
    assert bed.dels() == ALL_DELS and bed.files() == [f"{CID}.deleted"]


def test_a_second_add_of_an_attached_container_is_refused(bed):
    bed.added()
    with pytest.raises(CniError) as e:
        bed.run("ADD")
    assert e.value.code == 4 and "already attached" in e.value.msg
    assert bed.exe.calls == [] and bed.store.load(CID).attempted()


def test_auxiliary_chain_runs_last_from_an_empty_prev_result_without_a_status_entry(bed):
    aux = bed.tmp / "net.d" / "aux-chain"
    aux.mkdir(parents=True)
    (aux / "10-tune.conf").write_text(json.dumps({"type": "fake-sysctl", "name": "t"}))
    bed.run("ADD", auxiliaryCNIChainName="aux-chain")
    assert [(c, t, i) for c, t, i, _ in bed.exe.calls][-1] == ("ADD", "fake-sysctl", "net3")
    status = json.loads(bed.api.patched[0]["k8s.v1.cni.cncf.io/network-status"])
    assert [e["interface"] for e in status] == ["eth0", "net1", "data0"]
    bed.exe.calls.clear()
    bed.run("DEL", auxiliaryCNIChainName="aux-chain")
    assert bed.dels()[0] == ("fake-sysctl", "net3")


# ---------------------------------------------------------------- writes after the answer

def test_add_records_the_status_as_pending_only_when_writes_come_after_the_answer(bed):
    """Thin mode (the PATCH is sent before the answer) saves nothing more; a seam that
    sends it after the answer gets it saved first, exactly as it is to be sent."""
    bed.run("ADD")
    assert "statusPending" not in json.loads((bed.tmp / "state" / f"{CID}.json").read_text())
    assert bed.store.load(CID).status_pending is None and len(bed.api.patched) == 1
    bed.run("DEL")
    bed.api = AfterAnswerApi()
    bed.run("ADD")
    assert bed.store.load(CID).status_pending == PendingStatus(UID, bed.api.patched[0])


def test_a_status_that_cannot_be_recorded_is_not_queued_and_the_add_succeeds(bed, monkeypatch,
                                                                            caplog):
    bed.api = AfterAnswerApi()
    real_save = StateStore.save

    def save(store: StateStore, state: Any, durable: bool = True) -> None:
        if state.status_pending is not None:
            raise StateError("cannot write state file x: No space left on device")
        real_save(store, state, durable)

    monkeypatch.setattr(StateStore, "save", save)
    assert bed.run("ADD") is not None
    assert bed.api.patched == [] and [r for r, _ in bed.api.events] == ["AddedInterface"] * 3
    assert "annotation is not written" in caplog.text and "No space left" in caplog.text
    assert bed.store.load(CID).status_pending is None


def test_del_drops_the_queued_writes_and_a_pending_status_first_even_when_it_fails(bed):
    bed.api = AfterAnswerApi()
    bed.added()
    bed.exe.fail = {("DEL", "fake-macvlan")}
    with pytest.raises(CniError):
        bed.run("DEL")
    assert bed.dropped == [CID]
    kept = bed.store.load(CID)
    assert kept.status_pending is None and kept.attempted()  # for the retry, never published
    bed.exe.fail = set()
    assert bed.run("DEL") is None and bed.dropped == [CID, CID]


def test_gc_of_a_stale_container_drops_its_queued_writes(bed):
    bed.api = AfterAnswerApi()
    bed.added()
    bed.run("GC", cniVersion="1.1.0", **{"cni.dev/valid-attachments": []})
    assert bed.dropped == [CID] and bed.files() == [f"{CID}.deleted"]
    assert bed.dels() == ALL_DELS


# ---------------------------------------------------------------- DEL: the recovery matrix

def _whole(b: Bed) -> None:
    b.added()


def _tombstone(b: Bed) -> None:
    b.added()
    b.run("DEL")
    b.exe.calls.clear()
    b.api.calls.clear()


def _damaged(cut_after: int | None) -> Any:
    """A whole ADD, then the state file cut: after the attachments list (None: all of
    them still readable) or inside attachment `cut_after`."""
    def make(b: Bed) -> None:
        b.added()
        path = b.tmp / "state" / f"{CID}.json"
        raw = path.read_bytes()
        if cut_after is None:
            path.write_bytes(raw[:-len(b',"format":1}')])
        else:
            starts = [i for i in range(len(raw)) if raw.startswith(b'{"network"', i)]
            path.write_bytes(raw[:starts[cut_after] + 20])
    return make


def _missing(b: Bed) -> None:
    b.added()
    (b.tmp / "state" / f"{CID}.json").unlink()


def _pending(b: Bed) -> None:
    """A DEL without state while the API was down: the primary released, the state saved
    as pending."""
    _missing(b)
    b.api.mode = "down"
    with pytest.raises(CniError):
        b.run("DEL")
    b.exe.calls.clear()
    b.api.calls.clear()


def _marker(b: Bed) -> None:
    b.api.mode = "down"
    with pytest.raises(CniError):
        b.run("ADD")
    (b.tmp / "state" / f"{CID}.deleted").unlink()  # as if killed before the tombstone
    from netattach.node.state import SavedState
    from netattach.spec.pod import PodRef
    req_like = type("R", (), {"container_id": CID, "netns": NETNS, "ifname": "eth0",
                              "args": ()})()
    b.store.save(SavedState.for_request(req_like, PodRef(NS, POD, UID), parse_netconf(b.conf()).cni_version))
    b.api.calls.clear()


def libcni_entry(b: Bed, network: str, config: dict[str, Any], container_id: str = CID,
                 ifname: str = "eth0", **extra: Any) -> Path:
    """Write libcni's cache entry of an ADD of `config` as network `network` (libcni
    api.go cacheAdd: <cache>/results/<network>-<container>-<ifname>, config base64)."""
    import base64
    results = b.tmp / "libcni" / "results"
    results.mkdir(parents=True, exist_ok=True)
    path = results / f"{network}-{container_id}-{ifname}"
    path.write_text(json.dumps({
        "kind": "cniCacheV1", "containerId": container_id, "ifName": ifname,
        "networkName": network, "netns": NETNS,
        "config": base64.b64encode(json.dumps(config).encode()).decode(),
        "result": _result(config.get("cniVersion", "0.1.0"), ifname, "10.9.0.2/24"),
        **extra}))
    return path


def _predates(b: Bed) -> None:
    """No state: the runtime ADDed the sandbox with the primary's conflist alone, before
    netattach was installed."""
    libcni_entry(b, "cluster-net", CLUSTER)


def _predates_multus(b: Bed) -> None:
    """No state: Multus ADDed the sandbox before netattach replaced it."""
    libcni_entry(b, "multus-cni-network", {"cniVersion": "0.3.1", "name": "multus-cni-network",
                                           "plugins": [{"type": "multus"}]})


def _lost(b: Bed) -> None:
    """netattach ADDed the sandbox (libcni's entry under its conflist's name), then its
    state was lost."""
    _missing(b)
    libcni_entry(b, "netattach", {"cniVersion": "1.0.0", "name": "netattach",
                                  "plugins": [{"type": "netattach"}]})


REBUILT = ALL_DELS
PRIMARY = [("fake-bridge", "eth0")]
READ_ONE = [("fake-bridge", "eth0")]  # the attachment still readable in a damaged file


@dataclass
class Row:
    state: str
    api: str
    code: int            # 0 = DEL succeeds
    dels: list[tuple[str, str]]
    asked: bool          # did DEL ask the API server
    files: list[str]     # left in cniDir (hidden files aside)
    level: int | None = None  # the loudest log line, None: nothing above INFO


DAMAGED = [f"{CID}.deleted", f"{CID}.json.corrupt"]
MATRIX = [
    Row("whole", "up", 0, ALL_DELS, False, [f"{CID}.deleted"]),
    Row("whole", "down", 0, ALL_DELS, False, [f"{CID}.deleted"]),
    Row("whole", "gone", 0, ALL_DELS, False, [f"{CID}.deleted"]),
    Row("tombstone", "up", 0, [], False, [f"{CID}.deleted"]),
    Row("tombstone", "down", 0, [], False, [f"{CID}.deleted"]),
    Row("tombstone", "gone", 0, [], False, [f"{CID}.deleted"]),
    Row("marker", "down", 0, [], False, [f"{CID}.deleted"]),
    Row("damaged-all-readable", "down", 0, ALL_DELS, False, DAMAGED, logging.ERROR),
    Row("damaged-partly", "up", 0, REBUILT, True, DAMAGED, logging.ERROR),
    Row("damaged-partly", "gone", 0, READ_ONE, True, DAMAGED, logging.ERROR),
    Row("damaged-partly", "down", 11, READ_ONE, True,
        [f"{CID}.json", f"{CID}.json.corrupt"], logging.ERROR),
    Row("missing", "up", 0, REBUILT, True, [f"{CID}.deleted"], logging.WARNING),
    Row("missing", "gone", 0, PRIMARY, True, [f"{CID}.deleted"], logging.WARNING),
    Row("missing", "down", 11, PRIMARY, True, [f"{CID}.json"], logging.ERROR),
    # a sandbox the runtime ADDed without netattach (libcni's cache): quiet; the primary
    # alone is released as cached, without the API; after Multus, rebuilt from the API
    Row("predates", "up", 0, PRIMARY, False, [f"{CID}.deleted"]),
    Row("predates", "down", 0, PRIMARY, False, [f"{CID}.deleted"]),
    Row("predates", "gone", 0, PRIMARY, False, [f"{CID}.deleted"]),
    Row("predates-multus", "up", 0, REBUILT, True, [f"{CID}.deleted"]),
    Row("predates-multus", "gone", 0, PRIMARY, True, [f"{CID}.deleted"], logging.WARNING),
    Row("predates-multus", "down", 11, PRIMARY, True, [f"{CID}.json"], logging.ERROR),
    # netattach's own entry: its state was lost, as loud as without a cache
    Row("lost", "up", 0, REBUILT, True, [f"{CID}.deleted"], logging.WARNING),
    Row("lost", "gone", 0, PRIMARY, True, [f"{CID}.deleted"], logging.WARNING),
    Row("lost", "down", 11, PRIMARY, True, [f"{CID}.json"], logging.ERROR),
    Row("pending", "up", 0, REBUILT, True, [f"{CID}.deleted"], logging.ERROR),
    Row("pending", "gone", 0, PRIMARY, True, [f"{CID}.deleted"], logging.ERROR),
    Row("pending", "down", 11, PRIMARY, True, [f"{CID}.json"], logging.ERROR),
]
SETUP = {"whole": _whole, "tombstone": _tombstone, "marker": _marker,
         "damaged-all-readable": _damaged(None), "damaged-partly": _damaged(1),
         "missing": _missing, "pending": _pending, "predates": _predates,
         "predates-multus": _predates_multus, "lost": _lost}


@pytest.mark.parametrize("row", MATRIX, ids=lambda r: f"{r.state}-api-{r.api}")
def test_del_recovery_matrix(bed, caplog, row):
    SETUP[row.state](bed)
    bed.api.mode = row.api
    caplog.set_level(logging.DEBUG, logger="netattach")
    caplog.clear()
    try:
        bed.run("DEL")
        code = 0
    except CniError as e:
        code = e.code
    assert code == row.code
    assert bed.dels() == row.dels
    assert bool(bed.api.calls) is row.asked
    assert all(c[0] in ("GET pod", "GET nad") for c in bed.api.calls)  # DEL writes nothing
    assert bed.files() == row.files
    loudest = max((r.levelno for r in caplog.records if r.levelno > logging.INFO), default=None)
    assert loudest == row.level, [r.getMessage() for r in caplog.records]
    if row.state == "pending":  # its own pending record is not a damaged state (defect 12)
        assert "damaged" not in caplog.text and "a DEL pending since" in caplog.text


@pytest.mark.parametrize("state", ["missing", "pending", "damaged-partly"])
def test_del_retry_window(bed, state, caplog):
    """While the API server cannot be asked, DEL fails with 11 (the primary released at
    once) for DEL_RETRY_WINDOW after its first try; then it gives up with an ERROR."""
    SETUP[state](bed)
    bed.api.mode = "down"
    for advance in (0, DEL_RETRY_WINDOW / 2):
        bed.now[0] += advance
        with pytest.raises(CniError) as e:
            bed.run("DEL")
        assert e.value.code == 11 and "gives up on them" in e.value.msg
    bed.now[0] += DEL_RETRY_WINDOW / 2 + 1
    caplog.clear()
    assert bed.run("DEL") is None
    assert "DEL gives up" in caplog.text and "NOT released" in caplog.text
    assert bed.files() == [f"{CID}.deleted"] + ([f"{CID}.json.corrupt"]
                                                 if state == "damaged-partly" else [])


def test_the_del_retry_window_runs_on_the_monotonic_clock(bed):
    """A wall-clock step (NTP, an admin's `date`) neither ends the window early nor
    extends it: how long the DEL has been pending is measured on CLOCK_MONOTONIC."""
    SETUP["missing"](bed)
    bed.api.mode = "down"
    bed.mono = [5_000.0]
    with pytest.raises(CniError):
        bed.run("DEL")
    bed.now[0] += 2 * DEL_RETRY_WINDOW  # the wall clock jumps; 1 s passes
    bed.mono[0] += 1
    with pytest.raises(CniError) as e:
        bed.run("DEL")
    assert e.value.code == 11
    bed.now[0] -= 4 * DEL_RETRY_WINDOW  # it jumps back; the window passes
    bed.mono[0] += DEL_RETRY_WINDOW
    assert bed.run("DEL") is None


def test_a_pending_del_finishes_once_the_api_answers(bed):
    _pending(bed)
    bed.api.mode = "up"
    assert bed.run("DEL") is None
    # the pending state knew only the primary from the config: everything is DEL-ed now
    assert bed.dels() == REBUILT and bed.files() == [f"{CID}.deleted"]


def test_the_runtimes_second_del_is_quiet_and_asks_nothing(bed, caplog):
    """Defect 12: containerd DELs again at RemovePodSandbox, with an empty CNI_NETNS and
    no prevResult; with the API up, the pod deleted, or the API server down, the second
    DEL succeeds at once, logs nothing above INFO and makes no API request."""
    for mode in ("up", "gone", "down"):
        bed.api.mode = "up"
        bed.added()
        bed.run("DEL")
        bed.exe.calls.clear()
        bed.api.calls.clear()
        bed.api.mode = mode
        caplog.clear()
        caplog.set_level(logging.DEBUG, logger="netattach")
        assert bed.run("DEL", netns="") is None
        assert bed.exe.calls == [] and bed.api.calls == [], mode
        assert not [r for r in caplog.records if r.levelno > logging.INFO], mode
        bed.store.forget_deleted(CID)


def test_a_failed_child_del_keeps_the_state_for_the_retry(bed):
    bed.added()
    bed.exe.fail = {("DEL", "fake-macvlan")}
    with pytest.raises(CniError) as e:
        bed.run("DEL")
    assert e.value.code == 11 and "net-a (interface net1)" in e.value.msg
    assert bed.dels() == ALL_DELS  # went on past the failure (§7.2)
    assert bed.files() == [f"{CID}.json"]
    bed.exe.fail = set()
    bed.exe.calls.clear()
    assert bed.run("DEL") is None and bed.files() == [f"{CID}.deleted"]


# ---------------------------------------------------------------- a chain failing half way (issue 21)

def test_a_missing_later_plugin_of_a_chain_is_passed_and_the_rest_rolled_back(bed, caplog):
    """net-a's conflist [fake-macvlan, fake-tuning] with fake-tuning missing: the ADD
    fails naming it; the rollback DELs fake-macvlan past the missing plugin (its
    interface and address would leak), excuses the missing one (its ADD never ran), and
    only then writes the tombstone; the runtime's DEL is quiet."""
    bed.exe.missing = {"fake-tuning"}
    caplog.set_level(logging.DEBUG, logger="netattach")
    with pytest.raises(CniError) as e:
        bed.run("ADD")
    assert e.value.code == 7 and e.value.msg == (
        f"pod {NS}/{POD}: network {NS}/net-a (interface net1): plugin type='fake-tuning' "
        "name='net-a' failed (add): failed to find plugin 'fake-tuning' in path [/fake]")
    assert bed.dels() == [("fake-macvlan", "net1"), ("fake-bridge", "eth0")]
    assert bed.files() == [f"{CID}.deleted"]
    assert (f"DEL of network {NS}/net-a (interface net1): plugin type='fake-tuning' "
            "name='net-a' failed (del): failed to find plugin 'fake-tuning' in path [/fake]; "
            "ignored: its ADD never ran") in caplog.text
    bed.exe.calls.clear()
    assert bed.run("DEL") is None and bed.exe.calls == []


def test_a_failed_rollback_keeps_the_state_and_the_del_fails_loudly_until_fixed(bed):
    """fake-tuning fails its ADD, then its DEL otherwise (so it may hold something): the
    rollback still DELs fake-macvlan and the cluster network, keeps the state (no
    tombstone) and says so in the ADD's details; the runtime's DEL fails naming the pod,
    the network, the plugin and the cause, until the plugin's DEL succeeds."""
    bed.exe.fail = {("ADD", "fake-tuning"), ("DEL", "fake-tuning")}
    with pytest.raises(CniError) as e:
        bed.run("ADD")
    assert e.value.code == 110 and "fake-tuning ADD failed on purpose" in e.value.msg
    assert e.value.details == (
        f"the rollback's DEL failed for 1 attachment(s), kept for the runtime's DEL to "
        f"retry: network {NS}/net-a (interface net1): plugin type='fake-tuning' "
        "name='net-a' failed (del): fake-tuning DEL failed on purpose")
    assert bed.dels() == [("fake-tuning", "net1"), ("fake-macvlan", "net1"),
                          ("fake-bridge", "eth0")]
    assert bed.files() == [f"{CID}.json"]
    saved = bed.store.load(CID).attachments[1]
    assert saved.add_failed and saved.add_failure == AddFailure(
        1, True, 110, "fake-tuning ADD failed on purpose")
    for _ in range(2):  # fails as long as the cause is there, every time in full
        bed.exe.calls.clear()
        with pytest.raises(CniError) as e:
            bed.run("DEL")
        assert e.value.code == 11 and e.value.msg == (
            f"pod {NS}/{POD}: DEL failed for 1 attachment(s), kept for the next DEL to "
            f"retry: network {NS}/net-a (interface net1): plugin type='fake-tuning' "
            "name='net-a' failed (del): fake-tuning DEL failed on purpose")
        assert bed.dels() == [("fake-tuning", "net1"), ("fake-macvlan", "net1"),
                              ("fake-bridge", "eth0")]
        assert bed.files() == [f"{CID}.json"]
    bed.exe.fail = set()
    assert bed.run("DEL") is None and bed.files() == [f"{CID}.deleted"]


def test_the_failing_plugin_failing_its_del_as_its_add_is_excused(bed, caplog):
    """macvlan with a master that does not exist fails ADD and DEL alike, at its config:
    kept as an error it would fail every DEL of the sandbox forever."""
    from netattach.cni.errors import ChildError
    run = bed.exe.run

    def master_missing(path: str, command: str, config: dict[str, Any], env: Any,
                       timeout: float) -> dict[str, Any] | None:
        if path.endswith("/fake-macvlan") and env.ifname == "net1":
            bed.exe.calls.append((command, "fake-macvlan", env.ifname, env.netns))
            raise ChildError(7, 'failed to lookup master "eth9": Link not found')
        return run(path, command, config, env, timeout)

    bed.exe.run = master_missing  # type: ignore[method-assign]
    caplog.set_level(logging.DEBUG, logger="netattach")
    with pytest.raises(CniError) as e:
        bed.run("ADD")
    assert e.value.code == 7 and e.value.details == ""
    # fake-tuning never ran its ADD: its DEL runs (as libcni's would) and succeeds
    assert bed.dels() == [("fake-tuning", "net1"), ("fake-macvlan", "net1"),
                          ("fake-bridge", "eth0")]
    assert bed.files() == [f"{CID}.deleted"]
    assert "ignored: it fails as its ADD did" in caplog.text


def test_a_del_goes_on_past_a_failing_plugin_of_a_conflist(bed):
    """A whole ADD, then fake-tuning's DEL fails: fake-macvlan, before it in the list,
    is DEL-ed all the same (libcni's DelNetworkList would stop at fake-tuning)."""
    bed.added()
    bed.exe.fail = {("DEL", "fake-tuning")}
    with pytest.raises(CniError) as e:
        bed.run("DEL")
    assert e.value.code == 11 and "plugin type='fake-tuning'" in e.value.msg
    assert bed.dels() == ALL_DELS and bed.files() == [f"{CID}.json"]


def test_a_plugin_gone_since_a_whole_add_fails_the_del(bed):
    """A plugin whose ADD succeeded may hold something: its DEL failing, even because it
    cannot be found any more, keeps the state; the rest is DEL-ed."""
    bed.added()
    bed.exe.missing = {"fake-macvlan"}
    with pytest.raises(CniError) as e:
        bed.run("DEL")
    assert "failed to find plugin 'fake-macvlan'" in e.value.msg
    assert bed.dels() == [("fake-ptp", "data0"), ("fake-tuning", "net1"),
                          ("fake-bridge", "eth0")]
    assert bed.files() == [f"{CID}.json"]


def test_an_earlier_releases_failed_add_is_deleted_as_that_release_did(bed, caplog):
    """A state an earlier release saved after a failed ADD has addFailed without
    addFailure: which plugin failed is unknown, so its DEL failures are ignored as that
    release ignored them."""
    bed.exe.fail = {("ADD", "fake-tuning"), ("DEL", "fake-tuning")}
    with pytest.raises(CniError):
        bed.run("ADD")
    path = bed.tmp / "state" / f"{CID}.json"
    doc = json.loads(path.read_text())
    del doc["attachments"][1]["addFailure"]
    path.write_text(json.dumps(doc))
    caplog.set_level(logging.DEBUG, logger="netattach")
    bed.exe.calls.clear()
    assert bed.run("DEL") is None and bed.files() == [f"{CID}.deleted"]
    assert "does not say at which plugin" in caplog.text


def test_check_and_status(bed):
    bed.added()
    bed.run("CHECK")
    assert [(c, t) for c, t, _, _ in bed.exe.calls] == [  # 0.3.1 delegates: no CHECK
        ("CHECK", "fake-macvlan"), ("CHECK", "fake-tuning")]
    bed.exe.calls.clear()
    bed.run("STATUS", cniVersion="1.1.0")
    assert bed.exe.calls == []  # the cluster network is 0.3.1: STATUS is a no-op for it
    bed.run("DEL")
    with pytest.raises(CniError) as e:
        bed.run("CHECK")
    assert e.value.code == 3


# ---------------------------------------------------------------- DEL of a sandbox ADDed without netattach

def test_a_sandbox_added_without_netattach_is_released_as_libcni_cached_it(bed, caplog):
    """The primary's own cached config, runtimeConfig and result are what its DEL gets
    (not the cluster default network as configured now), and the cache entry is
    removed afterwards, as libcni's DEL of that network would have done."""
    configs: list[dict[str, Any]] = []
    run = bed.exe.run
    bed.exe.run = lambda path, command, config, env, timeout: (  # type: ignore[method-assign]
        configs.append(config) or run(path, command, config, env, timeout))
    old = {"cniVersion": "1.0.0", "name": "flannel-era", "plugins": [
        {"type": "fake-ptp", "capabilities": {"portMappings": True}}]}
    ports = [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]
    entry = libcni_entry(bed, "flannel-era", old, capabilityArgs={"portMappings": ports})
    libcni_entry(bed, "cni-loopback", {"cniVersion": "1.0.0", "name": "cni-loopback",
                                       "type": "loopback"}, ifname="lo")
    caplog.set_level(logging.DEBUG, logger="netattach")
    assert bed.run("DEL") is None
    assert bed.dels() == [("fake-ptp", "eth0")] and bed.api.calls == []
    [conf] = configs
    assert conf["name"] == "flannel-era" and conf["runtimeConfig"] == {"portMappings": ports}
    assert conf["prevResult"]["ips"][0]["address"] == "10.9.0.2/24"
    assert not entry.exists() and (bed.tmp / "libcni" / "results" / f"cni-loopback-{CID}-lo").exists()
    assert "ADDed it with network 'flannel-era' alone, without netattach" in caplog.text
    assert not [r for r in caplog.records if r.levelno > logging.INFO]
    # the runtime's second DEL: the tombstone, quietly
    caplog.clear()
    assert bed.run("DEL", netns="") is None and len(configs) == 1
    assert not [r for r in caplog.records if r.levelno > logging.INFO]


def test_a_failed_del_from_the_libcni_cache_is_retried_from_its_own_state(bed):
    entry = libcni_entry(bed, "cluster-net", CLUSTER)
    bed.exe.fail = {("DEL", "fake-bridge")}
    with pytest.raises(CniError) as e:
        bed.run("DEL")
    assert e.value.code == 11 and bed.files() == [f"{CID}.json"] and not entry.exists()
    bed.exe.fail = set()
    bed.exe.calls.clear()
    assert bed.run("DEL") is None
    assert bed.dels() == PRIMARY and bed.files() == [f"{CID}.deleted"] and bed.api.calls == []


@pytest.mark.parametrize("network,config,why", [
    ("netattach-cni-network", {"cniVersion": "1.0.0", "name": "netattach-cni-network",
                               "plugins": [{"type": "netattach-shim"}]}, "thick mode's"),
    ("renamed", {"cniVersion": "1.0.0", "name": "renamed",
                 "plugins": [{"type": "netattach"}]}, "a plugin of netattach's type"),
    ("netattach", {"cniVersion": "1.0.0", "name": "netattach", "type": "bridge"},
     "netattach's conflist name"),
])
def test_an_entry_of_netattachs_own_means_its_state_was_lost(bed, caplog, network, config, why):
    _missing(bed)
    libcni_entry(bed, network, config)
    caplog.set_level(logging.DEBUG, logger="netattach")
    caplog.clear()
    bed.run("DEL")
    assert bed.dels() == REBUILT, why
    assert [r.levelno for r in caplog.records if r.levelno > logging.INFO] == [logging.WARNING]


def test_two_entries_or_an_unusable_config_fall_back_to_the_api(bed, caplog):
    """Two networks cached on CNI_IFNAME (nothing says which is the sandbox's), or a
    cached config netattach cannot run: DEL rebuilds from the API, at INFO (the sandbox
    was still ADDed without netattach)."""
    caplog.set_level(logging.DEBUG, logger="netattach")
    for setup in (lambda: [libcni_entry(bed, "a", CLUSTER), libcni_entry(bed, "b", CLUSTER)],
                  lambda: [libcni_entry(bed, "x", {"cniVersion": "9.9.9", "name": "x",
                                                   "type": "fake-bridge"})]):
        entries = setup()
        caplog.clear()
        bed.run("DEL")
        assert bed.dels() == REBUILT and bed.api.calls
        assert "without netattach" in caplog.text
        assert not [r for r in caplog.records if r.levelno > logging.INFO]
        assert all(p.exists() for p in entries)  # not the runtime's entries netattach used
        for p in entries:
            p.unlink()
        bed.store.forget_deleted(CID)
        bed.exe.calls.clear()
        bed.api.calls.clear()


def test_a_nad_selected_twice_is_read_once(bed):
    """Thin mode: one GET per distinct NetworkAttachmentDefinition per ADD, however many
    elements select it (each still gets its own attachment)."""
    bed.api.networks = "net-a,net-a@net9,other/net-b@data0"
    bed.run("ADD")
    assert [c for c in bed.api.calls if c[0] == "GET nad"] == [
        ("GET nad", f"{NS}/net-a"), ("GET nad", "other/net-b")]
    assert sorted({i for c, _, i, _ in bed.exe.calls if c == "ADD"}) == \
        ["data0", "eth0", "net1", "net9"]
