"""Networks from DRA ResourceClaims (issue 12, seed 004 "Device Configuration API") beside
NADs, end to end: the real API server (v1.37, resource.k8s.io/v1), real plugins, real
netns. There is no scheduler, resourceclaim controller or DRA driver on the test bed:
the test writes what they would (the claim's allocation and reservedFor, the pod's
status.resourceClaimStatuses, the driver's ResourceSlice) with the admin client."""
from __future__ import annotations

import json
import subprocess
import time
import uuid
from typing import Any

import pytest
from kubernetes.client import CoreV1Api, CustomObjectsApi
from kubernetes.client.rest import ApiException

from netattach_testbed import cluster as cl
from netattach_testbed import netns as tb
from netattach_testbed import scenario as sc

pytestmark = pytest.mark.e2e

DRIVER = "cni.dra.networking.x-k8s.io"
CLASS = "cni.networking.x-k8s.io"
GROUP, VERSION = "resource.k8s.io", "v1"
CLAIM_SUBNET = "198.18.6.0/24"
NODE = "test-node"


# ---------------------------------------------------------------- what the cluster would write

def device_class(api) -> None:
    """The DeviceClass of seed 004 (cluster-scoped), created once."""
    try:
        CustomObjectsApi(api).create_cluster_custom_object(GROUP, VERSION, "deviceclasses", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "DeviceClass",
            "metadata": {"name": CLASS},
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]}})
    except ApiException as e:
        if e.status != 409:
            raise


@pytest.fixture
def resource_slice(admin_api):
    """publish(master) -> pool name: a ResourceSlice of DRIVER on NODE with one device
    `cni` whose attribute `name` is `master`, as the driver would publish it; deleted
    after the test."""
    names: list[str] = []

    def publish(master: str) -> str:
        names.append(publish_slice(admin_api, master))
        return names[-1]

    yield publish
    for name in names:
        CustomObjectsApi(admin_api).delete_cluster_custom_object(GROUP, VERSION, "resourceslices",
                                                                 name)


def publish_slice(api, master: str) -> str:
    """Create the ResourceSlice of `resource_slice` (a fresh pool); returns its name, which
    is also the pool's."""
    pool = f"pool-{uuid.uuid4().hex[:8]}"
    CustomObjectsApi(api).create_cluster_custom_object(GROUP, VERSION, "resourceslices", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceSlice",
        "metadata": {"name": pool},
        "spec": {"driver": DRIVER, "nodeName": NODE,
                 "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": "cni", "attributes": {
                     "name": {"string": master}, "mtu": {"int": 1500}}}]}})
    return pool


def cni_config(ipam_dir, *, ifname: str | None = "dra0", master: dict | None = None,
               plugin_type: str = "macvlan", extra: dict | None = None) -> dict[str, Any]:
    """A CNIConfig (seed 004 "Configuration"): macvlan + host-local, `master` an argument
    (default: from the device attribute `name`), the subnet from a ConfigMap keyed by the
    ResourceSlice's spec.nodeName."""
    params: dict[str, Any] = {
        "apiVersion": "cni.networking.x-k8s.io/v1alpha1", "kind": "CNI",
        "cniVersion": "1.0.0",
        "plugins": [{"type": plugin_type,
                     "config": {"mode": "bridge", "ipam": {
                         "type": "host-local", "dataDir": str(ipam_dir),
                         "ranges": [[{"subnet": "set-by-argument"}]]}},
                     "arguments": [
                         {"fieldPath": "master",
                          "valueFrom": master or {"attributeRef": "name"}},
                         {"field": "ipam.ranges.0.0.subnet",
                          "valueFrom": {"configMapKeyRef": {
                              "name": "dra-subnets",
                              "resourceSliceFieldRef": {"fieldPath": "spec.nodeName"}}}}]}],
        **(extra or {})}
    if ifname is not None:
        params["ifName"] = ifname
    return params


def subnets_configmap(api, namespace: str) -> None:
    CoreV1Api(api).create_namespaced_config_map(namespace, {
        "metadata": {"name": "dra-subnets"}, "data": {NODE: CLAIM_SUBNET}})


def claim_body(name: str, params: dict | list[dict], request: str = "macvlan0",
               mode: str = "ExactCount", count: int = 1) -> dict[str, Any]:
    configs = params if isinstance(params, list) else [params]
    exactly: dict[str, Any] = {"deviceClassName": CLASS, "allocationMode": mode}
    if mode == "ExactCount":
        exactly["count"] = count
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {"devices": {
                "requests": [{"name": request, "exactly": exactly}],
                "config": [{"requests": [request], "opaque": {"driver": DRIVER, "parameters": p}}
                           for p in configs]}}}


def create_claim(api, namespace: str, body: dict) -> dict:
    return CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, "resourceclaims", body)


def allocate(api, namespace: str, claim: dict, pool: str, consumers: list[tuple[str, str]],
             devices: int = 1) -> None:
    """Write the claim's status as the scheduler would: the allocation (the request's
    device(s) of `pool`, the claim's configs with source FromClaim) and reservedFor
    `consumers` [(pod name, uid)]."""
    spec = claim["spec"]["devices"]
    request = spec["requests"][0]["name"]
    body = {"status": {
        "allocation": {
            "devices": {
                "results": [{"request": request, "driver": DRIVER, "pool": pool,
                             "device": "cni" if i == 0 else f"cni{i}"} for i in range(devices)],
                "config": [{**c, "source": "FromClaim"} for c in spec.get("config") or []]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}},
        "reservedFor": [{"resource": "pods", "name": n, "uid": u} for n, u in consumers]}}
    CustomObjectsApi(api).patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, "resourceclaims", claim["metadata"]["name"], body)


def read_claim(api, namespace: str, name: str) -> dict:
    return CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, "resourceclaims", name)


def wait_devices(api, namespace: str, name: str, predicate, timeout: float = 60.0) -> list:
    """The claim's status.devices once `predicate` holds (thick mode writes after the
    answer); `timeout` is a hang guard."""
    deadline = time.monotonic() + timeout
    while True:
        devices = read_claim(api, namespace, name).get("status", {}).get("devices")
        if predicate(devices):
            return devices
        if time.monotonic() > deadline:
            raise AssertionError(f"claim {namespace}/{name}: status.devices {devices}")
        time.sleep(0.05)


def claim_pod(make, admin_api, k8s_namespace, resource_slice, master, params,
              networks="net-a", claim_ref: dict | None = None, **claim_kw):
    """The scenario of a pod with `networks` and one claim `net` holding `params`,
    allocated on a fresh pool and reserved for the pod. Returns (scenario, claim name)."""
    pool = resource_slice(master)
    device_class(admin_api)
    claim_name = f"claim-{uuid.uuid4().hex[:8]}"
    ref = claim_ref or {"name": "net", "resourceClaimName": claim_name}
    s = make(networks=networks, resource_claims=[ref])
    claim = create_claim(admin_api, k8s_namespace, claim_body(claim_name, params, **claim_kw))
    allocate(admin_api, k8s_namespace, claim, pool, [(s.pod_name, s.pod_uid)])
    return s, claim_name


@pytest.fixture
def configmap(admin_api, k8s_namespace):
    subnets_configmap(admin_api, k8s_namespace)


# ---------------------------------------------------------------- acceptance

def test_pod_with_nad_and_claim_gets_all_three(make_scenario, admin_api, k8s_namespace,
                                               host_env, resource_slice, configmap, cluster):
    """eth0 (cluster default network), net1 (NAD net-a) and dra0 (the claim: macvlan on the
    master the ResourceSlice's device attribute names, host-local on the subnet a
    ConfigMap keyed by the slice's spec.nodeName gives); the claim's status.devices
    shows what the netns has, Ready True; network-status lists all three. DEL releases
    everything and clears the claim's entry."""
    master = host_env.master_link()
    s, claim = claim_pod(make_scenario, admin_api, k8s_namespace, resource_slice, master,
                         cni_config(host_env.ipam_dir))
    run = s.run("ADD")
    assert run.code == 0, run.stdout + s.log_text()
    assert sc.pod_links(s) == ["dra0", "eth0", "lo", "net1"]
    addresses = tb.addresses(s.netns, "dra0")
    assert len(addresses) == 1 and sc.in_subnet(addresses[0], CLAIM_SUBNET)
    # the macvlan's master is the device attribute's link
    link = json.loads(tb.run("ip", "-j", "-d", "-n", s.netns, "link", "show", "dra0").stdout)[0]
    assert link["link_index"] == next(l["ifindex"] for l in tb.links() if l["ifname"] == master)

    devices = wait_devices(admin_api, k8s_namespace, claim, lambda d: bool(d))
    [entry] = devices
    assert (entry["driver"], entry["device"]) == (DRIVER, "cni")
    [cond] = entry["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == ("Ready", "True",
                                                              "NetworkInterfaceReady")
    assert entry["networkData"] == {"interfaceName": "dra0", "ips": addresses,
                                    "hardwareAddress": tb.link_mac(s.netns, "dra0")}
    assert entry["data"]["interfaces"][0]["name"] == "dra0"

    status = sc.network_status(admin_api, s.namespace, s.pod_name)
    assert [(e["name"], e["interface"]) for e in status] == [
        ("cluster-net", "eth0"), (f"{k8s_namespace}/net-a", "net1"),
        (f"resourceclaim:{claim}/macvlan0", "dra0")]
    # network-status: bare addresses (as Multus); networkData: CIDRs (the DRA API's form)
    assert status[2]["ips"] == tb.bare(addresses) and status[2]["mac"] == entry["networkData"][
        "hardwareAddress"]
    sc.assert_bare_ips(status)
    # the operator's view: `netattach status` lists the claim network too
    table = subprocess.run([sc.netattach_command(), "status", s.pod_name, "-n", s.namespace,
                            "--kubeconfig", str(cluster.admin_kubeconfig)],
                           capture_output=True, text=True, timeout=60)
    assert table.returncode == 0, table.stderr
    row = next(line.split() for line in table.stdout.splitlines()
               if line.startswith(f"resourceclaim:{claim}/macvlan0"))
    assert row[1:3] == ["dra0", *tb.bare(addresses)]

    assert s.run("DEL").code == 0
    sc.assert_clean(s)
    wait_devices(admin_api, k8s_namespace, claim, lambda d: not d)


def test_failing_claim_plugin_rolls_back_everything(make_scenario, admin_api, k8s_namespace,
                                                    host_env, resource_slice, configmap):
    """The claim's macvlan fails (its master, a constant, does not exist): the whole ADD is
    rolled back (eth0 and net-a too), nothing stays allocated, and the claim's entry
    says Ready False with the child's message."""
    s, claim = claim_pod(make_scenario, admin_api, k8s_namespace, resource_slice,
                         host_env.master_link(),
                         cni_config(host_env.ipam_dir, master=None, extra={}) | {
                             "plugins": [{"type": "macvlan", "config": {
                                 "mode": "bridge", "master": "nat-missing0",
                                 "ipam": {"type": "host-local", "dataDir": str(host_env.ipam_dir),
                                          "subnet": CLAIM_SUBNET}}}]})
    run = s.run("ADD")
    assert run.code == 1, run.stdout
    err = run.doc
    assert f"resourceclaim:{claim}/macvlan0" in err["msg"] and s.pod_name in err["msg"]
    assert "Link not found" in err["msg"]  # the child's own message
    sc.assert_clean(s)
    [entry] = wait_devices(admin_api, k8s_namespace, claim, lambda d: bool(d))
    [cond] = entry["conditions"]
    assert (cond["status"], cond["reason"]) == ("False", "NetworkInterfaceNotReady")
    assert "Link not found" in cond["message"] and "macvlan" in cond["message"]
    assert "networkData" not in entry
    # the runtime's DEL of the failed sandbox is quiet and leaves the report
    assert s.run("DEL").code == 0
    assert read_claim(admin_api, k8s_namespace, claim)["status"]["devices"][0][
        "conditions"][0]["status"] == "False"


def test_template_claim_resolved_through_pod_status(make_scenario, admin_api, k8s_namespace,
                                                    host_env, resource_slice, configmap):
    """A pod's claim from a ResourceClaimTemplate: until the pod's
    status.resourceClaimStatuses names the generated claim the ADD fails with code 11
    naming it; then the claim named there is used."""
    device_class(admin_api)
    params = cni_config(host_env.ipam_dir, ifname="tmpl0")
    CustomObjectsApi(admin_api).create_namespaced_custom_object(
        GROUP, VERSION, k8s_namespace, "resourceclaimtemplates", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "macvlan"},
            "spec": {"spec": claim_body("unused", params)["spec"]}})
    s = make_scenario(networks="net-a", resource_claims=[
        {"name": "net", "resourceClaimTemplateName": "macvlan"}])
    run = s.run("ADD")
    assert run.code == 1 and run.doc["code"] == 11, run.stdout
    assert "resourceClaimStatuses" in run.doc["msg"] and "macvlan" in run.doc["msg"]
    sc.assert_clean(s)

    # what the resourceclaim controller does: the claim, then the pod's status
    generated = f"{s.pod_name}-net-{uuid.uuid4().hex[:5]}"
    claim = create_claim(admin_api, k8s_namespace, claim_body(generated, params) | {
        "metadata": {"name": generated, "ownerReferences": [{
            "apiVersion": "v1", "kind": "Pod", "name": s.pod_name, "uid": s.pod_uid,
            "controller": True, "blockOwnerDeletion": True}]}})
    allocate(admin_api, k8s_namespace, claim, resource_slice(host_env.master_link()),
             [(s.pod_name, s.pod_uid)])
    CoreV1Api(admin_api).patch_namespaced_pod_status(s.pod_name, k8s_namespace, {"status": {
        "resourceClaimStatuses": [{"name": "net", "resourceClaimName": generated}]}})
    deadline = time.monotonic() + 60  # thick: until the daemon's pod cache has the status
    while (run := s.run("ADD")).code != 0 and run.doc.get("code") == 11 and \
            time.monotonic() < deadline:
        time.sleep(0.2)
    assert run.code == 0, run.stdout + s.log_text()
    assert sc.pod_links(s) == ["eth0", "lo", "net1", "tmpl0"]
    status = sc.network_status(admin_api, s.namespace, s.pod_name)
    assert status[-1]["name"] == f"resourceclaim:{generated}/macvlan0"
    wait_devices(admin_api, k8s_namespace, generated, lambda d: bool(d))
    assert s.run("DEL").code == 0
    sc.assert_clean(s)
    wait_devices(admin_api, k8s_namespace, generated, lambda d: not d)


# ---------------------------------------------------------------- validation (seed 004)

def _two_configs(ipam_dir):
    return [cni_config(ipam_dir), cni_config(ipam_dir, ifname="dra1")]


RULES = {
    # rule -> (claim_pod keyword arguments from the ipam dir, words the message has)
    "no-config": (lambda d: {"params": []}, ["0 configs", "one and only one"]),
    "two-configs": (lambda d: {"params": _two_configs(d)}, ["2 configs", "one and only one"]),
    "count-2": (lambda d: {"params": cni_config(d), "count": 2, "devices": 2},
                ["ExactCount", "count 1"]),
    "mode-all": (lambda d: {"params": cni_config(d), "mode": "All"},
                 ["allocationMode All", "count 1"]),
    "reserved-for-another-pod": (lambda d: {"params": cni_config(d), "other_pod": True},
                                 ["reserved for exactly this pod"]),
    "invalid-ifname": (lambda d: {"params": cni_config(d, ifname="a/b")},
                       ["ifName", "'/'"]),
    "ifname-collides-with-nad": (lambda d: {"params": cni_config(d, ifname="data0"),
                                            "networks": "net-a@data0"},
                                 ["'data0' is already used"]),
    "ifname-is-cni-ifname": (lambda d: {"params": cni_config(d, ifname="eth0")},
                             ["'eth0' is already used"]),
    "plugin-type-is-a-path": (lambda d: {"params": cni_config(d, plugin_type="../macvlan")},
                              ["invalid plugin type"]),
    "config-does-not-parse": (lambda d: {"params": cni_config(d, extra={"cniVersion": "x.y"})},
                              ["does not parse", "cniVersion"]),
}


@pytest.mark.parametrize("rule", list(RULES))
def test_validation_rule_fails_before_any_child(rule, make_scenario, admin_api, host_env,
                                                k8s_namespace, resource_slice, configmap):
    """Each seed 004 "Validation" rule: the ADD fails with code 7 before any child runs,
    naming the pod, the claim, the request (or the interface) and the rule; nothing is
    attached and no IP is allocated."""
    make_kw, words = RULES[rule]
    kw = make_kw(host_env.ipam_dir)
    params, devices, other = kw.pop("params"), kw.pop("devices", 1), kw.pop("other_pod", False)
    networks = kw.pop("networks", "net-a")
    pool = resource_slice(host_env.master_link())
    device_class(admin_api)
    claim_name = f"claim-{uuid.uuid4().hex[:8]}"
    s = make_scenario(networks=networks,
                      resource_claims=[{"name": "net", "resourceClaimName": claim_name}])
    claim = create_claim(admin_api, k8s_namespace, claim_body(claim_name, params, **kw))
    consumers = [(s.pod_name, s.pod_uid)]
    if other:
        consumers = [("someone-else", str(uuid.uuid4()))]
    allocate(admin_api, k8s_namespace, claim, pool, consumers, devices)
    run = s.run("ADD")
    assert run.code == 1, run.stdout
    assert run.doc["code"] == 7, run.doc
    msg = run.doc["msg"]
    assert s.pod_name in msg and claim_name in msg, msg
    for w in words:
        assert w in msg, msg
    sc.assert_clean(s)
    assert "attached network" not in s.log_text()  # no child ran
    assert s.run("DEL").code == 0


# ---------------------------------------------------------------- RBAC (deploy/)

@pytest.fixture(params=["plugin", "daemon"])
def sa_api(request, plugin_kubeconfig, daemon_kubeconfig):
    """An ApiClient of the thin plugin's (deploy/base/rbac.yaml) or the node daemon's
    (deploy/thick/rbac.yaml) ServiceAccount token, nothing else."""
    path = plugin_kubeconfig if request.param == "plugin" else daemon_kubeconfig
    with cl.api_client(path) as api:
        yield api


def _forbidden(call) -> None:
    with pytest.raises(ApiException) as ei:
        call()
    assert ei.value.status == 403, (ei.value.status, ei.value.body)
    assert "system:serviceaccount:kube-system:netattach" in json.loads(ei.value.body)["message"]


def test_rbac_grants_what_claims_need_and_nothing_more(request, sa_api, admin_api,
                                                       k8s_namespace, resource_slice,
                                                       host_env):
    """The ServiceAccounts may get a claim, server-side apply its status.devices, list
    ResourceSlices and get a ConfigMap, as netattach does; not change or delete a claim,
    list claims or ConfigMaps; the thin plugin's may not publish a ResourceSlice (the
    daemon's may, for `--dra`: tests/e2e/test_dra_node.py)."""
    from netattach.kube.writes import CLAIM_FIELD_MANAGER
    pool = resource_slice("eth9")
    device_class(admin_api)
    pod = sc.pod(k8s_namespace, "rbac", None)
    uid = sc.create_pod(admin_api, pod)
    claim = create_claim(admin_api, k8s_namespace, claim_body("rbac", cni_config("/tmp")))
    allocate(admin_api, k8s_namespace, claim, pool, [("rbac", uid)])
    subnets_configmap(admin_api, k8s_namespace)
    objs, core = CustomObjectsApi(sa_api), CoreV1Api(sa_api)

    got = objs.get_namespaced_custom_object(GROUP, VERSION, k8s_namespace, "resourceclaims",
                                            "rbac")
    assert got["metadata"]["uid"] == claim["metadata"]["uid"]
    slices = objs.list_cluster_custom_object(GROUP, VERSION, "resourceslices",
                                             field_selector=f"spec.driver={DRIVER}")
    assert pool in [s["metadata"]["name"] for s in slices["items"]]
    assert core.read_namespaced_config_map("dra-subnets", k8s_namespace).data == {
        NODE: CLAIM_SUBNET}
    entry = {"driver": DRIVER, "pool": pool, "device": "cni", "conditions": [{
        "type": "Ready", "status": "True", "reason": "NetworkInterfaceReady", "message": "m",
        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    objs.patch_namespaced_custom_object_status(
        GROUP, VERSION, k8s_namespace, "resourceclaims", "rbac",
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceClaim",
         "metadata": {"name": "rbac"}, "status": {"devices": [entry]}},
        field_manager=CLAIM_FIELD_MANAGER, force=True,
        _content_type="application/apply-patch+yaml")
    assert read_claim(admin_api, k8s_namespace, "rbac")["status"]["devices"][0]["pool"] == pool

    _forbidden(lambda: objs.patch_namespaced_custom_object(
        GROUP, VERSION, k8s_namespace, "resourceclaims", "rbac",
        {"metadata": {"labels": {"x": "y"}}}))
    _forbidden(lambda: objs.delete_namespaced_custom_object(
        GROUP, VERSION, k8s_namespace, "resourceclaims", "rbac"))
    _forbidden(lambda: objs.list_namespaced_custom_object(
        GROUP, VERSION, k8s_namespace, "resourceclaims"))
    _forbidden(lambda: core.list_namespaced_config_map(k8s_namespace))
    if request.node.callspec.params["sa_api"] == "daemon":
        return
    _forbidden(lambda: objs.create_cluster_custom_object(GROUP, VERSION, "resourceslices", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceSlice",
        "metadata": {"name": "rogue"},
        "spec": {"driver": DRIVER, "nodeName": NODE, "pool": {
            "name": "rogue", "generation": 1, "resourceSliceCount": 1}, "devices": []}}))


OTHER_DRIVER = "gpu.example.com"


def _claim_of_two_drivers(admin_api, namespace: str, pool: str) -> None:
    """Claim "drivers" of a pod on NODE: request macvlan0 allocated to DRIVER's device
    `cni` of `pool`, request gpu to OTHER_DRIVER's device, as the scheduler would."""
    uid = sc.create_pod(admin_api, sc.pod(namespace, "drivers", None))
    create_claim(admin_api, namespace, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceClaim",
        "metadata": {"name": "drivers"},
        "spec": {"devices": {"requests": [
            {"name": "macvlan0", "exactly": {"deviceClassName": CLASS}},
            {"name": "gpu", "exactly": {"deviceClassName": OTHER_DRIVER}}]}}})
    CustomObjectsApi(admin_api).patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, "resourceclaims", "drivers", {"status": {
            "allocation": {
                "devices": {"results": [
                    {"request": "macvlan0", "driver": DRIVER, "pool": pool, "device": "cni"},
                    {"request": "gpu", "driver": OTHER_DRIVER, "pool": "gpus",
                     "device": "gpu-0"}]},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}},
            "reservedFor": [{"resource": "pods", "name": "drivers", "uid": uid}]}})


def _entry(driver: str, pool: str, device: str) -> dict[str, Any]:
    return {"driver": driver, "pool": pool, "device": device, "conditions": [{
        "type": "Ready", "status": "True", "reason": "NetworkInterfaceReady", "message": "m",
        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}


@pytest.mark.parametrize("manifest", ["base/rbac.yaml", "thick/rbac.yaml"])
def test_status_devices_needs_the_drivers_rule_and_a_token_of_the_claims_node(
        manifest, cluster, admin_api, k8s_namespace, resource_slice, tmp_path):
    """Kubernetes >= 1.36 authorizes a write of status.devices per driver
    (DRAResourceClaimGranularStatusAuthorization, beta and on by default; v1.37.2
    pkg/registry/resource/utils.go AuthorizedForDeviceStatus): besides `patch
    resourceclaims/status`, the synthetic subresource resourceclaims/driver named by the
    driver, verb `associated-node:patch` when the ServiceAccount token is bound to a pod
    on the node the claim is allocated to, else `arbitrary-node:patch`; a refusal is 422
    (Invalid), not 403. With the rules of deploy/`manifest` (netattach's own client,
    server-side apply): a token bound to a pod on the claim's node writes the driver's
    entry; without the resourceclaims/driver rule the same write is refused; with it, a
    token naming no node or another node is refused (no arbitrary-node), and so is an
    entry of another driver (resourceNames)."""
    from netattach.kube.client import Kube, KubeError
    from netattach_testbed import faults
    from tests.e2e.test_faults_api import _delete_cluster_role, _service_account
    pool = resource_slice("eth9")
    _claim_of_two_drivers(admin_api, k8s_namespace, pool)
    ours, theirs = _entry(DRIVER, pool, "cni"), _entry(OTHER_DRIVER, "gpus", "gpu-0")
    [rules] = [d["rules"] for d in cl.load_manifests([cl.DEPLOY_DIR / manifest])
               if d["kind"] == "ClusterRole"
               and any("resourceclaims/status" in r["resources"] for r in d["rules"])]
    without = [r for r in rules if r["resources"] != ["resourceclaims/driver"]]
    assert len(without) == len(rules) - 1
    created: list[str] = []

    def account(role_rules: list[dict]) -> tuple[str, Kube]:
        """A ServiceAccount with `role_rules`, its token bound to a pod on NODE, once RBAC
        lets it read the claim (the rules reach the authorizer together)."""
        path, name = _service_account(cluster, admin_api, k8s_namespace, role_rules,
                                      tmp_path, node=NODE)
        created.append(name)
        kube = Kube(str(path), 10.0, rbac=f"deploy/{manifest}")

        def reads() -> bool:
            try:
                return kube.get_resource_claim(k8s_namespace, "drivers") is not None
            except KubeError:
                return False
        faults.wait_for(f"RBAC to grant {name}", reads)
        return name, kube

    def refused(kube: Kube, entries: list[dict]) -> None:
        with pytest.raises(KubeError) as e:
            kube.apply_claim_devices(k8s_namespace, "drivers", entries)
        assert e.value.status == 422 and 'resource="resourceclaims/driver"' in str(e.value) \
            and "-node:patch" in str(e.value), str(e.value)

    def devices() -> list[dict]:
        return read_claim(admin_api, k8s_namespace, "drivers")["status"].get("devices") or []

    try:
        _, lacking = account(without)
        refused(lacking, [ours])
        assert devices() == []
        name, kube = account(rules)
        kube.apply_claim_devices(k8s_namespace, "drivers", [ours])
        assert [(d["driver"], d["device"]) for d in devices()] == [(DRIVER, "cni")]
        refused(kube, [ours, theirs])
        for node in (None, "other-node"):
            other = Kube(str(cl.plugin_kubeconfig(
                cluster, namespace=k8s_namespace, sa=name, node=node,
                path=tmp_path / f"{node}.kubeconfig", expiration_seconds=600)), 10.0)
            assert other.get_resource_claim(k8s_namespace, "drivers") is not None
            refused(other, [])
        assert [(d["driver"], d["device"]) for d in devices()] == [(DRIVER, "cni")]
        kube.apply_claim_devices(k8s_namespace, "drivers", [])
        assert devices() == []
    finally:
        for name in created:
            _delete_cluster_role(admin_api, name)


def test_the_dra_example_is_accepted_by_the_api_server(admin_api, k8s_namespace):
    """docs/dra.md's complete example (DeviceClass, ResourceClaimTemplate, Pod): the API
    server admits each object as written (dry run; its CEL selectors compile);
    tests/unit/test_tools_validate_claims.py checks that `netattach validate` passes it and
    what its selectors pick."""
    import yaml

    from tests.unit.test_tools_validate_claims import dra_example
    for doc in yaml.safe_load_all(dra_example()):
        doc["metadata"].pop("namespace", None)
        if doc["kind"] == "Pod":
            CoreV1Api(admin_api).create_namespaced_pod(k8s_namespace, doc, dry_run="All")
        elif doc["kind"] == "DeviceClass":
            CustomObjectsApi(admin_api).create_cluster_custom_object(
                GROUP, VERSION, "deviceclasses", {**doc, "metadata": {"name": "readme-check"}},
                dry_run="All")
        else:
            CustomObjectsApi(admin_api).create_namespaced_custom_object(
                GROUP, VERSION, k8s_namespace, "resourceclaimtemplates", doc, dry_run="All")
