"""pod_devices against a real gRPC server on a unix socket.

The server implements v1.PodResourcesLister with the same generated modules the
client uses (so the method paths and field numbers are exercised over the wire),
and stands in for the kubelet's three behaviours: Get served, Get UNIMPLEMENTED
(kubelet < 1.27) and Get UNKNOWN "method disabled" (feature gate off).
"""
from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import grpc
import pytest

from netattach.node.devices import DeviceError, assign_device_ids, pod_devices
from netattach.node.podresources import api_pb2, api_pb2_grpc
from netattach_testbed.kubelet import containers, serve

SRIOV = "intel.com/sriov_netdevice"
RDMA = "nvidia.com/rdma"
NS, POD = "team-a", "dpdk-app"


# Two containers, devices of two resources each; IDs deliberately not sorted so the
# test proves the kubelet's order is kept.
# DRA: claim "nics" (two devices of one driver, so kubelet 1.34's cumulative cdi_devices
# show) referenced by both containers, claim "gpu" of another driver by the app only.
NET = "net.example.com"
NICS = ("nics", [(NET, "node-1", "vf-3", ["example.com/net=vf-3"]),
                 (NET, "node-1", "vf-1", ["example.com/net=vf-1"])])
GPU = ("gpu", [("gpu.example.com", "node-1", "gpu-0", ["example.com/gpu=gpu-0"])])
THE_POD = api_pb2.PodResources(name=POD, namespace=NS, containers=containers(
    ("app", [(SRIOV, ["0000:18:02.6", "0000:18:02.5"]), (RDMA, ["mlx5_3"])], [NICS, GPU]),
    ("sidecar", [(RDMA, ["mlx5_4"]), (SRIOV, ["0000:18:0a.2"])], [NICS]),
    namespace=NS,
))
# What else a kubelet sends (CPUs, memory, NUMA topology): read past, never used.
THE_POD.containers[0].cpu_ids.extend([2, 3])
THE_POD.containers[0].memory.add(memory_type="memory", size=1 << 30).topology.nodes.add(ID=0)
THE_POD.containers[0].devices[0].topology.nodes.add(ID=1)
OTHERS = [
    # same name, other namespace; and another pod of the namespace
    api_pb2.PodResources(name=POD, namespace="team-b", containers=containers(
        ("app", [(SRIOV, ["0000:19:00.1"])]))),
    api_pb2.PodResources(name="web", namespace=NS, containers=containers(
        ("nginx", [(SRIOV, ["0000:19:00.2"])]))),
    api_pb2.PodResources(name="plain", namespace=NS, containers=containers(("c", []))),
]


class FakeKubelet(api_pb2_grpc.PodResourcesListerServicer):
    """get: "serve" | "unimplemented" (the base class's answer) | "disabled" | "slow";
    get_delay: seconds Get takes before answering; list_slow: List never answers."""

    def __init__(self, get: str = "serve", get_delay: float = 0, list_slow: bool = False):
        self.get_mode = get
        self.get_delay = get_delay
        self.list_slow = list_slow
        self.calls: list[tuple[str, tuple]] = []
        self.time_left: dict[str, float | None] = {}  # rpc -> the client's deadline, as seen
        self.release = threading.Event()  # ends a slow handler at teardown

    def Get(self, request, context):
        self.calls.append(("Get", (request.pod_namespace, request.pod_name)))
        self.time_left["Get"] = context.time_remaining()
        self.release.wait(self.get_delay)
        if self.get_mode == "unimplemented":
            return super().Get(request, context)
        if self.get_mode == "disabled":  # what a kubelet returns with the gate off
            context.abort(grpc.StatusCode.UNKNOWN, "PodResources API Get method disabled")
        if self.get_mode == "slow":
            self.release.wait(30)
        for p in [THE_POD, *OTHERS]:
            if (p.namespace, p.name) == (request.pod_namespace, request.pod_name):
                return api_pb2.GetPodResourcesResponse(pod_resources=p)
        context.abort(grpc.StatusCode.UNKNOWN,
                      f"pod {request.pod_name} in namespace {request.pod_namespace} not found")

    def List(self, request, context):
        self.calls.append(("List", ()))
        self.time_left["List"] = context.time_remaining()
        if self.list_slow:
            self.release.wait(30)
        return api_pb2.ListPodResourcesResponse(pod_resources=[*OTHERS, THE_POD])


@pytest.fixture
def kubelet(tmp_path):
    """Start a FakeKubelet: kubelet(get=..., list_slow=...) -> (socket path, servicer)."""
    servers = []

    def start(**kw):
        path = tmp_path / "kubelet.sock"
        assert len(str(path)) < 100, "unix socket path too long"
        servicer = FakeKubelet(**kw)
        server = serve(str(path), servicer)
        servers.append((server, servicer))
        return str(path), servicer

    yield start
    for server, servicer in servers:
        servicer.release.set()
        server.stop(grace=None).wait(5)


def pod_device_ids(sock: str, namespace: str, pod: str, resource: str,
                   timeout: float) -> list[str]:
    """The pod's devices of one resource, as the ADD asks for them."""
    return pod_devices(sock, namespace, pod, [resource], timeout)[resource]


def test_get_gives_the_pods_devices_in_container_then_kubelet_order(kubelet):
    sock, fake = kubelet()
    assert pod_device_ids(sock, NS, POD, SRIOV, 5) == ["0000:18:02.6", "0000:18:02.5",
                                                       "0000:18:0a.2"]
    assert pod_device_ids(sock, NS, POD, RDMA, 5) == ["mlx5_3", "mlx5_4"]
    assert fake.calls == [("Get", (NS, POD)), ("Get", (NS, POD))]


def test_all_resources_in_one_request(kubelet):
    sock, fake = kubelet()
    got = pod_devices(sock, NS, POD, [RDMA, SRIOV, "example.com/none", SRIOV], 5)
    assert got == {RDMA: ["mlx5_3", "mlx5_4"],
                   SRIOV: ["0000:18:02.6", "0000:18:02.5", "0000:18:0a.2"],
                   "example.com/none": []}
    assert list(got) == [RDMA, SRIOV, "example.com/none"]
    assert fake.calls == [("Get", (NS, POD))]


def test_the_stand_in_sends_what_kubelet_1_34_sends():
    """The shape the DRA tests rest on (testbed/netattach_testbed/kubelet.dynamic_resources)."""
    nics = THE_POD.containers[0].dynamic_resources[0]
    assert (nics.claim_name, nics.claim_namespace) == ("nics", NS)
    assert [(r.driver_name, r.pool_name, r.device_name, [c.name for c in r.cdi_devices])
            for r in nics.claim_resources] == [
        (NET, "node-1", "vf-3", ["example.com/net=vf-3"]),
        (NET, "node-1", "vf-1", ["example.com/net=vf-3", "example.com/net=vf-1"])]


@pytest.mark.parametrize("get", ["serve", "unimplemented"])
def test_dra_claims_by_claim_name_with_device_plugins_beside(kubelet, get):
    """Over the wire, by Get and by List: a name is a device-plugin resource or a
    ResourceClaim's name; a claim's IDs are its CDI devices' device parts, each device
    once (though two containers reference the claim and the kubelet repeats earlier
    devices' CDI names under later ones), in allocation order."""
    sock, fake = kubelet(get=get)
    got = pod_devices(sock, NS, POD, ["nics", SRIOV, "gpu", "team-b-claim"], 5)
    assert got == {"nics": ["vf-3", "vf-1"], SRIOV: ["0000:18:02.6", "0000:18:02.5",
                                                     "0000:18:0a.2"],
                   "gpu": ["gpu-0"], "team-b-claim": []}
    assert assign_device_ids(["nics", SRIOV, "nics"], got) == ["vf-3", "0000:18:02.6", "vf-1"]
    assert fake.calls[-1][0] == ("Get" if get == "serve" else "List")


@pytest.mark.parametrize("get", ["unimplemented", "disabled"])
def test_get_unsupported_falls_back_to_list(kubelet, get):
    sock, fake = kubelet(get=get)
    assert pod_device_ids(sock, NS, POD, SRIOV, 5) == ["0000:18:02.6", "0000:18:02.5",
                                                       "0000:18:0a.2"]
    assert fake.calls == [("Get", (NS, POD)), ("List", ())]
    # List is filtered by namespace and name
    assert pod_device_ids(sock, "team-b", POD, SRIOV, 5) == ["0000:19:00.1"]


def test_list_without_the_pod(kubelet):
    sock, _ = kubelet(get="unimplemented")
    with pytest.raises(DeviceError) as e:
        pod_device_ids(sock, NS, "gone", SRIOV, 5)
    msg = str(e.value)
    assert sock in msg and f"{NS}/gone" in msg and SRIOV in msg and "lists no such pod" in msg


def test_get_unknown_pod_is_an_error_not_a_fallback(kubelet):
    sock, fake = kubelet()
    with pytest.raises(DeviceError) as e:
        pod_device_ids(sock, NS, "gone", SRIOV, 5)
    assert "not found" in str(e.value) and f"{NS}/gone" in str(e.value)
    assert fake.calls == [("Get", (NS, "gone"))]


@pytest.mark.parametrize("pod,resource", [("plain", SRIOV), (POD, "example.com/other")])
def test_resource_not_allocated_to_the_pod(kubelet, pod, resource):
    sock, _ = kubelet()
    allocated = pod_devices(sock, NS, pod, [resource], 5)
    assert allocated == {resource: []}
    with pytest.raises(DeviceError) as e:
        assign_device_ids([resource], allocated)
    assert resource in str(e.value) and e.value.code == 11


# gRPC rounds a call's deadline up when it puts it on the wire (the grpc-timeout header:
# 2 s arrives as about 2.01 s), so what the kubelet sees may exceed what was sent by this.
WIRE_ROUNDING = 0.1

# An unreachable kubelet fails at once, not when the timeout is spent. The timeout is
# long, so that "at once" and "waited it out" stay far apart however loaded the machine
# (issue 9, defect 11: a ceiling of 3 s against a 3 s timeout was a race); the message
# says which it was (waiting it out is DEADLINE_EXCEEDED, "did not answer").
FAIL_FAST_TIMEOUT = 60


def test_no_socket_fails_fast(tmp_path):
    sock = str(tmp_path / "missing.sock")
    t0 = time.monotonic()
    with pytest.raises(DeviceError) as e:
        pod_device_ids(sock, NS, POD, SRIOV, FAIL_FAST_TIMEOUT)
    assert time.monotonic() - t0 < FAIL_FAST_TIMEOUT / 2
    msg = str(e.value)
    assert "unreachable" in msg and sock in msg and f"{NS}/{POD}" in msg and SRIOV in msg
    assert "did not answer" not in msg


def test_socket_nobody_listens_on(tmp_path):
    sock = str(tmp_path / "stale.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(sock)  # a stale socket file: bound, never listening -> connection refused
    try:
        t0 = time.monotonic()
        with pytest.raises(DeviceError, match="unreachable") as e:
            pod_device_ids(sock, NS, POD, SRIOV, FAIL_FAST_TIMEOUT)
        assert time.monotonic() - t0 < FAIL_FAST_TIMEOUT / 2
        assert "did not answer" not in str(e.value)
    finally:
        s.close()


@pytest.mark.parametrize("kw,rpc", [({"get": "slow"}, "Get"),
                                    ({"get": "unimplemented", "list_slow": True}, "List")])
def test_slow_kubelet_times_out(kubelet, kw, rpc):
    """Abandoned at the deadline: the message says so (DEADLINE_EXCEEDED), and not
    before it. The slow handler would answer (with the pod) after 30 s, so a call
    without a deadline ends in no error at all; how long after the deadline the test
    sees the error depends on the machine's load, which is no property of netattach.
    The timeout leaves the List case ample time for Get's UNIMPLEMENTED first."""
    sock, fake = kubelet(**kw)
    t0 = time.monotonic()
    with pytest.raises(DeviceError) as e:
        pod_device_ids(sock, NS, POD, SRIOV, 2.0)
    elapsed = time.monotonic() - t0
    assert elapsed >= 2.0, elapsed
    msg = str(e.value)
    assert f"did not answer {rpc} within 2s" in msg
    assert sock in msg and f"{NS}/{POD}" in msg and SRIOV in msg
    assert 0 < fake.time_left[rpc] <= 2.0 + WIRE_ROUNDING  # the deadline went on the wire


def test_timeout_covers_get_and_list_together(kubelet):
    """The fallback does not get a fresh timeout: List is sent with what Get left of
    it, as the kubelet sees from the call's deadline (budget accounting, not a stopwatch
    on the test, which a loaded machine slows down: issue 9, defect 11). Get answers
    UNIMPLEMENTED after 1 s of a 2 s timeout: List has at most 1 s left, where a fresh
    timeout would give it about 2 s. The 1 s left is the margin for Get's round trip."""
    sock, fake = kubelet(get="unimplemented", get_delay=1.0, list_slow=True)
    with pytest.raises(DeviceError, match="did not answer List within 2s"):
        pod_device_ids(sock, NS, POD, SRIOV, 2.0)
    assert [c[0] for c in fake.calls] == ["Get", "List"]
    assert 0 < fake.time_left["List"] <= 2.0 - 1.0 + WIRE_ROUNDING


def test_importing_devices_does_not_load_grpc():
    p = subprocess.run([sys.executable, "-X", "importtime", "-c", "import netattach.node.devices"],
                       capture_output=True, text=True, timeout=60, check=True)
    loaded = [line.rsplit("|", 1)[-1].strip() for line in p.stderr.splitlines()
              if line.startswith("import time:")]
    assert "netattach.node.devices" in loaded
    heavy = [m for m in loaded if m.split(".")[0] in ("grpc", "google")
             or m.startswith("netattach.node.podresources")]
    assert heavy == []
