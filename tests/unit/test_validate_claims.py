"""`netattach validate` on ResourceClaims and ResourceClaimTemplates (claims.py's parser
and the seed 004 rules an object alone shows), and the README's DRA example."""
from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from netattach import claims
from netattach.validate import ERROR, lint_sources

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_example() -> str:
    """The YAML block after the `<!-- dra-example -->` marker of README.md."""
    text = README.read_text()
    m = re.search(r"<!-- dra-example -->\n```yaml\n(.*?)```", text, re.S)
    assert m, "README.md has no DRA example block"
    return m.group(1)


def errors(docs) -> list[tuple[str | None, str]]:
    data = docs if isinstance(docs, str) else yaml.safe_dump_all(docs)
    return [(f.key, f.message) for f in lint_sources([("x.yaml", data.encode())])
            if f.severity == ERROR]


def test_readme_example_passes():
    docs = list(yaml.safe_load_all(readme_example()))
    assert [d["kind"] for d in docs] == ["DeviceClass", "ResourceClaimTemplate", "Pod"]
    assert errors(readme_example()) == []


def claim() -> dict:
    tmpl = next(d for d in yaml.safe_load_all(readme_example())
                if d["kind"] == "ResourceClaimTemplate")
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "demo"}, "spec": tmpl["spec"]["spec"]}


def params(c):
    return c["spec"]["devices"]["config"][0]["opaque"]["parameters"]


def test_claim_passes_and_template_errors_have_the_template_path():
    assert errors([claim()]) == []
    tmpl = next(d for d in yaml.safe_load_all(readme_example())
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
    (lambda c: c["spec"]["devices"].update(config=[]), "requests[0]", "has no config"),
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


def test_other_drivers_configs_are_not_linted():
    c = claim()
    c["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "gpu.example.com"
    c["spec"]["devices"]["config"][0]["opaque"] = {"driver": "gpu.example.com",
                                                   "parameters": {"anything": 1}}
    assert errors([c]) == []
    assert claims.DRIVER == "cni.dra.networking.x-k8s.io"
