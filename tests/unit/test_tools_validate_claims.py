"""`netattach validate` on ResourceClaims and ResourceClaimTemplates (claims.py's parser
and the seed 004 rules an object alone shows), and docs/dra.md's complete example:
`netattach validate` passes it, and its device selection, evaluated as CEL against
the devices the daemon publishes (daemon.dra.slice_devices), picks only devices that
have every attribute its config reads."""
from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from netattach.spec import claims
from netattach.tools.validate import ERROR, NOTE, lint_sources

DRA_DOC = Path(__file__).resolve().parents[2] / "docs" / "dra.md"


def dra_example() -> str:
    """The YAML block after the `<!-- dra-example -->` marker of docs/dra.md."""
    text = DRA_DOC.read_text()
    m = re.search(r"<!-- dra-example -->\n```yaml\n(.*?)```", text, re.S)
    assert m, "docs/dra.md has no DRA example block"
    return m.group(1)


def dra_class_example() -> str:
    """The YAML block after the `<!-- dra-class-example -->` marker of docs/dra.md: the
    CNI config held by the DeviceClass."""
    m = re.search(r"<!-- dra-class-example -->\n```yaml\n(.*?)```", DRA_DOC.read_text(), re.S)
    assert m, "docs/dra.md has no class-held DRA example block"
    return m.group(1)


def findings(docs, severity: str = ERROR, **kw) -> list[tuple[str | None, str]]:
    data = docs if isinstance(docs, str) else yaml.safe_dump_all(docs)
    return [(f.key, f.message) for f in lint_sources([("x.yaml", data.encode())], **kw)
            if f.severity == severity]


def errors(docs, **kw) -> list[tuple[str | None, str]]:
    return findings(docs, ERROR, **kw)


def test_the_dra_example_passes():
    docs = list(yaml.safe_load_all(dra_example()))
    assert [d["kind"] for d in docs] == ["DeviceClass", "ResourceClaimTemplate", "Pod"]
    assert errors(dra_example()) == []


def claim() -> dict:
    tmpl = next(d for d in yaml.safe_load_all(dra_example())
                if d["kind"] == "ResourceClaimTemplate")
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "demo"}, "spec": tmpl["spec"]["spec"]}


def params(c):
    return c["spec"]["devices"]["config"][0]["opaque"]["parameters"]


def test_claim_passes_and_template_errors_have_the_template_path():
    assert errors([claim()]) == []
    tmpl = next(d for d in yaml.safe_load_all(dra_example())
                if d["kind"] == "ResourceClaimTemplate")
    params({"spec": tmpl["spec"]["spec"]})["ifName"] = "a/b"
    [(key, msg)] = errors([tmpl])
    assert key == "spec.spec.devices.config[0].opaque.parameters" and "ifName" in msg


@pytest.mark.parametrize("change,key,words", [
    (lambda c: params(c).update(ifName="eth0"), "ifName", "cluster default network"),
    (lambda c: params(c)["plugins"][0].update(type="../macvlan"), "opaque.parameters",
     "invalid plugin type"),
    (lambda c: params(c).update(cniVersion="x"), "opaque.parameters", "does not parse"),
    (lambda c: params(c)["plugins"][0]["arguments"][0].pop("valueFrom"), "opaque.parameters",
     "exactly one of"),
    (lambda c: c["spec"]["devices"]["requests"][0]["exactly"].update(count=2), "requests[0]",
     "ExactCount with count 1"),
    (lambda c: c["spec"]["devices"]["requests"][0]["exactly"].update(allocationMode="All"),
     "requests[0]", "ExactCount with count 1"),
    (lambda c: c["spec"]["devices"]["config"].append(
        copy.deepcopy(c["spec"]["devices"]["config"][0])), "requests[0]", "2 configs"),
    (lambda c: c["spec"]["devices"]["config"][0].update(requests=["nope"]), "requests",
     "'nope' is not in"),
])
def test_claim_rules(change, key, words):
    c = claim()
    change(c)
    found = errors([c])
    assert any(k is not None and k.endswith(key) and words in m for k, m in found), found


# ---------------------------------------------------------------- who writes the config

def test_the_class_held_example_passes_even_for_class_only_nodes():
    docs = list(yaml.safe_load_all(dra_class_example()))
    assert [d["kind"] for d in docs] == ["DeviceClass", "ResourceClaimTemplate", "Pod"]
    assert "config" not in docs[1]["spec"]["spec"]["devices"]  # the claim only requests
    assert errors(dra_class_example(), claim_config_sources="class", strict=True) == []
    assert findings(dra_class_example(), NOTE) == []


def test_a_claims_own_config_is_a_note_and_an_error_for_class_only_nodes():
    key = "spec.devices.config[0].opaque"
    [(k, msg)] = findings([claim()], NOTE)
    assert k == key and "source FromClaim" in msg and 'claimConfigSources is "class"' in msg
    [(k, msg)] = errors([claim()], claim_config_sources="class")
    assert k == key and "refuse (the ADD fails)" in msg and "DeviceClass" in msg


def class_doc(*params: dict) -> dict:
    cls = next(d for d in yaml.safe_load_all(dra_class_example()) if d["kind"] == "DeviceClass")
    cls["spec"]["config"] = [{"opaque": {"driver": claims.DRIVER, "parameters": p}}
                             for p in params]
    return cls


def class_params() -> dict:
    cls = next(d for d in yaml.safe_load_all(dra_class_example()) if d["kind"] == "DeviceClass")
    return cls["spec"]["config"][0]["opaque"]["parameters"]


def test_a_claim_config_beside_its_classes_is_one_too_many():
    c = claim()
    c["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = \
        "macvlan.cni.networking.x-k8s.io"
    [(key, msg)] = errors([class_doc(class_params()), c])
    assert key == "spec.devices.requests[0]"
    assert "2 configs of driver" in msg and "(1 of its DeviceClass macvlan" in msg


def test_device_class_configs_are_linted_like_a_claims():
    bad = class_params()
    bad["config"]["plugins"][0]["type"] = "netattach"
    [(key, msg)] = errors([class_doc(bad)])
    assert key == "spec.config[0].opaque.parameters" and "delegating meta-plugin" in msg
    [(key, msg)] = errors([class_doc(class_params())],
                          allowed_plugin_types=frozenset({"macvlan"}))
    assert "'host-local' is not in the node's allowedPluginTypes" in msg
    [(key, msg)] = errors([class_doc(class_params(), class_params())])
    assert key == "spec.config" and "2 configs of driver" in msg


def test_a_request_without_a_config_needs_its_class_to_hold_one():
    """A request of DeviceClass cni.networking.x-k8s.io without a config of the driver:
    an error when that class is in the files without one (or with --strict), else a
    note: the class, which the cluster has, may hold it."""
    c = claim()
    c["spec"]["devices"]["config"] = []
    key = "spec.devices.requests[0]"
    [(k, msg)] = findings([c], NOTE)
    assert k == key and "not in the files, must hold one in spec.config" in msg
    assert errors([c]) == []
    [(k, msg)] = errors([c], strict=True)
    assert k == key and "has no config" in msg
    docs = list(yaml.safe_load_all(dra_example()))
    cls = next(d for d in docs if d["kind"] == "DeviceClass")
    assert cls["metadata"]["name"] == claims.DEVICE_CLASS and "config" not in cls["spec"]
    [(k, msg)] = errors([cls, c])
    assert k == key and "in the claim or in the class" in msg
    assert errors([class_doc(class_params()) | {"metadata": {"name": claims.DEVICE_CLASS}},
                   c]) == []


def test_other_drivers_configs_are_not_linted():
    c = claim()
    c["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "gpu.example.com"
    c["spec"]["devices"]["config"][0]["opaque"] = {"driver": "gpu.example.com",
                                                   "parameters": {"anything": 1}}
    assert errors([c]) == []
    assert claims.DRIVER == "cni.dra.networking.x-k8s.io"


# ---------------------------------------------------------------- the example's device selection

def cel_device(driver: str, device: dict) -> dict:
    """A ResourceSlice's device as a DRA CEL selector sees it (k8s.io/dynamic-resource-
    allocation cel.Device; KEP-4381): `driver`, and `attributes` keyed by domain, an
    unqualified attribute name being in the driver's own domain, each typed value
    (`string`, `int`, `bool`, `version`) its plain value."""
    attributes: dict[str, dict] = {}
    for name, typed in (device.get("attributes") or {}).items():
        domain, _, short = name.rpartition("/")
        [value] = typed.values()
        attributes.setdefault(domain or driver, {})[short] = value
    return {"driver": driver, "attributes": attributes, "capacity": {}}


def selected(docs: list[dict], request: str, devices: list[dict]) -> list[str]:
    """The names of `devices` (of driver claims.DRIVER) that every CEL selector of the
    request's DeviceClass and of the request itself accepts. A selector that fails on a
    device (a missing attribute, say) fails the test: the scheduler then fails the
    allocation rather than skip the device (structured allocator, "CEL runtime error")."""
    import celpy
    [cls] = [d for d in docs if d["kind"] == "DeviceClass"]
    [tmpl] = [d for d in docs if d["kind"] == "ResourceClaimTemplate"]
    [req] = [r["exactly"] for r in tmpl["spec"]["spec"]["devices"]["requests"]
             if r["name"] == request]
    assert req["deviceClassName"] == cls["metadata"]["name"]
    env = celpy.Environment()
    programs = [(s["cel"]["expression"], env.program(env.compile(s["cel"]["expression"])))
                for s in cls["spec"].get("selectors", []) + req.get("selectors", [])]
    out = []
    for d in devices:
        activation = {"device": celpy.json_to_cel(cel_device(claims.DRIVER, d))}
        verdicts = []
        for text, program in programs:
            verdict = program.evaluate(activation)
            assert isinstance(verdict, celpy.celtypes.BoolType), (d["name"], text, verdict)
            verdicts.append(bool(verdict))
        if all(verdicts):
            out.append(d["name"])
    return out


def attributes_read(tmpl: dict) -> set[str]:
    """The device attributes the template's CNI configs read (`valueFrom.attribute` or
    `attributeRef`, also inside a configMapKeyRef)."""
    read = set()
    for config in tmpl["spec"]["spec"]["devices"]["config"]:
        for plugin in config["opaque"]["parameters"]["plugins"]:
            for arg in plugin.get("arguments") or plugin.get("args") or []:
                source = arg.get("valueFrom") or {}
                for where in (source, source.get("configMapKeyRef") or {}):
                    read |= {where[k] for k in ("attribute", "attributeRef") if k in where}
    return read


def test_the_dra_examples_selection_picks_only_devices_with_what_its_config_reads():
    """The devices `netattach daemon --dra` publishes for a node with two host
    interfaces (slice_devices): the example's selectors pick exactly the interfaces'
    devices, each of which has every attribute the config reads (`name`, the macvlan's
    master), and fail on none. Without the request's selector they would also pick the
    generic devices, which have no `name`: the pod would never start."""
    from netattach.daemon.dra import HostInterface, slice_devices
    devices = slice_devices([HostInterface("eth1", "02:00:00:00:00:01", True),
                             HostInterface("ens1f0", "", True)], per_interface=2, generic=3)
    docs = list(yaml.safe_load_all(dra_example()))
    [tmpl] = [d for d in docs if d["kind"] == "ResourceClaimTemplate"]
    reads = attributes_read(tmpl)
    assert reads == {"name"}
    by_name = {d["name"]: d for d in devices}
    picked = selected(docs, "macvlan0", devices)
    assert picked == ["eth1-0", "eth1-1", "ens1f0-0", "ens1f0-1"]
    for name in picked:
        assert reads <= set(by_name[name]["attributes"]), name
    assert [by_name[n]["attributes"]["name"] for n in picked] == [
        {"string": "eth1"}] * 2 + [{"string": "ens1f0"}] * 2

    del tmpl["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"]
    loose = selected(docs, "macvlan0", devices)
    assert loose[:3] == ["cni-0", "cni-1", "cni-2"]
    assert not reads <= set(by_name["cni-0"]["attributes"])


def test_the_nodes_allowlist_and_the_meta_plugin_rule_reach_claims():
    data = yaml.safe_dump_all([claim()]).encode()
    key = "spec.devices.config[0].opaque.parameters"
    assert [f for f in lint_sources([("x.yaml", data)],
                                    allowed_plugin_types=frozenset({"macvlan", "host-local"}))
            if f.severity == ERROR] == []
    [finding] = [f for f in lint_sources([("x.yaml", data)],
                                         allowed_plugin_types=frozenset({"macvlan"}))
                 if f.severity == ERROR]
    assert finding.key == key and "'host-local' is not in the node's allowedPluginTypes" \
        in finding.message
    c = claim()
    params(c)["plugins"][0]["type"] = "multus-shim"
    [(k, msg)] = errors([c])
    assert k == key and "'multus-shim' is a delegating meta-plugin" in msg


@pytest.mark.parametrize("key", ["arguments", "args"])
def test_arguments_that_are_not_a_list_are_a_claim_error(key):
    c = claim()
    params(c)["plugins"][0][key] = 5
    [(k, msg)] = errors([c])
    assert k == "spec.devices.config[0].opaque.parameters" and "is not a list" in msg
