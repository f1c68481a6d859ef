"""A claim author's CNI config (issue 21), and the admin-safe way: the config in the
DeviceClass, `claimConfigSources` on the node (docs/dra.md "Who writes the CNI config").

A ResourceClaim's own config (`source: FromClaim` in its allocation) is tenant input
that netattach runs as root; a DeviceClass's (`FromClass`) is the cluster admin's. With
`claimConfigSources: class` the first is refused: code 7 before anything runs, naming
the pod, the claim, the request and the key; a Warning event and the claim's
status.devices say so; nothing ran (no link, no address, no state, and the canary path
the tenant's host-local `dataDir` names stays absent). A class-held config attaches the
pod whatever the key says.

The built artifact in thin and thick mode (`mode`), the real API server, real plugins in
a real netns. There is no scheduler on the test bed: `allocate` writes the allocation as
the DRA allocator does, reading each request's DeviceClass from the API server and
copying its spec.config (FromClass, one entry per request of the class) before the
claim's own configs (FromClaim). Nothing here depends on timing.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import CoreV1Api, CustomObjectsApi
from kubernetes.client.rest import ApiException

from netattach_testbed import netns as tb
from netattach_testbed import scenario as sc
from tests.e2e.test_dra_claims import (
    CLAIM_SUBNET,
    DRIVER,
    GROUP,
    NODE,
    VERSION,
    claim_body,
    cni_config,
    create_claim,
    publish_slice,
    read_claim,
    subnets_configmap,
    wait_devices,
)
from tests.unit.test_tools_validate_claims import dra_class_example

pytestmark = pytest.mark.e2e

REQUEST = "macvlan0"


# ---------------------------------------------------------------- the cluster's objects

@pytest.fixture
def objects(admin_api, k8s_namespace):
    """What the cluster has for these tests: a ResourceSlice of DRIVER on NODE (device
    `cni`, attribute `name` = a host link), the subnets ConfigMap, and the DeviceClasses
    a test creates (`objects.device_class`); the cluster-scoped ones are deleted after
    the test."""
    made = _Objects(admin_api, k8s_namespace)
    yield made
    api = CustomObjectsApi(admin_api)
    for plural, name in made.created:
        try:
            api.delete_cluster_custom_object(GROUP, VERSION, plural, name)
        except ApiException as e:
            if e.status != 404:
                raise


class _Objects:
    def __init__(self, api, namespace: str):
        self.api, self.namespace = api, namespace
        self.created: list[tuple[str, str]] = []
        self.pool = ""

    def slice_for(self, master: str) -> str:
        """The ResourceSlice whose device names `master`; its pool's name."""
        self.pool = publish_slice(self.api, master)
        self.created.append(("resourceslices", self.pool))
        subnets_configmap(self.api, self.namespace)
        return self.pool

    def device_class(self, params: dict | None) -> str:
        """A DeviceClass of DRIVER's devices, holding `params` (a CNIConfig) in its
        spec.config when given; returns its (unique) name."""
        name = f"cni-{uuid.uuid4().hex[:8]}.example.com"
        spec: dict[str, Any] = {"selectors": [
            {"cel": {"expression": f"device.driver == '{DRIVER}'"}}]}
        if params is not None:
            spec["config"] = [{"opaque": {"driver": DRIVER, "parameters": params}}]
        CustomObjectsApi(self.api).create_cluster_custom_object(
            GROUP, VERSION, "deviceclasses", {"apiVersion": f"{GROUP}/{VERSION}",
                                              "kind": "DeviceClass",
                                              "metadata": {"name": name}, "spec": spec})
        self.created.append(("deviceclasses", name))
        return name


def class_only_claim(name: str, device_class: str) -> dict[str, Any]:
    """A ResourceClaim that only requests one device of `device_class`: no config."""
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": REQUEST, "exactly": {
                "deviceClassName": device_class, "allocationMode": "ExactCount",
                "count": 1}}]}}}


def allocate(api, namespace: str, claim: dict, pool: str, pod: tuple[str, str]) -> dict:
    """Write the claim's status as the scheduler would (k8s.io/dynamic-resource-allocation
    structured allocator): device `cni` of `pool` for each request; the config of each
    request's DeviceClass as stored in the API server (source FromClass, `requests` the
    request), then the claim's own (FromClaim); reserved for `pod` (name, uid). Returns
    the allocation's config list."""
    spec = claim["spec"]["devices"]
    configs: list[dict[str, Any]] = []
    for request in spec["requests"]:
        cls = CustomObjectsApi(api).get_cluster_custom_object(
            GROUP, VERSION, "deviceclasses", request["exactly"]["deviceClassName"])
        configs += [{**c, "source": "FromClass", "requests": [request["name"]]}
                    for c in cls["spec"].get("config") or []]
    configs += [{**c, "source": "FromClaim"} for c in spec.get("config") or []]
    CustomObjectsApi(api).patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, "resourceclaims", claim["metadata"]["name"], {"status": {
            "allocation": {
                "devices": {"results": [{"request": r["name"], "driver": DRIVER, "pool": pool,
                                         "device": "cni"} for r in spec["requests"]],
                            "config": configs},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}},
            "reservedFor": [{"resource": "pods", "name": pod[0], "uid": pod[1]}]}})
    return configs


def claim_scenario(make_scenario, admin_api, k8s_namespace, objects, body: dict,
                   sources: str | None) -> tuple[sc.Scenario, str]:
    """A pod with no NAD and one claim `net` (ResourceClaim `body`, created and allocated
    on the objects' pool), in the test's mode, netattach's conf with claimConfigSources
    `sources` (None: the key left out). Returns (scenario, claim name)."""
    name = body["metadata"]["name"]
    s = make_scenario(networks=None, resource_claims=[{"name": "net",
                                                       "resourceClaimName": name}])
    if sources is not None:
        s = dataclasses.replace(s, netconf={**s.netconf, "claimConfigSources": sources})
    claim = create_claim(admin_api, k8s_namespace, body)
    allocate(admin_api, k8s_namespace, claim, objects.pool, (s.pod_name, s.pod_uid))
    return s, name


def docs_class_params(ipam_dir: Path) -> dict[str, Any]:
    """The CNIConfig of docs/dra.md's class-held example, host-local's store in the test
    bed's dir."""
    [cls] = [d for d in yaml.safe_load_all(dra_class_example()) if d["kind"] == "DeviceClass"]
    params = copy.deepcopy(cls["spec"]["config"][0]["opaque"]["parameters"])
    params["config"]["plugins"][0]["ipam"]["dataDir"] = str(ipam_dir)
    return params


def tenant_params(canary: Path, ipam_dir: Path) -> dict[str, Any]:
    """A claim author's own config: the usual macvlan, host-local's store at `canary`."""
    params = cni_config(ipam_dir)
    params["plugins"][0]["config"]["ipam"]["dataDir"] = str(canary)
    return params


@pytest.fixture
def canary(tmp_path) -> Path:
    """A path under an empty dir of the test's: nothing may create anything there."""
    d = tmp_path / "untouched"
    d.mkdir()
    return d / "canary"


def assert_refused(admin_api, s: sc.Scenario, claim: str, canary: Path, *words: str,
                   pool: str = "") -> str:
    """The ADD fails with one CNI error, code 7, naming the pod, the claim, the request
    and `words`; nothing ran or stayed; a Warning event carries the message, which is
    returned, and so does the claim's status.devices entry for device `cni` of `pool`
    (Ready False) when `pool` is given (a claimConfigSources refusal; seed 004's
    validation rules report in the error and the event only). The runtime's DEL is
    quiet."""
    run = s.run("ADD")
    assert run.code == 1, run.stdout + s.log_text()
    err = run.doc
    assert set(err) <= {"cniVersion", "code", "msg", "details"} and err["code"] == 7, err
    msg = err["msg"]
    assert msg.startswith(f"pod {s.namespace}/{s.pod_name}: ResourceClaim {s.namespace}/"
                          f"{claim} request {REQUEST}: "), msg
    for w in words:
        assert w in msg, msg
    sc.assert_clean(s)
    assert not canary.exists() and list(canary.parent.iterdir()) == []
    assert "attached network" not in s.log_text()
    if pool:
        [entry] = wait_devices(admin_api, s.namespace, claim, lambda d: bool(d))
        assert (entry["driver"], entry["pool"], entry["device"]) == (DRIVER, pool, "cni")
        [cond] = entry["conditions"]
        assert (cond["type"], cond["status"], cond["reason"], cond["message"]) == (
            "Ready", "False", "NetworkInterfaceNotReady", msg)
    deadline = time.monotonic() + 60  # hang guard: thick mode records it after answering
    while not [e for e in sc.pod_events(admin_api, s.namespace, s.pod_name)
               if e[:2] == ("Warning", "ErrorAddingNetwork") and msg in e[2]]:
        assert time.monotonic() < deadline, sc.pod_events(admin_api, s.namespace, s.pod_name)
        time.sleep(0.1)
    run = s.run("DEL")
    assert run.code == 0 and run.stdout == "", run.stdout
    sc.assert_clean(s)
    devices = read_claim(admin_api, s.namespace, claim)["status"].get("devices") or []
    # the report stays, as after a failed ADD
    assert [d["conditions"][0]["status"] for d in devices] == (["False"] if pool else [])
    return msg


# ---------------------------------------------------------------- the config in the class

@pytest.mark.parametrize("sources", ["class", None])
def test_a_device_class_config_attaches_a_claim_that_only_requests(
        sources, make_scenario, admin_api, k8s_namespace, host_env, objects):
    """docs/dra.md's class-held config in a DeviceClass's spec.config; the claim only
    requests a device of the class. The allocation carries the class's config
    (FromClass); netattach runs it with claimConfigSources "class" and by default: the
    pod gets dra0, a macvlan on the device's link with an address of the class's
    subnet; the claim's status.devices and network-status say so; DEL releases it all."""
    master = host_env.master_link()
    objects.slice_for(master)
    params = docs_class_params(host_env.ipam_dir)
    subnet = params["config"]["plugins"][0]["ipam"]["ranges"][0][0]["subnet"]
    device_class = objects.device_class(params)
    s, claim = claim_scenario(make_scenario, admin_api, k8s_namespace, objects,
                              class_only_claim(f"claim-{uuid.uuid4().hex[:8]}", device_class),
                              sources)
    stored = read_claim(admin_api, k8s_namespace, claim)
    assert "config" not in stored["spec"]["devices"]
    assert [c["source"] for c in stored["status"]["allocation"]["devices"]["config"]] == [
        "FromClass"]

    run = s.run("ADD")
    assert run.code == 0, run.stdout + s.log_text()
    assert sc.pod_links(s) == ["dra0", "eth0", "lo"]
    addresses = tb.addresses(s.netns, "dra0")
    assert len(addresses) == 1 and sc.in_subnet(addresses[0], subnet)
    link = json.loads(tb.run("ip", "-j", "-d", "-n", s.netns, "link", "show", "dra0").stdout)[0]
    assert link["link_index"] == next(l["ifindex"] for l in tb.links() if l["ifname"] == master)
    # host-local keyed its store by the config's own name, not the claim's request
    assert {p.parent.name for p in s.env.ipam_allocations()} >= {"macvlan-host"}

    [entry] = wait_devices(admin_api, k8s_namespace, claim, lambda d: bool(d))
    assert entry["conditions"][0]["status"] == "True"
    assert entry["networkData"]["interfaceName"] == "dra0"
    assert entry["networkData"]["ips"] == addresses
    status = sc.network_status(admin_api, s.namespace, s.pod_name)
    assert [(e["name"], e["interface"]) for e in status] == [
        ("cluster-net", "eth0"), (f"resourceclaim:{claim}/{REQUEST}", "dra0")]

    assert s.run("DEL").code == 0
    sc.assert_clean(s)
    wait_devices(admin_api, k8s_namespace, claim, lambda d: not d)


def test_the_class_held_example_is_accepted_by_the_api_server(admin_api, k8s_namespace):
    """docs/dra.md's class-held example (DeviceClass with spec.config, a
    ResourceClaimTemplate without config, Pod): the API server admits each as written
    (dry run)."""
    for doc in yaml.safe_load_all(dra_class_example()):
        doc["metadata"].pop("namespace", None)
        if doc["kind"] == "Pod":
            CoreV1Api(admin_api).create_namespaced_pod(k8s_namespace, doc, dry_run="All")
        elif doc["kind"] == "DeviceClass":
            CustomObjectsApi(admin_api).create_cluster_custom_object(
                GROUP, VERSION, "deviceclasses", doc, dry_run="All")
        else:
            CustomObjectsApi(admin_api).create_namespaced_custom_object(
                GROUP, VERSION, k8s_namespace, "resourceclaimtemplates", doc, dry_run="All")


# ---------------------------------------------------------------- the claim's own config

def test_a_claims_own_config_is_refused_with_class_only(
        make_scenario, admin_api, k8s_namespace, host_env, objects, canary):
    """claimConfigSources "class": the claim's own config (as seed 004 writes claims)
    is refused before anything runs; its host-local store, the canary, is never made."""
    objects.slice_for(host_env.master_link())
    device_class = objects.device_class(None)
    body = claim_body(f"claim-{uuid.uuid4().hex[:8]}", tenant_params(canary, host_env.ipam_dir))
    body["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = device_class
    s, claim = claim_scenario(make_scenario, admin_api, k8s_namespace, objects, body, "class")
    assert_refused(admin_api, s, claim, canary,
                   f"its config of driver {DRIVER} is the claim's own (source FromClaim)",
                   'this node\'s claimConfigSources is "class"', "DeviceClass",
                   pool=objects.pool)


@pytest.mark.parametrize("sources", ["class", "any"])
def test_a_claim_cannot_override_its_classes_config(
        sources, make_scenario, admin_api, k8s_namespace, host_env, objects, canary):
    """The class holds the admin's config; the claim adds its own for the same request
    (a driver that merges configs lets the claim's win). "class" refuses the claim's;
    "any" refuses the pair under seed 004's one-config rule. Neither runs either."""
    objects.slice_for(host_env.master_link())
    device_class = objects.device_class(docs_class_params(host_env.ipam_dir))
    body = claim_body(f"claim-{uuid.uuid4().hex[:8]}", tenant_params(canary, host_env.ipam_dir))
    body["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = device_class
    s, claim = claim_scenario(make_scenario, admin_api, k8s_namespace, objects, body, sources)
    configs = read_claim(admin_api, k8s_namespace, claim)["status"]["allocation"]["devices"][
        "config"]
    assert [c["source"] for c in configs] == ["FromClass", "FromClaim"]
    if sources == "class":
        assert_refused(admin_api, s, claim, canary, "is the claim's own (source FromClaim)",
                       "claimConfigSources", pool=objects.pool)
    else:
        assert_refused(admin_api, s, claim, canary, "2 configs of driver", "one and only one")


def test_a_claims_own_config_still_runs_by_default(
        make_scenario, admin_api, k8s_namespace, host_env, objects):
    """The default ("any", the key left out) keeps what netattach did before the key:
    the same tenant config runs (its host-local store is where it says), so the refusal
    above is the key's doing."""
    objects.slice_for(host_env.master_link())
    device_class = objects.device_class(None)
    store = host_env.ipam_dir / "tenant"
    body = claim_body(f"claim-{uuid.uuid4().hex[:8]}", tenant_params(store, host_env.ipam_dir))
    body["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = device_class
    s, claim = claim_scenario(make_scenario, admin_api, k8s_namespace, objects, body, None)
    run = s.run("ADD")
    assert run.code == 0, run.stdout + s.log_text()
    assert sc.pod_links(s) == ["dra0", "eth0", "lo"]
    [address] = tb.addresses(s.netns, "dra0")
    assert sc.in_subnet(address, CLAIM_SUBNET)
    assert any(store in p.parents for p in s.env.ipam_allocations())
    assert s.run("DEL").code == 0
    sc.assert_clean(s)
