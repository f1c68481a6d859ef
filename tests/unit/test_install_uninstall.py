"""Uninstall and the retired configuration, without root or an API server: the installer's
rule (API answers -> uninstall or keep), its retries, the retired conflist it writes;
netattach's own commands with the retired configuration through the orchestrator's
seams (tests/unit/test_attach.py's fakes: the fake API records any request, so "asks
nothing" is checked); the removal of netattach's files over real temp dirs and real
flocks. The real API server, real plugins and the built artifact: tests/e2e/
test_uninstall_e2e.py."""
from __future__ import annotations

import fcntl
import json
import logging
import os
from pathlib import Path

import pytest

from netattach.cli import cni_main
from netattach.cni.chain import NetworkConfig
from netattach.cni.errors import CniError
from netattach.commands.networks import is_own
from netattach.install import primary as install_primary
from netattach.install.uninstall import (
    ASK_AGAIN,
    DONE,
    RECHECK_SECONDS,
    RETIRE,
    Verdict,
    at_start,
    decide,
    judge,
    retired_conflist,
)
from netattach.kube.client import KubeError
from netattach.node import nodefiles
from netattach.node.state import SavedState
from netattach.node.statestore import StateStore
from netattach.spec.netconf import parse_netconf
from tests.unit import test_attach as ta
from tests.unit.test_attach import (
    ALL_DELS,
    CID,
    PRIMARY,
    READ_ONE,
    SETUP,
    Bed,
    FakeExecutor,
)

REF = "kube-system/netattach"


# ---------------------------------------------------------------- the rule

@pytest.mark.parametrize("daemonset, error, uninstall, said", [
    ({"metadata": {"name": "netattach"}}, None, False, "is there"),
    ({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}, None, True,
     "being deleted (since 2026-01-01T00:00:00Z)"),
    (None, None, True, "is deleted (404)"),
    (None, KubeError("get DaemonSet: HTTP 401", 401), True, "ServiceAccount is deleted"),
    (None, KubeError("get DaemonSet: HTTP 403", 403), True, "its RBAC is deleted"),
    (None, KubeError("API server unreachable (ConnectError)", 0), None, "unreachable"),
    (None, KubeError("too slow", 0), None, "too slow"),
    (None, KubeError("get DaemonSet: HTTP 503 (3 tries)", 503), None, "503"),
    (None, KubeError("get DaemonSet: HTTP 429", 429), None, "429"),
    (None, KubeError("get DaemonSet: HTTP 400", 400), None, "400"),
    (None, KubeError("answered with a body that is not JSON", 200), None, "not JSON"),
])
def test_the_rule(daemonset, error, uninstall, said):
    verdict = judge(daemonset, error, REF)
    assert verdict.uninstall is uninstall and said in verdict.reason


@pytest.mark.parametrize("daemonset, error, sure", [
    ({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}, None, True),
    (None, KubeError("get DaemonSet: HTTP 401", 401), True),
    (None, None, False),  # 404: also a wrong --daemonset
    (None, KubeError("get DaemonSet: HTTP 403", 403), False),  # also a missing Role
])
def test_only_answers_no_misconfiguration_gives_are_sure(daemonset, error, sure):
    verdict = judge(daemonset, error, REF)
    assert verdict.uninstall is True and verdict.sure is sure


@pytest.mark.parametrize("verdict, elapsed, action", [
    # a sure uninstall said twice in a row retires: the installer's stop may be lost
    (Verdict(True, "401", sure=True), 0.0, RETIRE),
    (Verdict(True, "being deleted", sure=True), RECHECK_SECONDS + 1, RETIRE),
    # an uninstall a misconfiguration also answers never retires on start: asked
    # again for a while (an uninstall deletes the ServiceAccount too), then left
    (Verdict(True, "404"), 0.0, ASK_AGAIN),
    (Verdict(True, "403"), RECHECK_SECONDS - 0.1, ASK_AGAIN),
    (Verdict(True, "404"), RECHECK_SECONDS, DONE),
    # keep ends the asking at once
    (Verdict(False, "there"), 0.0, DONE),
    # no answer (the API server busy with the uninstall's deletions) is asked again for
    # a while: this installer's stop may be the one that was lost
    (Verdict(None, "unreachable"), 0.0, ASK_AGAIN),
    (Verdict(None, "unreachable"), RECHECK_SECONDS, DONE),
])
def test_the_rule_after_the_start(verdict, elapsed, action):
    assert at_start(verdict, elapsed, sure_in_a_row=2 if verdict.sure else 0) == action


@pytest.mark.parametrize("elapsed, action", [(0.0, ASK_AGAIN), (RECHECK_SECONDS, DONE)])
def test_a_sure_uninstall_said_once_at_start_is_asked_again(elapsed, action):
    """Said once, a sure uninstall (a passing 401?) is asked again for a while, then the
    asking ends: its stop asks again."""
    assert at_start(Verdict(True, "401", sure=True), elapsed, sure_in_a_row=1) == action


SURE, KEEP, NONE = Verdict(True, "401", sure=True), Verdict(False, "there"), Verdict(None, "-")


@pytest.mark.parametrize("answers, retired_at", [
    ([SURE, SURE], 2),                  # said again a poll later: retired then
    ([SURE, KEEP], None),               # a passing 401: the next answer keeps, done
    ([SURE, NONE, SURE, SURE], 4),      # no answer between breaks the row
    ([NONE, NONE, SURE, SURE], 4),      # no answer at first is asked again
])
def test_a_sure_uninstall_at_start_retires_once_the_next_try_says_it_again(
        answers, retired_at):
    """Installer.start_rule, one call a poll: a sure uninstall answer (401) retires the
    node only when the next try says it again, so a passing 401 of an API server that
    could not check the token does not retire a node that keeps netattach."""
    import argparse

    from netattach.install import loop
    inst = object.__new__(loop.Installer)
    inst.args = argparse.Namespace(uninstall_timeout=30.0)
    inst._wait_log = loop._Every(60)
    left = list(answers)
    inst.check_uninstall_rule = lambda: left.pop(0)  # type: ignore[method-assign]
    inst.ask_uninstalled = lambda budget: left.pop(0)  # type: ignore[method-assign]
    inst.last_one_out = lambda fd: True  # type: ignore[method-assign]
    retires: list[int] = []
    inst.retire = lambda presence, deadline: retires.append(presence)  # type: ignore
    rule = loop._StartRule()
    for call in range(1, len(answers) + 1):
        presence = os.open(os.devnull, os.O_RDONLY)
        reason = inst.start_rule(rule, presence)
        if reason is None:
            os.close(presence)
        if call == retired_at:
            assert reason == "401" and retires == [presence]
            break
        assert reason is None and retires == []
        if rule.done:
            break
    assert left == [] and rule.done == (retired_at is None)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_no_answer_is_asked_again_until_the_timeout_then_kept():
    clock, budgets = Clock(), []

    def ask(budget: float) -> Verdict:
        budgets.append(budget)
        clock.now += 0.5  # a refused connection takes a moment
        return Verdict(None, "API server unreachable")

    verdict = decide(ask, lambda: False, 5.0, clock, clock.sleep)
    assert verdict.uninstall is False and "no answer from the API server within 5 s" in \
        verdict.reason and "unreachable" in verdict.reason
    assert len(budgets) > 2 and budgets[0] == 5.0 and all(b > 0 for b in budgets)
    assert clock.now <= 5.0  # never past the timeout (the grace period)


@pytest.mark.parametrize("final", [True, False])
def test_the_first_answer_decides(final):
    clock, answers = Clock(), [Verdict(None, "503"), Verdict(None, "503"),
                               Verdict(final, "answer")]
    verdict = decide(lambda budget: answers.pop(0), lambda: False, 5.0, clock, clock.sleep)
    assert verdict == Verdict(final, "answer") and answers == []


def test_another_installer_keeps_without_asking():
    asked = []
    verdict = decide(lambda budget: asked.append(budget) or Verdict(True, "404"),
                     lambda: True, 5.0)
    assert verdict.uninstall is False and "another netattach installer" in verdict.reason
    assert asked == []


# ---------------------------------------------------------------- the retired conflist

PRIMARY_CONF = {"cniVersion": "1.0.0", "name": "k8s", "plugins": [
    {"type": "bridge", "capabilities": {"portMappings": True}}]}


def _active(thick: bool) -> bytes:
    settings = install_primary.PluginSettings(
        conf_dir="/etc/cni/net.d", bin_dir="/opt/cni/bin", cni_dir="/var/lib/cni/netattach",
        kubeconfig="/etc/cni/net.d/netattach.d/netattach.kubeconfig", log_level="info",
        hotplug=thick, plugin_type="netattach-shim" if thick else "netattach",
        daemon_socket_dir="/run/netattach" if thick else None)
    primary = install_primary.Primary("/host/10-k8s.conflist", PRIMARY_CONF, "1.0.0")
    return install_primary.render_conflist("/etc/cni/net.d/10-k8s.conflist", primary, settings)


@pytest.mark.parametrize("thick", [False, True])
def test_the_retired_conflist_is_thin_netattach_naming_itself(thick):
    active = json.loads(_active(thick))
    doc = json.loads(retired_conflist(_active(thick), "/etc/cni/net.d/00-netattach.conflist"))
    [entry] = doc["plugins"]
    assert entry["type"] == "netattach"
    assert "daemonSocketDir" not in entry and "hotplug" not in entry
    assert entry["retired"] == {"conflist": "/etc/cni/net.d/00-netattach.conflist"}
    unchanged = {k: v for k, v in active["plugins"][0].items()
                 if k not in ("type", "daemonSocketDir", "hotplug")}
    assert {k: v for k, v in entry.items() if k in unchanged} == unchanged
    assert {k: v for k, v in doc.items() if k != "plugins"} == \
        {k: v for k, v in active.items() if k != "plugins"}
    assert nodefiles.is_retired(doc) and not nodefiles.is_retired(active)
    conf = parse_netconf({**entry, "cniVersion": doc["cniVersion"]})
    assert conf.retired_conflist == "/etc/cni/net.d/00-netattach.conflist"
    assert parse_netconf({**active["plugins"][0], "cniVersion": "1.0.0"}).retired_conflist is None


@pytest.mark.parametrize("retired, why", [
    ({"conflist": "00-netattach.conflist"}, "not an absolute path"),
    ({"conflist": "/etc/cni/net.d/10-flannel.conflist"}, "not an absolute path to "),
    ({"conflist": "/etc/cni/net.d/00-netattach.conflist", "also": 1}, "retired"),
    ({}, "retired"),
    (True, "retired"),
])
def test_a_bad_retired_key_is_code_7(retired, why):
    with pytest.raises(CniError) as e:
        parse_netconf({"type": "netattach", "clusterNetwork": "/x", "retired": retired})
    assert e.value.code == 7 and why in e.value.msg


def test_the_node_daemon_refuses_the_retired_configuration(tmp_path):
    conf = {"cniVersion": "1.0.0", "type": "netattach", "clusterNetwork": "/x",
            "retired": {"conflist": str(tmp_path / "00-netattach.conflist")}}
    doc, code = cni_main({"CNI_COMMAND": "DEL", "CNI_CONTAINERID": "c1", "CNI_IFNAME": "eth0",
                          "CNI_PATH": "/x"}, json.dumps(conf).encode(), orchestrator=object())
    assert code == 1 and doc["code"] == 7 and "thin netattach" in doc["msg"]


# ---------------------------------------------------------------- tenants cannot carry it

@pytest.mark.parametrize("plugin_type", ["netattach", "netattach-shim"])
@pytest.mark.parametrize("own_type", ["netattach", "netattach-shim"])
def test_a_delegate_naming_netattach_is_netattach_whatever_the_mode(plugin_type, own_type):
    """A NAD, claim or chain config whose plugin is netattach (either executable) would
    run netattach with a configuration its author wrote (a `retired` key, a cniDir...):
    is_own says so in thin and thick mode alike, and build_plan refuses it."""
    conf = parse_netconf({"type": own_type, "clusterNetwork": "/x"})
    config = NetworkConfig.from_dict({"cniVersion": "1.0.0", "name": "evil", "plugins": [
        {"type": "bridge"}, {"type": plugin_type, "clusterNetwork": "/x",
                             "retired": {"conflist": "/etc/cni/net.d/00-netattach.conflist"}}]},
        "ns1/evil")
    assert is_own(config, conf)


def test_a_nad_naming_netattach_is_refused_before_any_child(tmp_path, monkeypatch):
    """Through the orchestrator: a NAD whose config is netattach carrying `retired` fails
    the ADD with code 7 naming it; netattach's own conf is unchanged (no retired mode:
    nothing runs, and the state is released)."""
    evil = {"cniVersion": "1.0.0", "name": "evil", "type": "netattach-shim",
            "clusterNetwork": "/x", "cniDir": str(tmp_path / "elsewhere"),
            "retired": {"conflist": "/etc/cni/net.d/00-netattach.conflist"}}
    monkeypatch.setattr(ta, "NET_B", evil)
    bed = Bed(tmp_path)
    with pytest.raises(CniError) as e:
        bed.run("ADD")
    assert e.value.code == 7 and "is a delegating meta-plugin" in e.value.msg
    assert bed.exe.calls == [] and bed.files() == [f"{CID}.deleted"]
    assert not (tmp_path / "elsewhere").exists()


# ---------------------------------------------------------------- the retired commands

class RetiredBed(Bed):
    """test_attach's Bed with netattach's conflist retired: `00-netattach.conflist` in
    the conf dir holds the retired configuration, which every call passes on stdin; the
    bin dir holds what the installer put there, beside a child plugin's file."""

    def conf(self) -> dict:
        conf = super().conf()
        net_d = self.tmp / "net.d"
        conf["binDir"] = str(self.tmp / "bin")
        entry = {**conf, "retired": {"conflist": str(net_d / nodefiles.CONFLIST_NAME)}}
        if not self.conflist_written:
            self.conflist_written = True
            (net_d / nodefiles.CONFLIST_NAME).write_text(json.dumps(
                {"cniVersion": conf["cniVersion"], "name": "n", "plugins": [entry]}))
            bin_dir = self.tmp / "bin"
            (bin_dir / ".netattach-0123456789ab").mkdir(parents=True)
            (bin_dir / ".netattach-0123456789ab" / "netattach").write_text("x")
            (bin_dir / "netattach").symlink_to(".netattach-0123456789ab/netattach")
            (bin_dir / "netattach-shim").write_text(
                "#!/opt/cni/bin/.netattach-0123456789ab/shim/bin/python3 -SI\n")
            (bin_dir / "bridge").write_text("a child plugin")
            (net_d / nodefiles.KUBECONFIG_DIR_NAME).mkdir(mode=0o700)
            (net_d / nodefiles.KUBECONFIG_DIR_NAME / "netattach.kubeconfig").write_text("{}")
        return entry if self.retired else conf

    retired = False
    conflist_written = False

    def netattach_files(self) -> list[str]:
        net_d, bin_dir = self.tmp / "net.d", self.tmp / "bin"
        return sorted([p.name for p in net_d.iterdir() if p.name != "10-cluster.conf"]
                      + [p.name for p in bin_dir.iterdir() if p.name != "bridge"]
                      + (["state"] if (self.tmp / "state").exists() else []))


ALL_FILES = [".netattach-0123456789ab", "00-netattach.conflist", "netattach",
             "netattach-shim", "netattach.d", "state"]


@pytest.fixture
def rbed(tmp_path):
    return RetiredBed(tmp_path)


# what the DEL of each state of test_attach's recovery matrix does with the retired
# configuration: never a request, never code 11, and the last one removes every file
RETIRED_DELS = {"whole": ALL_DELS, "tombstone": [], "marker": [],
                "damaged-all-readable": ALL_DELS, "damaged-partly": READ_ONE,
                "missing": PRIMARY, "pending": PRIMARY, "predates": PRIMARY,
                "predates-multus": PRIMARY, "lost": PRIMARY}


@pytest.mark.parametrize("state", sorted(RETIRED_DELS))
def test_retired_del_recovery_matrix(rbed, caplog, state):
    SETUP[state](rbed)
    rbed.api.mode = "down"
    rbed.retired = True
    caplog.set_level(logging.DEBUG, logger="netattach")
    caplog.clear()
    assert rbed.run("DEL") is None
    assert rbed.dels() == RETIRED_DELS[state]
    assert rbed.api.calls == []
    assert rbed.netattach_files() == []  # the last sandbox: every netattach file gone
    assert (rbed.tmp / "net.d" / "10-cluster.conf").exists()
    assert (rbed.tmp / "bin" / "bridge").exists()
    assert "no sandbox needs it any more" in caplog.text
    if state in ("missing", "predates", "predates-multus", "lost"):  # no state: quiet
        assert max(r.levelno for r in caplog.records) == logging.INFO
    if state == "predates":  # released as libcni's cache has it, and its entry gone
        assert "without netattach" in caplog.text
        assert not (rbed.tmp / "libcni" / "results" / f"cluster-net-{CID}-eth0").exists()


def test_retired_add_attaches_the_cluster_default_network_alone_and_saves_nothing(rbed):
    rbed.conf()  # the files as installed
    rbed.retired = True
    rbed.api.mode = "down"
    out = rbed.run("ADD")
    assert [(c, t, i) for c, t, i, _ in rbed.exe.calls] == [("ADD", "fake-bridge", "eth0")]
    assert out["cniVersion"] == "1.0.0" and out["interfaces"][0]["name"] == "eth0"
    assert rbed.api.calls == []
    assert not (rbed.tmp / "state").exists()
    # nothing netattach attached is left, so its files went with this call
    assert rbed.netattach_files() == []


def test_retired_del_waits_for_the_last_sandbox_netattach_attached(rbed, tmp_path):
    SETUP["whole"](rbed)
    rbed.retired = True
    other = "0ther"
    StateStore(str(tmp_path / "state")).save(SavedState(container_id=other, netns="",
                                                        ifname="eth0"))
    rbed.run("DEL")
    assert rbed.netattach_files() == ALL_FILES  # the other sandbox still needs netattach
    assert rbed.store.container_ids() == [other]


def test_nothing_is_removed_while_an_installer_runs_or_once_reinstalled(rbed, tmp_path):
    SETUP["whole"](rbed)
    rbed.retired = True
    kube_dir = tmp_path / "net.d" / nodefiles.KUBECONFIG_DIR_NAME
    fd = os.open(kube_dir / nodefiles.PRESENCE_LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # an installer is running
        rbed.run("DEL")
        assert rbed.netattach_files() == ALL_FILES
    finally:
        os.close(fd)
    removal = nodefiles.remove_when_unused(str(tmp_path / "net.d" / nodefiles.CONFLIST_NAME),
                                           str(tmp_path / "bin"), str(tmp_path / "state"))
    assert removal.outcome == nodefiles.REMOVED  # once it is gone


def test_a_reinstalled_conflist_is_never_removed(rbed, tmp_path):
    SETUP["whole"](rbed)
    conflist = tmp_path / "net.d" / nodefiles.CONFLIST_NAME
    active = json.loads(conflist.read_text())
    del active["plugins"][0]["retired"]
    rbed.retired = True
    tmp = conflist.with_name(".x")
    tmp.write_text(json.dumps(active))
    os.rename(tmp, conflist)  # as the installer replaces it
    rbed.run("DEL")  # the runtime had read the retired one
    assert rbed.dels() == ALL_DELS
    assert rbed.netattach_files() == ALL_FILES


class GcRecorder(FakeExecutor):
    """FakeExecutor that also keeps each GC's valid attachments."""

    def __init__(self) -> None:
        super().__init__()
        self.gc: list[list[dict]] = []

    def run(self, path, command, config, env, timeout):
        if command == "GC":
            self.gc.append(config["cni.dev/valid-attachments"])
        return super().run(path, command, config, env, timeout)


def test_retired_gc_forwards_the_sandboxes_netattach_did_not_attach(rbed, monkeypatch):
    """GC with the retired configuration: a stale state is DEL-ed, and a valid pair
    without state (a sandbox ADDed while retired) goes to the delegates as the runtime
    gave it, instead of failing the GC with code 3; then, no state left, the files go."""
    monkeypatch.setattr(ta, "CLUSTER", {**ta.CLUSTER, "cniVersion": "1.1.0"})
    rbed.exe = GcRecorder()
    SETUP["whole"](rbed)
    rbed.retired = True
    rbed.run("GC", cniVersion="1.1.0",
             **{"cni.dev/valid-attachments": [{"containerID": "late", "ifname": "eth0"}]})
    assert rbed.dels() == ALL_DELS
    assert rbed.exe.gc == [[{"containerID": "late", "ifname": "eth0"}]]
    assert rbed.api.calls == []
    assert rbed.netattach_files() == []


def test_retired_check_without_state_is_the_cluster_default_networks(rbed):
    rbed.conf()
    rbed.retired = True
    prev = {"cniVersion": "1.0.0", "interfaces": [{"name": "eth0"}], "ips": []}
    rbed.run("CHECK", prevResult=prev)  # CLUSTER is 0.3.1: nothing to check
    assert rbed.exe.calls == []
    with pytest.raises(CniError) as e:
        rbed.run("CHECK", cniVersion="0.3.1")
    assert e.value.code == 1


# ---------------------------------------------------------------- the removal itself

def _node(tmp_path: Path, retired: bool = True) -> tuple[str, str, str]:
    conf, bin_dir, state = tmp_path / "net.d", tmp_path / "bin", tmp_path / "lib" / "na"
    conf.mkdir()
    bin_dir.mkdir()
    entry = {"type": "netattach"}
    if retired:
        entry["retired"] = {"conflist": str(conf / nodefiles.CONFLIST_NAME)}
    (conf / nodefiles.CONFLIST_NAME).write_text(json.dumps({"plugins": [entry]}))
    (conf / "10-primary.conf").write_text("{}")
    (bin_dir / "netattach").write_text("x")
    (bin_dir / ".netattach.tmp-12.d").mkdir()
    (bin_dir / "bridge").write_text("x")
    return str(conf / nodefiles.CONFLIST_NAME), str(bin_dir), str(state)


def test_removal_outcomes(tmp_path):
    conflist, bin_dir, state = _node(tmp_path)
    store = StateStore(state)
    with store.lock("c1"):  # an operation runs
        removal = nodefiles.remove_when_unused(conflist, bin_dir, state)
        assert removal.outcome == nodefiles.BUSY and "c1" in removal.detail
    fd = nodefiles.lock_conflist(conflist, exclusive=False)  # a retired command runs
    assert nodefiles.remove_when_unused(conflist, bin_dir, state).outcome == nodefiles.BUSY
    os.close(fd)
    Path(state, "c2.json").write_text("{}")
    removal = nodefiles.remove_when_unused(conflist, bin_dir, state)
    assert removal.outcome == nodefiles.ATTACHED and "c2" in removal.detail
    os.unlink(Path(state, "c2.json"))
    for name in ("c2.deleted", "c2.json.corrupt", ".c3.json.tmp-77", "c4.json.tmp12",
                 ".tombstones-pruned", "c5.lock"):
        Path(state, name).write_text("")
    removal = nodefiles.remove_when_unused(conflist, bin_dir, state)
    assert removal.outcome == nodefiles.REMOVED and removal.left == ()
    assert sorted(os.listdir(tmp_path / "net.d")) == ["10-primary.conf"]
    assert sorted(os.listdir(bin_dir)) == ["bridge"]
    assert not os.path.exists(state) and os.path.isdir(tmp_path / "lib")
    assert nodefiles.remove_when_unused(conflist, bin_dir, state).outcome == nodefiles.GONE


def test_a_foreign_file_in_the_state_dir_is_left_with_the_dir(tmp_path):
    conflist, bin_dir, state = _node(tmp_path)
    os.makedirs(state)
    Path(state, "README").write_text("the admin's")
    Path(state, "c1.deleted").write_text("")
    removal = nodefiles.remove_when_unused(conflist, bin_dir, state)
    assert removal.outcome == nodefiles.REMOVED
    assert os.listdir(state) == ["README"] and "not netattach's" in removal.left[0]


def test_an_active_conflist_is_never_removed(tmp_path):
    conflist, bin_dir, state = _node(tmp_path, retired=False)
    assert nodefiles.remove_when_unused(conflist, bin_dir, state).outcome == \
        nodefiles.NOT_RETIRED
    assert os.path.exists(conflist) and os.path.exists(os.path.join(bin_dir, "netattach"))


def test_a_symlinked_conflist_is_not_followed(tmp_path):
    conflist, bin_dir, state = _node(tmp_path)
    real = tmp_path / "elsewhere.conflist"
    os.rename(conflist, real)
    os.symlink(real, conflist)
    assert nodefiles.remove_when_unused(conflist, bin_dir, state).outcome == \
        nodefiles.NOT_RETIRED
    assert real.exists()


def test_the_runtimes_cache_entries_of_the_network_go_with_the_files(tmp_path):
    """libcni's result cache: the entries of netattach's network name go (the runtime
    would never remove them once it DELs through the cluster default network's name);
    another network's, whatever its file name, a file that is no cache record and a
    symlink stay."""
    conflist, bin_dir, state = _node(tmp_path)
    cache = tmp_path / "cni" / "results"
    cache.mkdir(parents=True)

    def entry(name: str, network: str) -> Path:
        path = cache / name
        path.write_text(json.dumps({"kind": "cniCacheV1", "networkName": network,
                                    "containerId": "c1", "ifName": "eth0"}))
        return path

    entry("netattach-cni-network-c1-eth0", "netattach-cni-network")
    entry("netattach-cni-network-c2-eth0", "netattach-cni-network")
    kept = [entry("netattach-cni-network-2-c1-eth0", "netattach-cni-network-2"),
            entry("cluster-net-c1-eth0", "cluster-net")]
    (cache / "netattach-cni-network-junk").write_text("not json")
    (cache / "netattach-cni-network-link").symlink_to(kept[1])
    removal = nodefiles.remove_when_unused(conflist, bin_dir, state,
                                           network="netattach-cni-network",
                                           cache_dir=str(tmp_path / "cni"))
    assert removal.outcome == nodefiles.REMOVED and removal.left == ()
    assert sorted(p.name for p in cache.iterdir()) == [
        "cluster-net-c1-eth0", "netattach-cni-network-2-c1-eth0", "netattach-cni-network-junk",
        "netattach-cni-network-link"]


def _retired_add(b: Bed) -> None:
    """No state: the runtime ADDed the sandbox with the retired conflist (the cluster
    default network alone, nothing saved); its libcni entry is under the conflist's
    name, with the retired configuration."""
    b.conf()  # the files as installed
    entry = {**b.conf(), "retired": {"conflist": str(b.tmp / "net.d" /
                                                     nodefiles.CONFLIST_NAME)}}
    ta.libcni_entry(b, "netattach", {"cniVersion": "1.0.0", "name": "netattach",
                                     "plugins": [entry]})


@pytest.mark.parametrize("retired", [True, False])
def test_a_sandbox_the_retired_conflist_added_is_the_cluster_default_networks(
        rbed, caplog, retired):
    """Its DEL with the retired conflist, or after a reinstall with the active one: the
    cluster default network alone (its libcni entry names the retired configuration),
    quietly, without the API server, the entry removed."""
    _retired_add(rbed)
    rbed.retired = retired
    caplog.set_level(logging.DEBUG, logger="netattach")
    caplog.clear()
    rbed.run("DEL")
    assert rbed.dels() == PRIMARY and rbed.api.calls == []
    assert max(r.levelno for r in caplog.records) == logging.INFO
    assert "network 'cluster-net' alone, without netattach" in caplog.text
    assert list((rbed.tmp / "libcni" / "results").iterdir()) == []
