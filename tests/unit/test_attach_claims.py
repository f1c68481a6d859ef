"""The orchestrator with a pod's DRA ResourceClaims, through the fakes of test_attach: the
claim attachments come after the NAD selections in one plan, one rollback and one state;
the claim's status.devices is written on ADD (Ready True after the answer where the seam
sends writes then; Ready False at once on failure) and cleared by DEL, best effort."""
from __future__ import annotations

import copy
import json
import logging
from dataclasses import dataclass, field
from typing import Any

import pytest

from netattach.cni.errors import CniError
from netattach.spec import claims
from tests.unit.test_attach import CID, NETNS, NS, POD, UID, Bed, FakeApi

DRIVER = claims.DRIVER
PARAMS = {"ifName": "dra0", "cniVersion": "1.0.0",
          "plugins": [{"type": "fake-macvlan", "config": {"mode": "bridge"},
                       "args": [{"field": "master", "valueFrom": {"attribute": "name"}}]}]}
CLAIM = {"metadata": {"namespace": NS, "name": "c1", "uid": "claim-uid",
                      "resourceVersion": "7"},
         "spec": {"devices": {"requests": [{"name": "macvlan0", "exactly": {
             "deviceClassName": claims.DEVICE_CLASS}}]}},
         "status": {"reservedFor": [{"resource": "pods", "name": POD, "uid": UID}],
                    "allocation": {"devices": {
                        "results": [{"request": "macvlan0", "driver": DRIVER, "pool": "node",
                                     "device": "cni"}],
                        "config": [{"requests": ["macvlan0"], "source": "FromClaim",
                                    "opaque": {"driver": DRIVER, "parameters": PARAMS}}]}}}}
SLICE = {"metadata": {"name": "s"}, "spec": {"driver": DRIVER, "pool": {"name": "node"},
                                             "devices": [{"name": "cni", "attributes": {
                                                 "name": {"string": "eth9"}}}]}}


@dataclass
class ClaimApi(FakeApi):
    """FakeApi whose pod references ResourceClaim c1; records the status applies
    (namespace, name, devices, resourceVersion, after_answer)."""
    claim: dict[str, Any] = field(default_factory=lambda: copy.deepcopy(CLAIM))
    applied: list[tuple[str, str, list, str, bool]] = field(default_factory=list)

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        pod = super().get_pod(namespace, name)
        if pod is not None:
            pod["spec"] = {"resourceClaims": [{"name": "net", "resourceClaimName": "c1"}]}
        return pod

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        self._ask("GET resourceclaim", f"{namespace}/{name}")
        return self.claim

    def list_resource_slices(self, driver: str) -> list[dict[str, Any]]:
        self._ask("LIST resourceslices", driver)
        return [SLICE]

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        self._ask("GET configmap", f"{namespace}/{name}")
        return None

    def apply_claim_devices(self, namespace: str, name: str, devices: list, uid: str = "",
                            resource_version: str = "", after_answer: bool = False) -> None:
        self._ask("APPLY resourceclaim status", f"{namespace}/{name}")
        self.applied.append((namespace, name, devices, resource_version, after_answer))
        if self.claim is not None:
            self.claim["status"]["devices"] = devices


@pytest.fixture
def bed(tmp_path):
    return Bed(tmp_path, api=ClaimApi())


def test_claim_attachment_after_the_nads_in_one_plan_state_and_status(bed):
    bed.run("ADD")
    assert [(c, t, i) for c, t, i, _ in bed.exe.calls] == [
        ("ADD", "fake-bridge", "eth0"), ("ADD", "fake-macvlan", "net1"),
        ("ADD", "fake-tuning", "net1"), ("ADD", "fake-ptp", "data0"),
        ("ADD", "fake-macvlan", "dra0")]
    saved = bed.store.load(CID).attachments
    assert saved[-1].network == "resourceclaim:c1/macvlan0"
    assert saved[-1].config["plugins"][0]["master"] == "eth9"  # from the ResourceSlice
    assert saved[-1].claim == {"namespace": NS, "name": "c1", "uid": "claim-uid",
                               "request": "macvlan0", "driver": DRIVER, "pool": "node",
                               "device": "cni"}
    status = json.loads(bed.api.patched[0]["k8s.v1.cni.cncf.io/network-status"])
    assert status[-1]["name"] == "resourceclaim:c1/macvlan0"
    assert status[-1]["interface"] == "dra0"
    [(ns, name, [entry], _, after)] = bed.api.applied
    assert (ns, name, after) == (NS, "c1", True)
    assert entry["conditions"][0]["status"] == "True"
    assert entry["networkData"]["interfaceName"] == "dra0"
    assert entry["networkData"]["ips"] == ["10.0.5.2/24"]


def test_a_failing_claim_child_rolls_back_the_nads_too_and_reports_not_ready_at_once(bed):
    bed.exe.fail = {("ADD", "fake-macvlan")}
    bed.api.networks = ""  # only the claim's macvlan uses the type
    with pytest.raises(CniError) as ei:
        bed.run("ADD")
    assert "resourceclaim:c1/macvlan0" in ei.value.msg
    assert bed.dels() == [("fake-macvlan", "dra0"), ("fake-bridge", "eth0")]
    assert bed.files() == [f"{CID}.deleted"]
    [(_, _, [entry], _, after)] = bed.api.applied
    assert after is False  # before the answer: the runtime's DEL would drop a queued one
    assert entry["conditions"][0]["status"] == "False"
    assert "fake-macvlan ADD failed on purpose" in entry["conditions"][0]["message"]


def test_a_validation_failure_runs_no_child(bed):
    bed.api.claim["status"]["reservedFor"] = []
    with pytest.raises(CniError) as ei:
        bed.run("ADD")
    assert ei.value.code == 7 and "reserved for exactly this pod" in ei.value.msg
    assert bed.exe.calls == [] and bed.api.applied == []


def test_a_claims_own_config_refused_by_claim_config_sources_runs_no_child(bed):
    """claimConfigSources "class" and a config of source FromClaim: code 7 before any
    child runs or any state is kept, naming the pod, the claim, the request and the key;
    the claim's entry says Ready False with that message, written before the answer."""
    with pytest.raises(CniError) as ei:
        bed.run("ADD", claimConfigSources="class")
    msg = ei.value.msg
    assert ei.value.code == 7
    assert msg.startswith(f"pod {NS}/{POD}: ResourceClaim {NS}/c1 request macvlan0: "), msg
    assert 'claimConfigSources is "class"' in msg and "FromClaim" in msg
    assert bed.exe.calls == [] and bed.files() == [f"{CID}.deleted"]  # nothing kept
    [(ns, name, [entry], _, after)] = bed.api.applied
    assert (ns, name, after) == (NS, "c1", False)
    assert (entry["driver"], entry["pool"], entry["device"]) == (DRIVER, "node", "cni")
    [cond] = entry["conditions"]
    assert (cond["status"], cond["reason"], cond["message"]) == (
        "False", "NetworkInterfaceNotReady", msg)
    assert "networkData" not in entry and "data" not in entry


def test_a_config_of_the_device_class_runs_under_class_only(bed):
    configs = bed.api.claim["status"]["allocation"]["devices"]["config"]
    configs[0]["source"] = "FromClass"
    bed.run("ADD", claimConfigSources="class")
    assert bed.exe.calls[-1][:3] == ("ADD", "fake-macvlan", "dra0")
    [(_, _, [entry], _, after)] = bed.api.applied
    assert after is True and entry["conditions"][0]["status"] == "True"


def test_del_clears_the_claims_entries_conditionally(bed):
    bed.added()
    bed.run("DEL")
    assert bed.api.applied[-1] == (NS, "c1", [], "7", False)
    assert bed.files() == [f"{CID}.deleted"]


def test_del_leaves_entries_a_later_sandbox_wrote(bed):
    bed.added()
    bed.api.claim["status"]["devices"] = [{"driver": DRIVER, "pool": "node", "device": "cni",
                                           "data": {"interfaces": [{"sandbox": "/run/other"}]}}]
    bed.api.applied.clear()
    bed.run("DEL")
    assert bed.api.applied == []


def test_del_succeeds_when_the_claim_cannot_be_cleared(bed, caplog):
    bed.added()
    bed.api.mode = "down"
    with caplog.at_level(logging.WARNING, logger="netattach"):
        bed.run("DEL")
    assert bed.files() == [f"{CID}.deleted"]
    assert "status.devices not cleared" in caplog.text


def test_del_of_a_deleted_claim_is_quiet(bed):
    bed.added()
    bed.api.claim = None
    bed.run("DEL")
    assert bed.files() == [f"{CID}.deleted"]


POD_ANNOTATIONS = "io.kubernetes.cri.pod-annotations"


def test_runtime_annotations_hide_claims_unless_resource_claims_is_on(bed):
    rc = {POD_ANNOTATIONS: {"k8s.v1.cni.cncf.io/networks": "net-a"}}
    bed.run("ADD", runtimeConfig=rc)
    assert "GET pod" not in [c[0] for c in bed.api.calls]
    assert [a.ifname for a in bed.store.load(CID).attachments] == ["eth0", "net1"]
    bed.run("DEL")
    bed.api.calls.clear()
    bed.run("ADD", runtimeConfig=rc, resourceClaims=True)
    assert bed.api.calls[0][0] == "GET pod"
    assert [a.ifname for a in bed.store.load(CID).attachments][-1] == "dra0"


def test_netns_of_the_state_is_what_del_compares(bed):
    """The sandbox the ADD saved is the one whose entries DEL may clear."""
    bed.added()
    bed.api.claim["status"]["devices"][0]["data"]["interfaces"][-1]["sandbox"] = NETNS
    bed.run("DEL")
    assert bed.api.applied[-1][2] == []


def test_gc_of_a_stale_container_releases_its_claim_network_and_clears_the_claim(bed):
    bed.run("ADD", cniVersion="1.1.0")
    bed.api.applied.clear()
    bed.run("GC", cniVersion="1.1.0", **{"cni.dev/valid-attachments": []})
    assert ("fake-macvlan", "dra0") in bed.dels()
    assert bed.api.applied == [(NS, "c1", [], "7", False)]
    assert bed.files() == [f"{CID}.deleted"]


def test_del_from_saved_state_needs_no_api_for_a_pod_without_claims(tmp_path):
    b = Bed(tmp_path)
    b.added()
    b.run("DEL")
    assert b.api.calls == []


def test_del_without_state_releases_the_nads_when_the_claim_is_gone(bed, caplog):
    bed.added()
    (bed.tmp / "state" / f"{CID}.json").unlink()
    bed.api.claim = None
    with caplog.at_level(logging.WARNING, logger="netattach"):
        bed.run("DEL")
    assert ("fake-ptp", "data0") in bed.dels() and ("fake-bridge", "eth0") in bed.dels()
    assert ("fake-macvlan", "dra0") not in bed.dels()
    assert "without the pod's claim networks" in caplog.text
    assert bed.files() == [f"{CID}.deleted"]


def test_del_without_state_rebuilds_claim_networks_too(bed):
    bed.added()
    (bed.tmp / "state" / f"{CID}.json").unlink()
    bed.run("DEL")
    assert ("fake-macvlan", "dra0") in bed.dels()
    assert bed.api.applied[-1][2] == []  # and clears the claim's entries
