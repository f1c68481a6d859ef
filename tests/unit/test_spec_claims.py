"""claims.py: the CNI DRA driver's device configuration API (seed 004) as pure logic, with
a fake API seam for the claim's sources (ResourceSlices, ConfigMaps)."""
from __future__ import annotations

import copy
from typing import Any

import pytest

from netattach.daemon.cache import trim
from netattach.node.state import SavedAttachment
from netattach.spec import claims
from netattach.spec.claims import ClaimError, ClaimNotReady, ClaimRef

UID = "11111111-2222-3333-4444-555555555555"
DRIVER = claims.DRIVER


class Sources:
    """The seam's source reads: a ResourceSlice list and ConfigMaps; records calls."""

    def __init__(self, slices=None, configmaps=None):
        self.slices = slices or []
        self.configmaps = configmaps or {}
        self.calls: list[str] = []

    def list_resource_slices(self, driver):
        self.calls.append(f"slices {driver}")
        return self.slices

    def get_configmap(self, namespace, name):
        self.calls.append(f"configmap {namespace}/{name}")
        return self.configmaps.get((namespace, name))


def slice_(pool="node-a", device="cni", attributes=None, generation=1, node="node-a"):
    return {"metadata": {"name": f"{pool}-{generation}"},
            "spec": {"driver": DRIVER, "nodeName": node,
                     "pool": {"name": pool, "generation": generation},
                     "devices": [{"name": device, "attributes": attributes or {
                         "name": {"string": "eth9"}, "vlan": {"int": 42},
                         f"{DRIVER}/sriov": {"bool": True}}}]}}


def params(**kw):
    out = {"apiVersion": "cni.networking.x-k8s.io/v1alpha1", "kind": "CNI", "ifName": "net9",
           "cniVersion": "1.0.0",
           "plugins": [{"type": "macvlan", "config": {"mode": "bridge", "ipam": {
               "type": "host-local", "ranges": [[{"subnet": "10.0.0.0/24"}]]}},
               "args": [{"field": "master", "valueFrom": {"attribute": "name"}}]}]}
    out.update(kw)
    return out


def claim(p=None, *, results=None, reserved=None, requests=None, configs=None,
          allocated=True):
    p = params() if p is None else p
    req = requests if requests is not None else [
        {"name": "macvlan0", "exactly": {"deviceClassName": claims.DEVICE_CLASS,
                                         "allocationMode": "ExactCount", "count": 1}}]
    cfg = configs if configs is not None else [
        {"requests": ["macvlan0"], "source": "FromClaim",
         "opaque": {"driver": DRIVER, "parameters": p}}]
    status: dict[str, Any] = {"reservedFor": reserved if reserved is not None else [
        {"resource": "pods", "name": "p", "uid": UID}]}
    if allocated:
        status["allocation"] = {"devices": {
            "results": results if results is not None else [
                {"request": "macvlan0", "driver": DRIVER, "pool": "node-a", "device": "cni"}],
            "config": cfg}}
    return {"metadata": {"namespace": "ns", "name": "c1", "uid": "claim-uid"},
            "spec": {"devices": {"requests": req, "config": cfg}}, "status": status}


def networks(c, api=None):
    return claims.claim_networks(c, UID, api or Sources([slice_()]))


# ---------------------------------------------------------------- the happy path

def test_claim_network_from_the_seed_configuration_example():
    [n] = networks(claim())
    assert n.interface == "net9"
    assert n.ref == ClaimRef("ns", "c1", "claim-uid", "macvlan0", DRIVER, "node-a", "cni")
    assert n.config.raw == {"cniVersion": "1.0.0", "name": "macvlan0", "plugins": [
        {"type": "macvlan", "mode": "bridge", "master": "eth9",
         "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.0.0.0/24"}]]}}]}
    assert n.ref.network == "resourceclaim:c1/macvlan0"


def test_status_example_form_config_with_flat_plugins():
    """seed 004 "Status": parameters.config is the conflist, its plugins flat; its own
    name is kept; `arguments` of a flat plugin still resolve, `args` stays CNI's own."""
    p = {"apiVersion": "cni.dra.networking.x-k8s.io/v1alpha1", "kind": "CNI", "ifName": "net1",
         "config": {"cniVersion": "0.4.0", "name": "mv", "plugins": [
             {"type": "macvlan", "mode": "bridge", "args": {"cni": {"x": 1}},
              "arguments": [{"fieldPath": "master", "valueFrom": {"attributeRef": "name"}}]}]}}
    [n] = networks(claim(p))
    assert n.config.raw == {"cniVersion": "0.4.0", "name": "mv", "plugins": [
        {"type": "macvlan", "mode": "bridge", "args": {"cni": {"x": 1}}, "master": "eth9"}]}


@pytest.mark.parametrize("key", ["ifName", "name"])
def test_ifname_spellings(key):
    p = params()
    del p["ifName"]
    p[key] = "blue0"
    assert networks(claim(p))[0].interface == "blue0"


def test_missing_ifname_is_left_to_the_plan():
    p = params()
    del p["ifName"]
    assert networks(claim(p))[0].interface is None


@pytest.mark.parametrize("source,expected", [
    ({"value": "eth7"}, "eth7"),
    ({"valueFrom": {"attribute": "name"}}, "eth9"),
    ({"valueFrom": {"attributeRef": f"{DRIVER}/name"}}, "eth9"),
    ({"valueFrom": {"attribute": "sriov"}}, True),
    ({"valueFrom": {"attribute": "vlan"}}, 42),
    ({"valueFrom": {"resourceSliceFieldRef": {"fieldPath": "spec.nodeName"}}}, "node-a"),
    ({"valueFrom": {"resourceSliceFieldRef": {"fieldPath": "spec.pool.name"}}}, "node-a"),
    ({"valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}, "from-key"),
    ({"valueFrom": {"configMapKeyRef": {"name": "cm", "attribute": "name"}}}, "from-attr"),
    ({"valueFrom": {"configMapKeyRef": {"name": "cm", "resourceSliceFieldRef": {
        "fieldPath": "spec.nodeName"}}}}, "from-node"),
])
@pytest.mark.parametrize("field", ["field", "fieldPath"])
def test_argument_sources(source, expected, field):
    p = params()
    p["plugins"][0]["args"] = [{field: "ipam.ranges.0.0.gateway", **source}]
    api = Sources([slice_()], {("ns", "cm"): {"data": {
        "k": "from-key", "eth9": "from-attr", "node-a": "from-node"}}})
    [n] = networks(claim(p), api)
    assert n.config.raw["plugins"][0]["ipam"]["ranges"][0][0]["gateway"] == expected


def test_sources_are_read_only_when_an_argument_needs_them():
    p = params()
    p["plugins"][0]["args"] = [{"field": "master", "value": "eth7"}]
    api = Sources()
    networks(claim(p), api)
    assert api.calls == []


def test_slice_of_the_highest_pool_generation_wins():
    old = slice_(attributes={"name": {"string": "old0"}}, generation=1)
    new = slice_(attributes={"name": {"string": "new0"}}, generation=2)
    [n] = networks(claim(), Sources([new, old, slice_(pool="other")]))
    assert n.config.raw["plugins"][0]["master"] == "new0"


def test_set_path_creates_objects_and_indexes_lists():
    obj: dict[str, Any] = {"a": [{"b": 1}]}
    claims.set_path(obj, "x.y", 3)
    claims.set_path(obj, "a.0.b", 2)
    assert obj == {"a": [{"b": 2}], "x": {"y": 3}}
    with pytest.raises(ClaimError, match="without an element 5"):
        claims.set_path(obj, "a.5.b", 1)
    with pytest.raises(ClaimError, match="not an object"):
        claims.set_path(obj, "x.y.z", 1)


# ---------------------------------------------------------------- validation (seed 004)

def _bad(c, match, api=None):
    with pytest.raises(ClaimError, match=match) as ei:
        networks(c, api)
    assert "ns/c1" in ei.value.msg


def test_rule_one_config_per_request():
    _bad(claim(configs=[]), "0 configs of driver .* one and only one")
    cfg = claim()["spec"]["devices"]["config"]
    _bad(claim(configs=cfg + cfg), "2 configs")
    # a config for all requests (no `requests`) counts too
    _bad(claim(configs=cfg + [{"opaque": {"driver": DRIVER, "parameters": params()}}]),
         "2 configs")


@pytest.mark.parametrize("exactly", [
    {"allocationMode": "All"},
    {"allocationMode": "ExactCount", "count": 2},
])
def test_rule_exact_count_one(exactly):
    _bad(claim(requests=[{"name": "macvlan0", "exactly": {"deviceClassName": "x", **exactly}}]),
         "ExactCount with count 1")


def test_rule_exact_count_one_two_results():
    r = {"request": "macvlan0", "driver": DRIVER, "pool": "node-a", "device": "cni"}
    _bad(claim(results=[r, {**r, "device": "cni2"}]), "more than one device")


def test_v1beta1_flat_request_and_first_available():
    flat = [{"name": "macvlan0", "deviceClassName": "x", "allocationMode": "ExactCount",
             "count": 1}]
    assert networks(claim(requests=flat))
    sub = [{"name": "macvlan0", "firstAvailable": [
        {"name": "a", "deviceClassName": "x", "allocationMode": "ExactCount", "count": 1}]}]
    r = [{"request": "macvlan0/a", "driver": DRIVER, "pool": "node-a", "device": "cni"}]
    [n] = networks(claim(requests=sub, results=r))
    assert n.ref.request == "macvlan0/a" and n.config.name == "macvlan0-a"


@pytest.mark.parametrize("reserved", [
    [],
    [{"resource": "pods", "name": "q", "uid": "another"}],
    [{"resource": "pods", "name": "p", "uid": UID}, {"resource": "pods", "name": "q", "uid": "x"}],
])
def test_rule_reserved_for_exactly_this_pod(reserved):
    _bad(claim(reserved=reserved), "reserved for exactly this pod")


@pytest.mark.parametrize("ifname", ["", "a/b", "x" * 16, "a b", "..", "a:b"])
def test_rule_valid_ifname(ifname):
    _bad(claim(params(ifName=ifname)), "ifName")


@pytest.mark.parametrize("ptype", ["", "../macvlan", "/usr/bin/macvlan", None])
def test_rule_plugin_type_is_a_file_name(ptype):
    p = params()
    p["plugins"][0]["type"] = ptype
    _bad(claim(p), "invalid plugin type")


@pytest.mark.parametrize("change,match", [
    ({"cniVersion": "banana"}, "does not parse"),
    ({"cniVersion": "9.9.9"}, "does not parse"),
    ({"plugins": []}, "non-empty list"),
    ({"plugins": ["x"]}, "not an object"),
    ({"kind": "Pod"}, "kind"),
    ({"apiVersion": "v1"}, "apiVersion"),
    ({"configName": "approved"}, "configName"),
])
def test_rule_cni_config_parses(change, match):
    _bad(claim(params(**change)), match)


@pytest.mark.parametrize("arg,match", [
    ({"value": "x"}, "dotted path"),
    ({"field": "a..b", "value": "x"}, "dotted path"),
    ({"field": "master"}, "exactly one of"),
    ({"field": "master", "value": "x", "valueFrom": {"attribute": "name"}}, "exactly one of"),
    ({"field": "master", "valueFrom": {"attribute": "nope"}}, "no attribute 'nope'"),
    ({"field": "master", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "k"}}},
     "ConfigMap ns/gone not found"),
    ({"field": "master", "valueFrom": {"configMapKeyRef": {"name": "Bad/Name", "key": "k"}}},
     "configMapKeyRef needs"),
    ({"field": "master", "valueFrom": {"resourceSliceFieldRef": {"fieldPath": "spec"}}},
     "no scalar"),
])
def test_arguments_that_cannot_be_resolved(arg, match):
    p = params()
    p["plugins"][0]["args"] = [arg]
    _bad(claim(p), match)


def test_no_slice_for_the_device():
    _bad(claim(), "no ResourceSlice", Sources([slice_(device="other")]))


def test_not_allocated_is_retryable():
    with pytest.raises(ClaimNotReady, match="not allocated"):
        networks(claim(allocated=False))
    assert ClaimNotReady.code == 11 and ClaimError.code == 7


def test_other_drivers_devices_are_not_networks():
    r = [{"request": "gpu", "driver": "gpu.example.com", "pool": "p", "device": "d"}]
    assert networks(claim(results=r, reserved=[])) == []


# ---------------------------------------------------------------- who wrote the config

def class_claim(p=None, *, own=None):
    """A claim whose request's DeviceClass holds the CNI config: the allocation has it
    with source FromClass (the scheduler copies DeviceClass.spec.config there, one per
    request of the class) and the claim's spec has none; `own`: configs of the claim
    itself too (spec and allocation, FromClaim)."""
    cls = {"requests": ["macvlan0"], "source": claims.FROM_CLASS,
           "opaque": {"driver": DRIVER, "parameters": params() if p is None else p}}
    c = claim(configs=list(own or []))
    c["status"]["allocation"]["devices"]["config"].insert(0, cls)
    return c


@pytest.mark.parametrize("sources", ["any", "class"])
def test_a_config_held_by_the_device_class_is_run_whatever_the_sources(sources):
    [n] = claims.claim_networks(class_claim(), UID, Sources([slice_()]), sources)
    assert n.interface == "net9" and n.config.plugins[0]["master"] == "eth9"


@pytest.mark.parametrize("source", ["FromClaim", None, "fromclass"])
def test_class_only_refuses_any_other_source_before_reading_anything(source):
    """claimConfigSources "class": a config not FromClass (the claim's own; no source or
    an unknown one, which the API never writes) is refused, code 7, naming the claim,
    the request, the source and the key; nothing was read for it, and the refusal
    carries every device of the claim (their status entries report it)."""
    c = claim()
    [cfg] = c["status"]["allocation"]["devices"]["config"]
    if source is None:
        del cfg["source"]
    else:
        cfg["source"] = source
    api = Sources([slice_()])
    with pytest.raises(claims.ClaimConfigRefused) as ei:
        claims.claim_networks(c, UID, api, "class")
    e = ei.value
    assert e.code == 7 and isinstance(e, ClaimError)
    assert e.msg.startswith("ResourceClaim ns/c1 request macvlan0: its config of driver "
                            f"{DRIVER} "), e.msg
    assert 'claimConfigSources is "class"' in e.msg and "DeviceClass" in e.msg
    assert ("the claim's own (source FromClaim)" if source == "FromClaim"
            else f"has source {source!r}, not FromClass") in e.msg
    assert e.refs == (ClaimRef("ns", "c1", "claim-uid", "macvlan0", DRIVER, "node-a", "cni"),)
    assert api.calls == []
    assert e.within("pod ns/p").refs == e.refs  # the context added keeps the devices


def test_class_only_refuses_a_claims_config_beside_the_class_one():
    """A request with the class's config and one of its own: "class" refuses the own one
    (it would override the class's where a driver merges them); "any" refuses both
    under seed 004's one-config rule."""
    own = claim()["spec"]["devices"]["config"]
    with pytest.raises(claims.ClaimConfigRefused, match="request macvlan0: .*FromClaim"):
        claims.claim_networks(class_claim(own=own), UID, Sources([slice_()]), "class")
    _bad(class_claim(own=own), "2 configs of driver")


def test_class_only_checks_every_request_before_any_is_resolved():
    """Two requests, the first class-held, the second the claim's own: refused, and the
    first's sources were not read either; the refusal names the second request and
    carries both devices."""
    req = claim()["spec"]["devices"]["requests"][0]
    c = class_claim(own=[{"requests": ["other"], "source": "FromClaim",
                          "opaque": {"driver": DRIVER, "parameters": params(ifName="net8")}}])
    c["spec"]["devices"]["requests"].append({**req, "name": "other"})
    c["status"]["allocation"]["devices"]["results"].append(
        {"request": "other", "driver": DRIVER, "pool": "node-a", "device": "cni"})
    api = Sources([slice_()])
    with pytest.raises(claims.ClaimConfigRefused, match="ns/c1 request other: ") as ei:
        claims.claim_networks(c, UID, api, "class")
    assert [r.request for r in ei.value.refs] == ["macvlan0", "other"]
    assert api.calls == []
    assert len(claims.claim_networks(c, UID, api, "any")) == 2


def test_class_only_is_not_checked_for_a_claim_of_another_pod():
    """The claim must be this pod's before its configs are judged (or reported on)."""
    with pytest.raises(ClaimError, match="reserved for exactly this pod") as ei:
        claims.claim_networks(claim(reserved=[]), UID, Sources([slice_()]), "class")
    assert not isinstance(ei.value, claims.ClaimConfigRefused)


# ---------------------------------------------------------------- the pod's claims

def test_pod_claims_in_order_templates_through_the_status():
    pod = {"spec": {"resourceClaims": [
        {"name": "a", "resourceClaimName": "claim-a"},
        {"name": "b", "resourceClaimTemplateName": "tmpl"},
        {"name": "c", "resourceClaimTemplateName": "tmpl"}]},
        "status": {"resourceClaimStatuses": [
            {"name": "b", "resourceClaimName": "pod-b-x1"}, {"name": "c"}]}}
    assert claims.pod_claims(pod) == [("a", "claim-a"), ("b", "pod-b-x1")]
    del pod["status"]
    with pytest.raises(ClaimNotReady, match="claim b .*tmpl.*resourceClaimStatuses"):
        claims.pod_claims(pod)


def test_resolve_asks_each_claim_and_names_a_missing_one():
    class Api(Sources):
        def get_resource_claim(self, namespace, name):
            self.calls.append(f"claim {namespace}/{name}")
            return claim() if name == "c1" else None
    pod = {"metadata": {"namespace": "ns", "uid": UID}, "spec": {"resourceClaims": [
        {"name": "n", "resourceClaimName": "c1"}]}}
    api = Api([slice_()])
    assert [n.ref.name for n in claims.resolve(pod, api)] == ["c1"]
    assert api.calls == ["claim ns/c1", f"slices {DRIVER}"]
    pod["spec"]["resourceClaims"].append({"name": "m", "resourceClaimName": "gone"})
    with pytest.raises(ClaimNotReady, match="ResourceClaim ns/gone not found"):
        claims.resolve(pod, api)


def test_a_claim_the_api_server_does_not_have_is_not_an_unreachable_api():
    """A claim the API server does not have (None) is ClaimNotReady, so a DEL rebuilding
    its plan does not take it for an API it cannot ask; an unreachable API stays one."""
    from netattach.kube.client import KubeError

    class Api(Sources):
        def get_resource_claim(self, namespace, name):
            return None
    pod = {"metadata": {"namespace": "ns", "uid": UID}, "spec": {"resourceClaims": [
        {"name": "n", "resourceClaimName": "c1"}]}}
    with pytest.raises(ClaimNotReady) as ei:
        claims.resolve(pod, Api())
    assert not isinstance(ei.value, KubeError)

    class Down(Sources):
        def get_resource_claim(self, namespace, name):
            raise KubeError("API server unreachable")
    with pytest.raises(KubeError):
        claims.resolve(pod, Down())


# ---------------------------------------------------------------- status.devices

RESULT = {"cniVersion": "1.0.0", "interfaces": [
    {"name": "macvlan-host", "mac": "aa:aa:aa:aa:aa:aa"},
    {"name": "net9", "mac": "b2:af:6a:f9:12:3b", "sandbox": "/var/run/netns/x"}],
    "ips": [{"address": "10.0.0.2/24", "interface": 1}, {"address": "192.0.2.1/24",
                                                          "interface": 0}]}
REF = ClaimRef("ns", "c1", "u", "macvlan0", DRIVER, "node-a", "cni")


def test_device_status_ready_with_the_pods_interface():
    entry = claims.device_status(REF, "net9", RESULT, None, "2026-01-01T00:00:00Z")
    assert entry["conditions"] == [{"type": "Ready", "status": "True",
                                    "reason": "NetworkInterfaceReady",
                                    "message": claims.MESSAGE_READY,
                                    "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    assert entry["networkData"] == {"interfaceName": "net9", "ips": ["10.0.0.2/24"],
                                    "hardwareAddress": "b2:af:6a:f9:12:3b"}
    assert entry["data"] == RESULT
    assert (entry["driver"], entry["pool"], entry["device"]) == (DRIVER, "node-a", "cni")


def test_network_data_ips_are_canonical_cidrs():
    """resource.k8s.io NetworkDeviceData.ips: CIDR form, canonical, each once, at most
    16 (the API server's IsValidInterfaceAddress and set rules): an address that cannot
    be one is left out. (Not network-status: networkStatusIPFormat plays no part.)"""
    result = {"cniVersion": "1.0.0", "interfaces": [{"name": "net9", "sandbox": "/x"}],
              "ips": [{"address": "2001:DB8:0::5/64", "interface": 0},
                      {"address": "10.0.0.2", "interface": 0},       # no prefix length
                      {"address": "10.0.0.3/24", "interface": 0},
                      {"address": "2001:db8::5/64", "interface": 0},  # the first, again
                      {"address": "::ffff:10.0.0.4/120", "interface": 0}]
              + [{"address": f"10.1.0.{i}/16", "interface": 0} for i in range(20)]}
    ips = claims.network_data(result, "net9")["ips"]
    assert ips[:3] == ["2001:db8::5/64", "10.0.0.3/24", "10.0.0.4/24"]
    assert len(ips) == claims.MAX_IPS and ips[3:] == [f"10.1.0.{i}/16" for i in range(13)]


def test_device_status_not_ready_carries_the_error():
    entry = claims.device_status(REF, "net9", None, "macvlan failed: Link not found", "t")
    assert entry["conditions"][0]["status"] == "False"
    assert entry["conditions"][0]["reason"] == "NetworkInterfaceNotReady"
    assert entry["conditions"][0]["message"] == "macvlan failed: Link not found"
    assert "data" not in entry and "networkData" not in entry


def test_device_status_leaves_out_data_over_the_api_limit():
    big = copy.deepcopy(RESULT)
    big["dns"] = {"search": ["x" * 200] * 60}
    assert "data" not in claims.device_status(REF, "net9", big, None, "t")


# ---------------------------------------------------------------- state and cache

def test_saved_attachment_keeps_its_claim():
    a = SavedAttachment(network=REF.network, ifname="net9", config={"name": "x"},
                        claim=REF.to_dict())
    back = SavedAttachment.from_dict(a.to_dict())
    assert back is not None and ClaimRef.from_dict(back.claim) == REF
    assert SavedAttachment.from_dict({**a.to_dict(), "claim": {"name": 1}}) is None
    plain = SavedAttachment.from_dict({"network": "n", "ifname": "i", "config": {}})
    assert plain is not None and plain.claim is None


def test_daemon_cache_keeps_a_pods_claims():
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": UID},
           "spec": {"nodeName": "n", "containers": [{}], "resourceClaims": [{"name": "a"}]},
           "status": {"phase": "Pending", "resourceClaimStatuses": [{"name": "a"}]}}
    assert trim(pod) == {"metadata": {"name": "p", "namespace": "ns", "uid": UID},
                         "spec": {"resourceClaims": [{"name": "a"}]},
                         "status": {"resourceClaimStatuses": [{"name": "a"}]}}
    del pod["spec"]["resourceClaims"], pod["status"]["resourceClaimStatuses"]
    assert trim(pod) == {"metadata": {"name": "p", "namespace": "ns", "uid": UID}}
