"""devices.py without a kubelet: handing out device IDs, the NAD annotation, device-info files."""
import json
import logging
import os
import stat

import pytest

from netattach.cni.errors import ConfigError
from netattach.node import devices
from netattach.node.devices import (
    RESOURCE_NAME_ANNOTATION,
    DeviceError,
    DeviceInfoError,
    DeviceNotAllocated,
    assign_device_ids,
    cdi_device_id,
    cni_device_info_path,
    collect_device_ids,
    copy_device_info,
    dp_device_info_path,
    nad_resource_name,
    read_device_info,
    remove_device_info,
    reserve_chosen_devices,
    save_device_info,
)

SRIOV = "intel.com/sriov_netdevice"
RDMA = "nvidia.com/rdma"
PCI_INFO = {"type": "pci", "version": "1.1.0",
            "pci": {"pci-address": "0000:18:02.5", "pf-pci-address": "0000:18:00.0"}}

# --- assign_device_ids ------------------------------------------------------------------


@pytest.mark.parametrize("requests,allocated,expected", [
    ([], {}, []),
    ([None, None], {}, [None, None]),
    ([SRIOV], {SRIOV: ["0000:18:02.5"]}, ["0000:18:02.5"]),
    # one per attachment, in plan order
    ([SRIOV, SRIOV], {SRIOV: ["a", "b"]}, ["a", "b"]),
    # attachments without a resource are skipped and do not consume devices
    ([None, SRIOV, None, SRIOV], {SRIOV: ["a", "b"]}, [None, "a", None, "b"]),
    # resources are counted independently, interleaved
    ([SRIOV, RDMA, SRIOV, RDMA], {SRIOV: ["s1", "s2"], RDMA: ["r1", "r2"]},
     ["s1", "r1", "s2", "r2"]),
    # more devices than attachments: the first ones, the rest unused
    ([SRIOV], {SRIOV: ["a", "b", "c"]}, ["a"]),
    # resources nobody asked for do not matter
    ([None], {RDMA: []}, [None]),
])
def test_assign_device_ids(requests, allocated, expected):
    assert assign_device_ids(requests, allocated) == expected


def test_assign_is_pure():
    allocated = {SRIOV: ["a", "b"]}
    requests = [SRIOV, None]
    assign_device_ids(requests, allocated)
    assert allocated == {SRIOV: ["a", "b"]} and requests == [SRIOV, None]


@pytest.mark.parametrize("requests,allocated,fragments", [
    ([SRIOV, SRIOV, SRIOV], {SRIOV: ["a", "b"]}, [SRIOV, "3 attachments need", "2 allocated"]),
    ([SRIOV], {}, [SRIOV, "1 attachment needs", "0 allocated"]),
    ([RDMA], {SRIOV: ["a"]}, [RDMA, "0 allocated"]),
])
def test_assign_not_enough_devices(requests, allocated, fragments):
    with pytest.raises(DeviceError) as e:
        assign_device_ids(requests, allocated)
    for f in fragments:
        assert f in str(e.value)


def test_assign_reports_every_short_resource():
    with pytest.raises(DeviceError) as e:
        assign_device_ids([SRIOV, RDMA, RDMA], {SRIOV: [], RDMA: ["r"]})
    msg = str(e.value)
    assert (f"resource {SRIOV}: 1 attachment needs a device, 0 allocated to the pod (the "
            "kubelet reports no device-plugin resource and no ResourceClaim of that name") in msg
    assert f"resource {RDMA}: 2 attachments need a device, 1 allocated" in msg


# --- reserve_chosen_devices: a deviceID the pod chose (issue 21) ----------------------------


@pytest.mark.parametrize("chosen,allocated,left", [
    ([], {}, {}),
    ([None, None], {SRIOV: ["a"]}, {SRIOV: ["a"]}),
    # a chosen device of the pod's own is taken out of what the others get, order kept
    ([(SRIOV, "b")], {SRIOV: ["a", "b", "c"]}, {SRIOV: ["a", "c"]}),
    ([None, (SRIOV, "a"), (RDMA, "r2")], {SRIOV: ["a", "b"], RDMA: ["r1", "r2"]},
     {SRIOV: ["b"], RDMA: ["r1"]}),
    # the same ID under another resource is another device
    ([(SRIOV, "x")], {SRIOV: ["x"], RDMA: ["x"]}, {SRIOV: [], RDMA: ["x"]}),
])
def test_reserve_chosen_devices(chosen, allocated, left):
    before = {r: list(ids) for r, ids in allocated.items()}
    assert reserve_chosen_devices(chosen, allocated) == left
    assert allocated == before  # pure


@pytest.mark.parametrize("chosen,allocated,index,fragments", [
    # another pod's device (or any the kubelet did not give this pod)
    ([(SRIOV, "0000:18:02.7")], {SRIOV: ["0000:18:02.5", "0000:18:02.6"]}, 0,
     ["deviceID '0000:18:02.7' is not a device the kubelet allocated to the pod for resource "
      f"{SRIOV} (the pod has '0000:18:02.5', '0000:18:02.6')"]),
    # none of that resource at all
    ([None, (SRIOV, "a")], {SRIOV: []}, 1, ["deviceID 'a'", "(the pod has none)"]),
    ([(RDMA, "a")], {SRIOV: ["a"]}, 0, [f"resource {RDMA}", "(the pod has none)"]),
    # the device of one resource named for a NAD of another
    ([(SRIOV, "r1")], {SRIOV: ["a"], RDMA: ["r1"]}, 0, [f"for resource {SRIOV}"]),
    # one device chosen for two attachments
    ([(SRIOV, "a"), None, (SRIOV, "a")], {SRIOV: ["a", "b"]}, 2,
     ["deviceID 'a' of resource", "chosen by an earlier element"]),
])
def test_reserve_refuses_a_device_not_allocated_to_the_pod(chosen, allocated, index, fragments):
    with pytest.raises(DeviceNotAllocated) as e:
        reserve_chosen_devices(chosen, allocated)
    assert e.value.code == 7 and e.value.index == index
    for f in fragments:
        assert f in e.value.msg


def test_chosen_then_assigned_devices_never_share_one():
    """The attachments that chose no device get the pod's others, in order."""
    chosen = [None, (SRIOV, "a"), None]
    left = reserve_chosen_devices(chosen, {SRIOV: ["a", "b", "c"]})
    assert assign_device_ids([SRIOV, None, SRIOV], left) == ["b", None, "c"]
    with pytest.raises(DeviceError, match="2 attachments need a device, 1 allocated"):
        assign_device_ids([SRIOV, None, SRIOV],
                          reserve_chosen_devices(chosen, {SRIOV: ["a", "b"]}))


# --- collect_device_ids: device plugins and DRA claims (Multus v4.2.3's rule) -----------

NET = "net.example.com"  # a DRA driver
CLAIM = "sf"  # a ResourceClaim's name, as a NAD's resourceName names it


def dev(device, *cdi, driver=NET, pool="node-1"):
    """One ClaimResource as collect_device_ids takes it."""
    return (driver, pool, device, list(cdi))


@pytest.mark.parametrize("name,expected", [
    ("example.com/net=vf-0", "vf-0"),
    ("nvidia.com/net=mlx5_0:1", "mlx5_0:1"),
    ("example.com/net=0000:18:02.5", "0000:18:02.5"),
    # not <kind>=<device>: Multus logs "Invalid CDI format" and skips it
    ("vf-0", None),
    ("example.com/net=vf=0", None),
    ("", None),
    # an empty device part: Multus would take "" (no device ID for the attachment)
    ("example.com/net=", None),
])
def test_cdi_device_id(name, expected):
    assert cdi_device_id(name) == expected


def test_claim_devices_by_claim_name():
    containers = [("app", [], [(CLAIM, [dev("vf-0", "example.com/net=vf-0")])])]
    assert collect_device_ids(containers, [CLAIM]) == {CLAIM: ["vf-0"]}


def test_device_plugin_devices_unchanged():
    containers = [("app", [(SRIOV, ["0000:18:02.6", "0000:18:02.5"]), (RDMA, ["mlx5_3"])], []),
                  ("side", [(SRIOV, ["0000:18:0a.2"])], [])]
    assert collect_device_ids(containers, [SRIOV, RDMA, "none.example.com/x"]) == {
        SRIOV: ["0000:18:02.6", "0000:18:02.5", "0000:18:0a.2"], RDMA: ["mlx5_3"],
        "none.example.com/x": []}


def test_both_kinds_in_one_pod_each_name_its_own_devices():
    containers = [("app", [(SRIOV, ["0000:18:02.5"])],
                   [(CLAIM, [dev("vf-0", "example.com/net=vf-0")]),
                    ("gpu", [dev("gpu-0", "example.com/gpu=gpu-0", driver="gpu.example.com")])])]
    got = collect_device_ids(containers, [CLAIM, SRIOV])
    assert got == {CLAIM: ["vf-0"], SRIOV: ["0000:18:02.5"]}
    assert list(got) == [CLAIM, SRIOV]


def test_one_name_for_both_kinds_merges_container_by_container():
    """Multus's one map: per container, its device-plugin devices, then its claims."""
    both = "both"
    containers = [("a", [(both, ["p1"])], [(both, [dev("d1", "k.io/c=d1")])]),
                  ("b", [(both, ["p2"])], [(both, [dev("d2", "k.io/c=d2")])])]
    assert collect_device_ids(containers, [both]) == {both: ["p1", "d1", "p2", "d2"]}


def test_kubelets_cumulative_cdi_devices_give_each_device_once():
    """kubelet 1.34 lists under a driver's k-th device the CDI devices of devices 1..k
    (testbed/netattach_testbed/kubelet.dynamic_resources shows the shape); Multus would give vf-0
    to the first two attachments. The allocation order is kept."""
    claim = [dev("vf-2", "example.com/net=vf-2"),
             dev("vf-0", "example.com/net=vf-2", "example.com/net=vf-0"),
             dev("vf-1", "example.com/net=vf-2", "example.com/net=vf-0", "example.com/net=vf-1")]
    got = collect_device_ids([("app", [], [(CLAIM, claim)])], [CLAIM])
    assert got == {CLAIM: ["vf-2", "vf-0", "vf-1"]}
    assert assign_device_ids([CLAIM, CLAIM, CLAIM], got) == ["vf-2", "vf-0", "vf-1"]


def test_claim_shared_by_containers_is_one_device():
    """The kubelet reports a claim under every container that references it (and twice
    under one that references two of its requests): still one device."""
    shared = (CLAIM, [dev("vf-0", "example.com/net=vf-0")])
    got = collect_device_ids([("app", [], [shared, shared]), ("side", [], [shared])], [CLAIM])
    assert got == {CLAIM: ["vf-0"]}
    with pytest.raises(DeviceError, match="2 attachments need a device, 1 allocated"):
        assign_device_ids([CLAIM, CLAIM], got)


def test_every_cdi_device_of_a_device_is_an_id():
    """A device may map to several CDI devices; Multus takes each (kubelet order)."""
    got = collect_device_ids([("app", [], [(CLAIM, [dev("vf-0", "a.io/net=vf-0",
                                                         "a.io/rdma=mlx5_0")])])], [CLAIM])
    assert got == {CLAIM: ["vf-0", "mlx5_0"]}


def test_claim_namespace_and_unwanted_claims_do_not_matter():
    containers = [("app", [], [("other", [dev("x", "k.io/c=x")]),
                               (CLAIM, [dev("vf-0", "example.com/net=vf-0")])])]
    assert collect_device_ids(containers, [CLAIM]) == {CLAIM: ["vf-0"]}
    assert collect_device_ids(containers, []) == {}


def test_a_device_plugin_resource_named_like_a_claim_device_is_not_a_claim():
    """The device ID space is per name: the same ID under two names is two devices."""
    containers = [("app", [(SRIOV, ["vf-0"])], [(CLAIM, [dev("vf-0", "example.com/net=vf-0")])])]
    assert collect_device_ids(containers, [SRIOV, CLAIM]) == {SRIOV: ["vf-0"], CLAIM: ["vf-0"]}


def test_devices_without_usable_cdi_names_give_no_id_and_are_warned(caplog):
    containers = [("app", [], [(CLAIM, [dev("vf-9"), dev("vf-0", "bad", "example.com/net=vf-0")])])]
    with caplog.at_level(logging.WARNING, logger="netattach.devices"):
        got = collect_device_ids(containers, [CLAIM], "team-a/web")
    assert got == {CLAIM: ["vf-0"]}
    text = caplog.text
    assert "team-a/web" in text and f"ResourceClaim {CLAIM}" in text
    assert f"{NET}/node-1/vf-9 has no CDI device" in text
    assert "'bad' is not <vendor>/<class>=<device>" in text


def test_unwanted_claims_are_not_warned_about(caplog):
    with caplog.at_level(logging.WARNING, logger="netattach.devices"):
        collect_device_ids([("app", [], [("other", [dev("x"), dev("y", "bad")])])], [CLAIM])
    assert caplog.text == ""


# --- nad_resource_name ------------------------------------------------------------------


def nad(annotations):
    return {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": "sriov-a", "namespace": "ns", "annotations": annotations},
            "spec": {"config": "{}"}}


def test_annotation_name():
    assert RESOURCE_NAME_ANNOTATION == "k8s.v1.cni.cncf.io/resourceName"


@pytest.mark.parametrize("obj,expected", [
    (nad({RESOURCE_NAME_ANNOTATION: SRIOV}), SRIOV),
    (nad({RESOURCE_NAME_ANNOTATION: f"  {SRIOV}\n"}), SRIOV),
    (nad({RESOURCE_NAME_ANNOTATION: ""}), None),
    (nad({RESOURCE_NAME_ANNOTATION: "  "}), None),
    (nad({"other": "x"}), None),
    (nad(None), None),
    (nad({RESOURCE_NAME_ANNOTATION: 3}), None),
    ({"metadata": {"name": "x"}}, None),
    ({}, None),
    ({"metadata": "junk"}, None),
])
def test_nad_resource_name(obj, expected):
    assert nad_resource_name(obj) == expected


# --- device-info paths ------------------------------------------------------------------


def test_paths_follow_the_device_info_spec():
    assert devices.DEVINFO_DIR == "/var/run/k8s.cni.cncf.io/devinfo"
    # §4.1: "/" in the resource name becomes "-"
    assert dp_device_info_path(SRIOV, "0000:18:02.5") == \
        "/var/run/k8s.cni.cncf.io/devinfo/dp/intel.com-sriov_netdevice-0000:18:02.5-device.json"
    # §4.2: one file per attachment in cni/
    assert cni_device_info_path("abc123", "net1") == \
        "/var/run/k8s.cni.cncf.io/devinfo/cni/abc123_net1"
    assert cni_device_info_path("abc", "net1", "/b") != cni_device_info_path("abc", "net2", "/b")


@pytest.mark.parametrize("resource,device", [("", "x"), ("r", ""), ("r\x00", "x")])
def test_dp_path_refuses_unusable_names(resource, device):
    with pytest.raises(ConfigError):
        dp_device_info_path(resource, device)


def test_dp_path_never_leaves_its_dir():
    p = dp_device_info_path("a/../../b", "../../etc/x", "/base")
    assert os.path.dirname(p) == "/base/dp"


@pytest.mark.parametrize("cid,ifname", [("..", "net1"), ("abc", ".."), ("a/b", "net1"),
                                        ("abc", "x/y"), ("", "net1"), ("abc", "")])
def test_cni_path_refuses_unusable_names(cid, ifname):
    with pytest.raises(ConfigError):
        cni_device_info_path(cid, ifname)


# --- reading ----------------------------------------------------------------------------


def write(path, content):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def dp_file(base, resource=SRIOV, device="0000:18:02.5"):
    return base / "dp" / f"{resource.replace('/', '-')}-{device}-device.json"


def cni_file(base, cid="abc123", ifname="net1"):
    return base / "cni" / f"{cid}_{ifname}"


def test_read_missing_everything(tmp_path):
    assert read_device_info(SRIOV, "0000:18:02.5", "abc123", "net1", str(tmp_path)) is None
    assert read_device_info(None, "", "abc123", "net1", str(tmp_path / "nonexistent")) is None


def test_read_device_plugin_file(tmp_path):
    write(dp_file(tmp_path), PCI_INFO)
    assert read_device_info(SRIOV, "0000:18:02.5", "abc123", "net1", str(tmp_path)) == PCI_INFO
    # another device of the resource has no file
    assert read_device_info(SRIOV, "0000:18:02.6", "abc123", "net1", str(tmp_path)) is None
    # without a resource only the CNI file is looked at
    assert read_device_info(None, "0000:18:02.5", "abc123", "net1", str(tmp_path)) is None


def test_read_cni_file_wins_over_device_plugin_file(tmp_path):
    write(dp_file(tmp_path), PCI_INFO)
    vhost = {"type": "vhost-user", "version": "1.1.0",
             "vhost-user": {"mode": "server", "path": "/var/run/vhost.sock"}}
    write(cni_file(tmp_path), vhost)
    assert read_device_info(SRIOV, "0000:18:02.5", "abc123", "net1", str(tmp_path)) == vhost
    # keyed by container and ifname
    assert read_device_info(None, None, "abc123", "net2", str(tmp_path)) is None
    assert read_device_info(None, None, "other", "net1", str(tmp_path)) is None


@pytest.mark.parametrize("content,why", [
    ("{not json", "not valid JSON"),
    ("", "not valid JSON"),
    ('{"type": "pci", "version": NaN}', "not valid JSON"),
    ("[1, 2]", "expected an object, got a list"),
    ('"pci"', "expected an object, got a string"),
    ('{"version": "1.1.0"}', "no 'type' key"),
    ('{"type": "pci"}', "no 'version' key"),
    ('{"type": "pci", "version": 1}', "'version' must be a non-empty string, got a number"),
    ('{"type": "", "version": "1.1.0"}', "'type' must be a non-empty string"),
])
def test_read_corrupt_file_is_none_and_warned(tmp_path, caplog, content, why):
    f = write(dp_file(tmp_path), content)
    with caplog.at_level(logging.WARNING, logger="netattach.devices"):
        assert read_device_info(SRIOV, "0000:18:02.5", "abc123", "net1", str(tmp_path)) is None
    [rec] = [r for r in caplog.records if r.name == "netattach.devices"]
    assert rec.levelno == logging.WARNING
    assert str(f) in rec.getMessage() and why in rec.getMessage()


def test_corrupt_cni_file_falls_back_to_device_plugin_file(tmp_path, caplog):
    write(cni_file(tmp_path), "{truncated")
    write(dp_file(tmp_path), PCI_INFO)
    with caplog.at_level(logging.WARNING, logger="netattach.devices"):
        assert read_device_info(SRIOV, "0000:18:02.5", "abc123", "net1", str(tmp_path)) == PCI_INFO
    assert any(str(cni_file(tmp_path)) in r.getMessage() for r in caplog.records)


def test_read_refuses_fifo_and_directory_without_hanging(tmp_path, caplog):
    f = cni_file(tmp_path)
    f.parent.mkdir(parents=True)
    os.mkfifo(f)
    d = dp_file(tmp_path)
    d.mkdir(parents=True)
    with caplog.at_level(logging.WARNING, logger="netattach.devices"):
        assert read_device_info(SRIOV, "0000:18:02.5", "abc123", "net1", str(tmp_path)) is None
    assert "not a regular file" in caplog.text


def test_read_refuses_huge_file(tmp_path, caplog):
    write(dp_file(tmp_path), json.dumps({**PCI_INFO, "pad": "x" * (devices._MAX_DEVINFO_BYTES)}))
    with caplog.at_level(logging.WARNING, logger="netattach.devices"):
        assert read_device_info(SRIOV, "0000:18:02.5", "c", "net1", str(tmp_path)) is None
    assert "too large" in caplog.text


# --- writing (the delegating plugin's duty, device-info spec §4.2.1) --------------------


def test_save_read_remove(tmp_path):
    base = str(tmp_path / "devinfo")
    path = save_device_info("abc123", "net1", PCI_INFO, base)
    assert path == cni_device_info_path("abc123", "net1", base) == str(cni_file(tmp_path / "devinfo"))
    assert json.loads(open(path).read()) == PCI_INFO
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert os.listdir(os.path.dirname(path)) == ["abc123_net1"]  # no temp file left
    assert read_device_info(None, None, "abc123", "net1", base) == PCI_INFO
    # overwrite (an ADD retried after a failure)
    save_device_info("abc123", "net1", {"type": "pci", "version": "1.0.0"}, base)
    assert read_device_info(None, None, "abc123", "net1", base)["version"] == "1.0.0"
    remove_device_info("abc123", "net1", base)
    assert not os.path.exists(path)
    remove_device_info("abc123", "net1", base)  # idempotent


def test_save_refuses_non_device_info(tmp_path):
    with pytest.raises(ConfigError, match="no 'version' key"):
        save_device_info("abc123", "net1", {"type": "pci"}, str(tmp_path))
    assert not (tmp_path / "cni").exists()


def test_save_into_unwritable_place_is_an_io_failure(tmp_path):
    """Defect 6 of issue 9: an I/O failure is code 5 (it was reported as 7)."""
    (tmp_path / "cni").write_text("a file where the dir should be")
    with pytest.raises(DeviceInfoError, match="cannot write device-info file") as e:
        save_device_info("abc123", "net1", PCI_INFO, str(tmp_path))
    assert e.value.code == 5


def test_copy_device_plugin_file_for_the_attachment(tmp_path):
    write(dp_file(tmp_path), PCI_INFO)
    assert copy_device_info(SRIOV, "0000:18:02.5", "abc123", "net1", str(tmp_path)) == PCI_INFO
    assert json.loads(cni_file(tmp_path).read_text()) == PCI_INFO
    # no device plugin file: nothing written, the CNI plugin may write its own
    assert copy_device_info(SRIOV, "0000:18:02.6", "abc123", "net2", str(tmp_path)) is None
    assert not cni_file(tmp_path, ifname="net2").exists()
