"""Issue 12, Multus parity: a NAD's k8s.v1.cni.cncf.io/resourceName names a ResourceClaim
of the pod, and the attachment's device ID comes from the DRA allocation the kubelet's
PodResources API reports under dynamic_resources (Multus v4.2.3's rule, devices.py).

Real API server (the pod references a real resource.k8s.io/v1 ResourceClaim, allocated
and reserved as the scheduler writes it), real netns, real plugins (macvlan, host-local),
the built artifact. The kubelet's PodResources API is the stand-in gRPC server
(testbed/netattach_testbed/kubelet.py) answering from those API objects in kubelet 1.34's shape.
"""
from __future__ import annotations

import contextlib
import json
from dataclasses import replace
from pathlib import Path

from kubernetes.client import CoreV1Api, ResourceV1Api
from kubernetes.client.exceptions import ApiException

from netattach_testbed import kubelet
from netattach_testbed import scenario as sc
from tests.e2e.test_spec_e2e import assert_clean, recorder

DRIVER = "net.example.com"
POOL = "test-node"
CLAIM = "nics"  # the ResourceClaim's name: what the NAD's resourceName names
# The claim's two devices in allocation order, and the CDI device the driver prepared
# for each: the device IDs are the parts after "=".
CLAIM_DEVICES = [("vf-3", "net.example.com/vf=0000:18:02.3"),
                 ("vf-1", "net.example.com/vf=0000:18:02.1")]
DRA_IDS = ["0000:18:02.3", "0000:18:02.1"]
PLUGIN_RESOURCE = "example.com/nic"  # a device plugin's resource, beside the claim
PLUGIN_IDS = ["0000:19:00.5"]


def device_nad(namespace, name, resource_name, master, ipam_dir, subnet):
    """macvlan + host-local + the recorder (declares deviceID and CNIDeviceInfoFile)."""
    from netattach.node import devices

    nad = sc.nad(namespace, name, {"cniVersion": "1.0.0", "name": name, "plugins": [
        {"type": "macvlan", "master": master, "mode": "bridge",
         "ipam": {"type": "host-local", "subnet": subnet, "dataDir": str(ipam_dir)}},
        {"type": "recorder", "capabilities": {"deviceID": True, "CNIDeviceInfoFile": True}}]})
    nad["metadata"]["annotations"] = {devices.RESOURCE_NAME_ANNOTATION: resource_name}
    return nad


def pod_with_claim(admin_api, s, claim: str = CLAIM, template: bool = False):
    """Re-create the scenario's pod (same name, spec.resourceClaims is immutable) with pod
    claim `nic`, referenced by its container and by a sidecar, and create the
    ResourceClaim `claim`, allocated two devices of DRIVER and reserved for the pod, as
    the scheduler leaves it. `nic` names `claim` by resourceClaimName, or (template)
    comes from a ResourceClaimTemplate, `claim` being the name the resourceclaim
    controller generated and wrote to the pod's status.resourceClaimStatuses."""
    core, res = CoreV1Api(admin_api), ResourceV1Api(admin_api)
    annotations = core.read_namespaced_pod(s.pod_name, s.namespace).metadata.annotations or {}
    pod = sc.pod(s.namespace, s.pod_name, annotations.get(sc.NETWORKS))
    core.delete_namespaced_pod(s.pod_name, s.namespace, grace_period_seconds=0)
    pod["spec"]["resourceClaims"] = [
        {"name": "nic", "resourceClaimTemplateName": "nics"} if template
        else {"name": "nic", "resourceClaimName": claim}]
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "nic"}]}
    pod["spec"]["containers"].append({"name": "sidecar", "image": "registry.invalid/pause:1",
                                      "resources": {"claims": [{"name": "nic"}]}})
    uid = sc.create_pod(admin_api, pod)
    if template:
        core.patch_namespaced_pod_status(s.pod_name, s.namespace, {"status": {
            "resourceClaimStatuses": [{"name": "nic", "resourceClaimName": claim}]}})
    try:
        res.delete_namespaced_resource_claim(claim, s.namespace)
    except ApiException as e:
        if e.status != 404:
            raise
    spec = {"devices": {"requests": [{"name": "vf", "exactly": {
        "deviceClassName": "vf.net.example.com", "count": len(CLAIM_DEVICES)}}]}}
    created = res.create_namespaced_resource_claim(s.namespace, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": claim, "namespace": s.namespace}, "spec": spec})
    res.replace_namespaced_resource_claim_status(claim, s.namespace, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": claim, "namespace": s.namespace,
                     "resourceVersion": created.metadata.resource_version},
        "spec": spec,
        "status": {
            "allocation": {"devices": {"results": [
                {"request": "vf", "driver": DRIVER, "pool": POOL, "device": d}
                for d, _ in CLAIM_DEVICES]}},
            "reservedFor": [{"resource": "pods", "name": s.pod_name, "uid": uid}]}})
    return replace(s, pod_uid=uid)


def write_dp_info(devinfo: Path, resource: str, device_id: str) -> None:
    """What the driver (or device plugin) leaves for the device (device-info spec §4.1);
    Multus reads it by the NAD's resourceName and the device ID, a claim's name too."""
    from netattach.node import devices

    path = Path(devices.dp_device_info_path(resource, device_id, str(devinfo)))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"type": "pci", "version": "1.1.0",
                                "pci": {"pci-address": device_id}}))


@contextlib.contextmanager
def dra_pod(admin_api, s, host_env, networks_nads, plugin_devices=(), claim=CLAIM):
    """The scenario's pod with the claim, NADs applied, device-info files, the stand-in
    kubelet answering for the pod. Yields (netattach conf, devinfo dir, recorder log)."""
    log = host_env.root / "recorder.log"
    recorder(s.bin_dir, log)
    for nad in networks_nads:
        sc.apply_nad(admin_api, nad)
    devinfo = host_env.root / "devinfo"
    for device_id in DRA_IDS:
        write_dp_info(devinfo, claim, device_id)
    for device_id in plugin_devices:
        write_dp_info(devinfo, PLUGIN_RESOURCE, device_id)
    specs = kubelet.claims_of_pod(admin_api, s.namespace, s.pod_name, {
        (DRIVER, POOL, d): [cdi] for d, cdi in CLAIM_DEVICES})
    if plugin_devices:
        name, _, claims = specs[0]
        specs[0] = (name, [(PLUGIN_RESOURCE, list(plugin_devices))], claims)
    sock = str(host_env.root / "kubelet.sock")
    server = kubelet.serve(sock, kubelet.PodResourcesServer(
        [kubelet.pod_resources(s.namespace, s.pod_name, *specs)]))
    try:
        yield ({**s.netconf, "podResourcesSocket": sock, "deviceInfoDir": str(devinfo)},
               devinfo, log)
    finally:
        server.stop(None)


def recorded_adds(log: Path) -> list[dict]:
    return [json.loads(line)["conf"] for line in log.read_text().splitlines()
            if json.loads(line)["command"] == "ADD"]


def test_device_id_from_a_dra_claim(admin_api, plugin_kubeconfig, host_env, k8s_namespace):
    """A NAD whose resourceName is the pod's ResourceClaim, selected twice: each
    attachment gets one of the claim's devices, in allocation order, as deviceID in the
    delegate's config and runtimeConfig; the device-info the driver left under the claim's
    name lands in network-status; DEL removes the attachments' device-info files. The
    claim is referenced by both containers (the kubelet reports it under each): still
    two devices."""
    s = sc.setup(admin_api, plugin_kubeconfig, host_env, k8s_namespace,
                 networks="dra-net,dra-net")
    s = pod_with_claim(admin_api, s)
    nad = device_nad(k8s_namespace, "dra-net", CLAIM, s.master, host_env.ipam_dir,
                     "198.18.6.0/24")
    with dra_pod(admin_api, s, host_env, [nad]) as (conf, devinfo, log):
        run = s.run("ADD", conf)
        assert run.code == 0, run.stdout + s.log_text()
        adds = recorded_adds(log)
        assert [a["deviceID"] for a in adds] == DRA_IDS
        assert [a["runtimeConfig"]["deviceID"] for a in adds] == DRA_IDS
        assert [a["runtimeConfig"]["CNIDeviceInfoFile"] for a in adds] == [
            str(devinfo / "cni" / f"{s.container_id}_{i}") for i in ("net1", "net2")]
        status = sc.network_status(admin_api, s.namespace, s.pod_name)
        assert [(e["interface"], e.get("device-info", {}).get("pci", {}).get("pci-address"))
                for e in status] == [("eth0", None), ("net1", DRA_IDS[0]), ("net2", DRA_IDS[1])]
        assert len(list((devinfo / "cni").iterdir())) == 2
        assert s.run("DEL", conf).code == 0, s.log_text()
        assert list((devinfo / "cni").iterdir()) == []
        assert_clean(s)


def test_too_few_claim_devices_fails_the_add_naming_the_claim(
        admin_api, plugin_kubeconfig, host_env, k8s_namespace):
    """Three attachments, a claim of two devices: code 11 naming pod and claim, nothing
    attached (Multus would attach the third without a device ID)."""
    s = sc.setup(admin_api, plugin_kubeconfig, host_env, k8s_namespace,
                 networks="dra-net,dra-net,dra-net")
    s = pod_with_claim(admin_api, s)
    nad = device_nad(k8s_namespace, "dra-net", CLAIM, s.master, host_env.ipam_dir,
                     "198.18.6.0/24")
    with dra_pod(admin_api, s, host_env, [nad]) as (conf, _devinfo, log):
        run = s.run("ADD", conf)
        assert run.code == 1 and run.doc["code"] == 11, run.stdout + s.log_text()
        msg = run.doc["msg"]
        assert f"{s.namespace}/{s.pod_name}" in msg
        assert f"resource {CLAIM}: 3 attachments need a device, 2 allocated" in msg
        assert not log.exists() or recorded_adds(log) == []
        assert_clean(s)


def test_device_plugin_and_dra_devices_in_one_pod(make_scenario, admin_api, host_env,
                                                   k8s_namespace, mode):
    """Both kinds in one pod, thin and thick: `dra-net` names the claim, `dev-net` a
    device plugin's resource; each attachment gets a device of its own kind, in plan order
    (dra-net, dev-net, dra-net)."""
    s = make_scenario(networks="dra-net,dev-net,dra-net")
    s = pod_with_claim(admin_api, s)
    nads = [device_nad(k8s_namespace, "dra-net", CLAIM, s.master, host_env.ipam_dir,
                       "198.18.6.0/24"),
            device_nad(k8s_namespace, "dev-net", PLUGIN_RESOURCE, s.master, host_env.ipam_dir,
                       "198.18.7.0/24")]
    with dra_pod(admin_api, s, host_env, nads, plugin_devices=PLUGIN_IDS) as (conf, _, log):
        run = s.run("ADD", conf)
        assert run.code == 0, run.stdout + s.log_text()
        expected = [DRA_IDS[0], PLUGIN_IDS[0], DRA_IDS[1]]
        adds = recorded_adds(log)
        assert [a["deviceID"] for a in adds] == expected
        assert [a["runtimeConfig"]["deviceID"] for a in adds] == expected
        status = sc.network_status(admin_api, s.namespace, s.pod_name)
        assert [(e["name"], e.get("device-info", {}).get("pci", {}).get("pci-address"))
                for e in status[1:]] == [(f"{k8s_namespace}/dra-net", expected[0]),
                                         (f"{k8s_namespace}/dev-net", expected[1]),
                                         (f"{k8s_namespace}/dra-net", expected[2])]
        assert s.run("DEL", conf).code == 0, s.log_text()
        assert_clean(s)


def test_a_template_claim_is_named_by_its_generated_name(
        admin_api, plugin_kubeconfig, host_env, k8s_namespace):
    """The kubelet reports a claim by its object name: for a claim made from a
    ResourceClaimTemplate, the generated one (pod status resourceClaimStatuses), never the
    pod's name for it (`nic`). A NAD naming `nic` finds no device (code 11); a NAD
    naming the generated name gets the claim's devices."""
    generated = "claim-pod-nic-x7k2p"
    s = sc.setup(admin_api, plugin_kubeconfig, host_env, k8s_namespace,
                 networks="by-pod-name")
    s = pod_with_claim(admin_api, s, claim=generated, template=True)
    nads = [device_nad(k8s_namespace, "by-pod-name", "nic", s.master, host_env.ipam_dir,
                       "198.18.6.0/24"),
            device_nad(k8s_namespace, "by-claim-name", generated, s.master, host_env.ipam_dir,
                       "198.18.7.0/24")]
    with dra_pod(admin_api, s, host_env, nads, claim=generated) as (conf, _devinfo, log):
        run = s.run("ADD", conf)
        assert run.code == 1 and run.doc["code"] == 11, run.stdout + s.log_text()
        assert ("resource nic: 1 attachment needs a device, 0 allocated to the pod (the kubelet "
                "reports no device-plugin resource and no ResourceClaim") in run.doc["msg"]
        assert s.run("DEL", conf).code == 0, s.log_text()  # as the runtime does
        assert_clean(s)
        CoreV1Api(admin_api).patch_namespaced_pod(s.pod_name, s.namespace, {"metadata": {
            "annotations": {sc.NETWORKS: "by-claim-name"}}})
        run = s.run("ADD", conf)
        assert run.code == 0, run.stdout + s.log_text()
        assert [a["deviceID"] for a in recorded_adds(log)] == DRA_IDS[:1]
        assert s.run("DEL", conf).code == 0, s.log_text()
        assert_clean(s)
