"""deploy/policies/ (issue 21): the optional ValidatingAdmissionPolicies, applied with the
real kubectl (`kubectl apply -k`) to the test bed's real kube-apiserver (v1.37; VAP is
GA, on by default, nothing to enable), each refusing its bad objects with a message that
names the key, and admitting the good ones (docs/dra.md's example among them); and the
ResourceSlice policy of deploy/thick/rbac.yaml pinning the pool as well as the node.

The cluster is the session's, shared with every other module. The policies are applied
from an overlay of deploy/policies/ that adds one thing, a namespaceSelector on each
binding: they act only in the namespace this module labels, so the other modules' writes
(an admin setting network-status on its test pod, for one) are not refused even while
the policies are loaded; `kubectl delete -k` of the same overlay removes them at the
module's end. (A binding's namespaceSelector does not scope cluster-scoped objects; the
only such policy, ResourceSlices', is deploy/thick/rbac.yaml's, which the session applies
as it is for the daemon's account.) The API server loads a new policy or binding, and
reads a changed parameter, in the background: each wait polls until a known-bad request
is refused (or a good one admitted), with a timeout that is only a hang guard.
"""
from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from netattach.cni.names import ifname_problem
from netattach.kube.client import Kube, KubeError
from netattach.tools.validate import ERROR, lint_sources
from netattach_testbed import cluster as cl
from netattach_testbed import faults
from tests.fixtures_cluster import _delete_namespace

pytestmark = pytest.mark.e2e

POLICIES_DIR = cl.DEPLOY_DIR / "policies"
DRA_DOC = cl.REPO_ROOT / "docs" / "dra.md"
SECURITY_DOC = cl.REPO_ROOT / "docs" / "security.md"
GROUP, VERSION = "resource.k8s.io", "v1"
DRIVER = "cni.dra.networking.x-k8s.io"
CLASS = "cni.networking.x-k8s.io"
NODE = "test-node"          # the node the session's netattach tokens are bound to
OTHER_NODE = "other-node"
STATUS = "k8s.v1.cni.cncf.io/network-status"
LABEL = "netattach.test/policies"
DEFAULT_ALLOWED = frozenset({"macvlan", "ipvlan", "host-local", "static", "tuning"})
"""deploy/policies/kustomization.yaml's allowedPluginTypes."""


# ---------------------------------------------------------------- applying the policies

def kubectl(cluster, *args: str) -> subprocess.CompletedProcess:
    """The test bed's kubectl as the cluster admin; AssertionError with its output when it
    fails."""
    p = subprocess.run([str(cl.kubectl()), "--kubeconfig", str(cluster.admin_kubeconfig),
                        *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"kubectl {' '.join(args)}: {p.stdout}{p.stderr}"
    return p


def scoped_overlay(directory: Path, base: Path, value: str) -> Path:
    """A kustomization in `directory` with `base` (a dir holding deploy/policies/ or an
    overlay of it) as its resource and a namespaceSelector (LABEL=`value`) on each binding."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(base, directory)],
        "patches": [{"target": {"kind": "ValidatingAdmissionPolicyBinding"},
                     "patch": yaml.safe_dump([{
                         "op": "add", "path": "/spec/matchResources",
                         "value": {"namespaceSelector": {"matchLabels": {LABEL: value}}}}])}]}))
    return directory


def refusal(call: Callable[[], Any]) -> ApiException | None:
    """None when `call` is admitted, else its ApiException."""
    try:
        call()
    except ApiException as e:
        return e
    return None


def message(e: ApiException | KubeError | None) -> str:
    assert e is not None, "admitted"
    if isinstance(e, KubeError):
        return str(e)
    try:
        return json.loads(e.body)["message"]
    except (ValueError, KeyError, TypeError):
        return str(e.body)


def refused_by(policy: str, call: Callable[[], Any]) -> str:
    """The message of `call`'s refusal by ValidatingAdmissionPolicy `policy` (HTTP 422);
    AssertionError when it is admitted or refused otherwise."""
    e = refusal(call)
    assert e is not None, f"admitted; {policy} should refuse it"
    assert e.status == 422 and f"ValidatingAdmissionPolicy '{policy}'" in message(e), \
        (e.status, message(e))
    return message(e)


def in_force(policy: str, call: Callable[[], Any], timeout: float = 120.0) -> None:
    """Poll until `call` (a dry run of a known-bad request) is refused by `policy`."""
    def refused() -> bool:
        e = refusal(call)
        return e is not None and f"ValidatingAdmissionPolicy '{policy}'" in message(e)
    faults.wait_for(f"ValidatingAdmissionPolicy {policy} to be in force", refused, timeout)


# ---------------------------------------------------------------- objects

def pod(name: str, node: str | None = NODE, annotations: dict | None = None) -> dict:
    spec: dict[str, Any] = {"automountServiceAccountToken": False,
                            "containers": [{"name": "c", "image": "registry.invalid/pause:1"}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": annotations or {}}, "spec": spec}


def dra_example() -> list[dict]:
    """docs/dra.md's complete example (the block after `<!-- dra-example -->`)."""
    m = re.search(r"<!-- dra-example -->\n```yaml\n(.*?)```", DRA_DOC.read_text(), re.S)
    assert m, "docs/dra.md has no DRA example block"
    return list(yaml.safe_load_all(m.group(1)))


def example_claim(kind: str = "ResourceClaim") -> dict:
    """docs/dra.md's ResourceClaimTemplate, as a template or as a claim of its spec."""
    [tmpl] = [d for d in dra_example() if d["kind"] == "ResourceClaimTemplate"]
    spec = tmpl["spec"]["spec"]
    name = f"c-{uuid.uuid4().hex[:8]}"
    if kind == "ResourceClaimTemplate":
        return {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": {"name": name},
                "spec": {"spec": spec}}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": {"name": name},
            "spec": spec}


def devices(obj: dict) -> dict:
    return (obj["spec"]["spec"] if obj["kind"] == "ResourceClaimTemplate" else obj["spec"])[
        "devices"]


def params(obj: dict, i: int = 0) -> dict:
    return devices(obj)["config"][i]["opaque"]["parameters"]


def plural(obj: dict) -> str:
    return "resourceclaimtemplates" if obj["kind"] == "ResourceClaimTemplate" else "resourceclaims"


def create(api, namespace: str, obj: dict, dry_run: bool = True) -> Callable[[], Any]:
    """A call creating `obj` (a claim or template) in `namespace`; a dry run by default
    (admission runs, nothing is stored)."""
    kw = {"dry_run": "All"} if dry_run else {}
    return lambda: k8s.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, plural(obj), obj, **kw)


def lint_errors(obj: dict, allowed: frozenset[str] | None = DEFAULT_ALLOWED) -> list[str]:
    """`netattach validate`'s errors for `obj` (what ADD would refuse of it), with the
    policy's default allowlist as --allowed-plugin-types."""
    return [f"{f.key}: {f.message}" for f in lint_sources(
        [("x.yaml", yaml.safe_dump(obj).encode())], allowed_plugin_types=allowed)
        if f.severity == ERROR]


# ---------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def policies(cluster, admin_api, plugin_kubeconfig, tmp_path_factory):
    """deploy/policies/ applied by `kubectl apply -k` of a namespace-scoped overlay, in
    force in the namespace it returns (labelled for them), removed at the end."""
    value = uuid.uuid4().hex[:10]
    overlay = scoped_overlay(tmp_path_factory.mktemp("policies") / "scoped", POLICIES_DIR, value)
    namespace = f"pol-{value}"
    core = k8s.CoreV1Api(admin_api)
    core.create_namespace({"metadata": {"name": namespace, "labels": {LABEL: value}}})
    kubectl(cluster, "apply", "-k", str(overlay))
    try:
        bad_claim = example_claim()
        params(bad_claim)["plugins"][0]["type"] = "multus"
        in_force("netattach-claims", create(admin_api, namespace, bad_claim))
        in_force("netattach-network-status", lambda: core.create_namespaced_pod(
            namespace, pod("probe", annotations={STATUS: "[]"}), dry_run="All"))
        in_force("netattach-network-status-templates", lambda: core.create_namespaced_pod_template(
            namespace, {"metadata": {"name": "probe"}, "template": {
                "metadata": {"annotations": {STATUS: "[]"}}, "spec": pod("p")["spec"]}},
            dry_run="All"))
        core.create_namespaced_pod(namespace, pod("elsewhere", OTHER_NODE))
        plugin = k8s.CoreV1Api(cl.api_client(plugin_kubeconfig))
        in_force("netattach-node-bound", lambda: plugin.patch_namespaced_pod_status(
            "elsewhere", namespace, {"metadata": {"labels": {"probe": "1"}}}, dry_run="All"))
        yield namespace
    finally:
        kubectl(cluster, "delete", "-k", str(overlay), "--ignore-not-found")
        _delete_namespace(admin_api, namespace)


@pytest.fixture
def plugin_kube(plugin_kubeconfig) -> Kube:
    """netattach's own client as the thin plugin's ServiceAccount (token bound to NODE)."""
    return Kube(str(plugin_kubeconfig), 10.0)


# ---------------------------------------------------------------- the kustomization

def test_policies_build_agree_with_deploy_and_are_accepted(cluster):
    """`kubectl kustomize deploy/policies/`: four policies, each with its binding, the
    claims policy's parameter the ConfigMap built beside it; the ServiceAccounts the
    policies let write network-status are those deploy/ (both modes) creates; the API
    server accepts `kubectl apply -k deploy/policies/` as is (server-side dry run)."""
    docs = cl.kustomize(POLICIES_DIR)
    by_kind: dict[str, dict[str, dict]] = {}
    for d in docs:
        by_kind.setdefault(d["kind"], {})[d["metadata"]["name"]] = d
    policies = by_kind["ValidatingAdmissionPolicy"]
    assert set(policies) == {"netattach-claims", "netattach-network-status",
                             "netattach-network-status-templates", "netattach-node-bound"}
    bindings = by_kind["ValidatingAdmissionPolicyBinding"]
    assert {b["spec"]["policyName"] for b in bindings.values()} == set(policies)
    assert all(b["spec"]["validationActions"] == ["Deny"] for b in bindings.values())
    assert all(p["spec"]["failurePolicy"] == "Fail" for p in policies.values())
    [cm] = by_kind["ConfigMap"].values()
    ref = bindings["netattach-claims"]["spec"]["paramRef"]
    assert (ref["name"], ref["namespace"], ref["parameterNotFoundAction"]) == (
        cm["metadata"]["name"], cm["metadata"]["namespace"], "Deny")
    assert policies["netattach-claims"]["spec"]["paramKind"] == {"apiVersion": "v1",
                                                                 "kind": "ConfigMap"}
    assert set(cm["data"]["allowedPluginTypes"].split(",")) == DEFAULT_ALLOWED
    accounts = {f"system:serviceaccount:{d['metadata']['namespace']}:{d['metadata']['name']}"
                for d in cl.kustomize(cl.THICK_DIR) if d["kind"] == "ServiceAccount"}
    assert accounts == {"system:serviceaccount:kube-system:netattach",
                        "system:serviceaccount:kube-system:netattach-daemon"}
    for name in ("netattach-network-status", "netattach-node-bound"):
        [condition] = [c["expression"] for c in policies[name]["spec"]["matchConditions"]
                       if "username" in c["expression"]]
        assert set(re.findall(r'"(system:serviceaccount:[^"]+)"', condition)) == accounts
    out = kubectl(cluster, "apply", "-k", str(POLICIES_DIR), "--dry-run=server").stdout
    assert out.count("(server dry run)") == len(docs), out


# ---------------------------------------------------------------- claims

def _set(path: str, value: Any) -> Callable[[dict], None]:
    """A mutation of a claim: set the dotted `path` under its CNIConfig (digits index)."""
    def mutate(obj: dict) -> None:
        cur: Any = params(obj)
        *parents, last = path.split(".")
        for seg in parents:
            cur = cur[int(seg)] if seg.isdigit() else cur[seg]
        cur[int(last) if last.isdigit() else last] = value
    return mutate


def _second_config(ifname: str, requests: list[str] | None = None) -> Callable[[dict], None]:
    def mutate(obj: dict) -> None:
        extra = copy.deepcopy(devices(obj)["config"][0])
        extra["opaque"]["parameters"]["ifName"] = ifname
        if requests is not None:
            extra["requests"] = requests
        devices(obj)["config"].append(extra)
    return mutate


def _second_request(obj: dict) -> None:
    d = devices(obj)
    d["requests"].append({**copy.deepcopy(d["requests"][0]), "name": "macvlan1"})
    _second_config("dra0", ["macvlan1"])(obj)


def _exactly(**fields: Any) -> Callable[[dict], None]:
    def mutate(obj: dict) -> None:
        exactly = devices(obj)["requests"][0]["exactly"]
        exactly.update(fields)
        for k in [k for k, v in fields.items() if v is None]:
            del exactly[k]
    return mutate


def _first_available(obj: dict) -> None:
    r = devices(obj)["requests"][0]
    exactly = r.pop("exactly")
    r["firstAvailable"] = [{**exactly, "name": "eth"}, {**exactly, "name": "any"}]


def _no_config(obj: dict) -> None:
    devices(obj)["config"] = []


def _pop(key: str) -> Callable[[dict], None]:
    return lambda obj: params(obj).pop(key)


def _arg(arg: dict) -> Callable[[dict], None]:
    return lambda obj: params(obj)["plugins"][0]["arguments"].append(arg)


# id -> (mutation, the key the refusal names (after spec[.spec].devices), `netattach
# validate` refuses it too). Where the policy is stricter than ADD (False): a config with
# an interface applies to one request (not only to one that its driver's devices are
# allocated for), and every subrequest of a `firstAvailable` request it applies to asks
# for one device (not only the one allocated). (An argument from a source may set no
# `type` either: `netattach validate` refuses the placeholder it puts there only for
# being outside the allowlist, ADD only for what the source holds at pod start.)
BAD_CLAIMS: dict[str, tuple[Callable[[dict], None], str, bool]] = {
    "meta-plugin type": (_set("plugins.0.type", "multus"),
                         ".config[0].opaque.parameters.plugins[0].type", True),
    "meta-plugin ipam type": (_set("plugins.0.config.ipam.type", "netattach-shim"),
                              ".config[0].opaque.parameters.plugins[0].config.ipam.type", True),
    "nested meta-plugin": (_set("plugins.0.config.delegate", {"type": "multus-shim"}),
                           ".config[0].opaque.parameters.plugins[0].config.delegate", True),
    "deeply nested meta-plugin": (
        _set("plugins.0.config.chain", [{"next": {"then": {"type": "netattach"}}}]),
        ".config[0].opaque.parameters.plugins[0].config.chain", True),
    "type outside the allowlist": (_set("plugins.0.type", "bridge"),
                                   ".config[0].opaque.parameters.plugins[0].type", True),
    "ipam type outside the allowlist": (_set("plugins.0.config.ipam.type", "dhcp"),
                                        ".config[0].opaque.parameters.plugins[0].config.ipam.type",
                                        True),
    "type not a file name": (_set("plugins.0.type", "../../bin/sh"),
                             ".config[0].opaque.parameters.plugins[0].type", True),
    "argument sets a type": (_arg({"fieldPath": "ipam.type", "value": "multus"}),
                             ".config[0].opaque.parameters.plugins[0].arguments[1]", True),
    "argument from a source sets a type": (
        _arg({"fieldPath": "type", "valueFrom": {"configMapKeyRef": {"name": "m", "key": "k"}}}),
        ".config[0].opaque.parameters.plugins[0].arguments[1]", True),
    "argument without a source": (_arg({"fieldPath": "mtu"}),
                                  ".config[0].opaque.parameters.plugins[0].arguments[1]", True),
    "arguments not a list": (_set("plugins.0.arguments", {"fieldPath": "mtu", "value": "1"}),
                             ".config[0].opaque.parameters.plugins[0].arguments", True),
    "ifName with a slash": (_set("ifName", "a/b"), ".config[0].opaque.parameters.ifName", True),
    "ifName eth0": (_set("ifName", "eth0"), ".config[0].opaque.parameters.ifName", True),
    "name too long": (lambda o: (_pop("ifName")(o), _set("name", "sixteen-bytes-xx")(o)),
                      ".config[0].opaque.parameters.name", True),
    "ifName of two configs": (_second_request, ".config[0].opaque.parameters.ifName", True),
    "ifName of two requests": (
        lambda o: (devices(o)["requests"].append(
            {**copy.deepcopy(devices(o)["requests"][0]), "name": "macvlan1"}),
            devices(o)["config"][0].pop("requests")),
        ".config[0].opaque.parameters.ifName", False),
    "two configs for a request": (_second_config("dra1"), ".requests[0]", True),
    "count 2": (_exactly(count=2), ".requests[0]", True),
    "a subrequest of count 2": (
        lambda o: (_first_available(o), devices(o)["requests"][0]["firstAvailable"][1].update(
            count=2)), ".requests[0].firstAvailable[1]", False),
    "allocationMode All": (_exactly(allocationMode="All", count=None), ".requests[0]", True),
    "configName": (_set("configName", "shared"), ".config[0].opaque.parameters.configName",
                   True),
    "kind": (_set("kind", "NetworkAttachmentDefinition"), ".config[0].opaque.parameters.kind",
             True),
    "no plugins": (_pop("plugins"), ".config[0].opaque.parameters.plugins", True),
}


@pytest.mark.parametrize("kind", ["ResourceClaim", "ResourceClaimTemplate"])
@pytest.mark.parametrize("case", list(BAD_CLAIMS))
def test_bad_claim_is_refused_naming_the_key(policies, admin_api, case, kind):
    """Each bad CNI config is refused at admission, the message naming its key (under
    spec.devices, or spec.spec.devices for a template); `netattach validate` (the rules
    of ADD) refuses it too, but where the policy is stricter."""
    mutate, key, lint_agrees = BAD_CLAIMS[case]
    obj = example_claim(kind)
    mutate(obj)
    msg = refused_by("netattach-claims", create(admin_api, policies, obj))
    base = "spec.spec.devices" if kind == "ResourceClaimTemplate" else "spec.devices"
    assert f"denied request: {base}{key}" in msg, msg
    assert bool(lint_errors(obj)) == lint_agrees, lint_errors(obj)


def _status_form(obj: dict) -> None:
    devices(obj)["config"][0]["opaque"]["parameters"] = {
        "ifName": "dra0", "config": {"cniVersion": "1.0.0", "name": "net", "plugins": [
            {"type": "macvlan", "master": "eth1", "ipam": {"type": "static"}},
            {"type": "tuning", "mtu": 1400}]}}


def _another_drivers(obj: dict) -> None:
    devices(obj)["requests"].append({"name": "gpu", "exactly": {"deviceClassName": "gpus"}})
    devices(obj)["config"].append({"requests": ["gpu"], "opaque": {
        "driver": "gpu.example.com", "parameters": {"plugins": [{"type": "multus"}]}}})


GOOD_CLAIMS: dict[str, Callable[[dict], None]] = {
    "docs/dra.md's example": lambda obj: None,
    "the Status example's form": _status_form,
    "bare plugin with arguments": _set("plugins", [{
        "type": "ipvlan", "mode": "l2", "ipam": {"type": "host-local", "ranges": []},
        "arguments": [{"field": "master", "valueFrom": {"attribute": "name"}}]}]),
    "firstAvailable": _first_available,
    "another driver's request and config": _another_drivers,
    "no ifName": _pop("ifName"),
    "a non-ASCII ifName": _set("ifName", "网卡0"),
    # the config may be its DeviceClass's (docs/dra.md, claimConfigSources), which an
    # admission policy cannot see: ADD checks that one config reaches the request
    "a request relying on its DeviceClass's config": _no_config,
}


@pytest.mark.parametrize("kind", ["ResourceClaim", "ResourceClaimTemplate"])
@pytest.mark.parametrize("case", list(GOOD_CLAIMS))
def test_good_claim_is_admitted(policies, admin_api, case, kind):
    """Good configs, every spelling netattach reads, are admitted, and `netattach
    validate` finds no error in them either."""
    obj = example_claim(kind)
    GOOD_CLAIMS[case](obj)
    assert lint_errors(obj) == []
    create(admin_api, policies, obj)()


def test_the_largest_claim_is_judged_within_the_cel_cost_budget(policies, admin_api):
    """A claim as large as the API allows (32 requests, each with a config of nearly 10
    KiB: 24 plugins with nested configs and arguments) is judged, not refused for
    running out of the API server's CEL cost budget: admitted as it is, refused naming
    the key with one type outside the allowlist in its last config's last plugin."""
    def config(i: int) -> dict:
        return {"ifName": f"net{i}", "cniVersion": "1.0.0", "plugins": [
            {"type": "macvlan", "config": {"mode": "bridge", "ipam": {
                "type": "host-local", "ranges": [[{"subnet": f"10.{i}.{j}.0/24"}]],
                "routes": [{"dst": "0.0.0.0/0"}]}, "more": [{"b": {"c": "x" * 28}}] * 3},
             "arguments": [{"fieldPath": "master", "valueFrom": {"attributeRef": "name"}}]}
            for j in range(24)]}
    obj = example_claim()
    devices(obj)["requests"] = [{"name": f"r{i}", "exactly": {"deviceClassName": CLASS}}
                                for i in range(32)]
    devices(obj)["config"] = [{"requests": [f"r{i}"], "opaque": {
        "driver": DRIVER, "parameters": config(i)}} for i in range(32)]
    assert 9 * 1024 < len(json.dumps(config(31))) < 10 * 1024
    create(admin_api, policies, obj)()
    params(obj, 31)["plugins"][23]["type"] = "bridge"
    msg = refused_by("netattach-claims", create(admin_api, policies, obj))
    assert "spec.devices.config[31].opaque.parameters.plugins[23].type: plugin type bridge" \
        in msg, msg


IFNAMES = ["dra0", "a" * 15, "a" * 16, "", ".", "..", "...", "a/b", "a:b", "a b", "a\tb",
           "a\x00b", "a\x7fb", "a\x85b", "a\x9fb", "a\xa0b", "\u00e0b", "\u00e9b", "\u0820x",
           "\u2003x", "x\u3000", "x\u200bc", "网卡0", "ñ" * 7, "ñ" * 8, "eth0", "eth1"]


@pytest.mark.parametrize("name", IFNAMES, ids=[ascii(n) for n in IFNAMES])
def test_ifname_rules_are_adds(policies, admin_api, name):
    """The policy admits exactly the interface names ADD accepts (names.ifname_problem,
    eth0 being the cluster default network's): bytes, not characters, white space and
    controls of the kernel and of Unicode, the kernel's 0xA0 byte inside a character."""
    obj = example_claim()
    params(obj)["ifName"] = name
    accepted = ifname_problem(name) is None and name != "eth0"
    e = refusal(create(admin_api, policies, obj))
    assert (e is None) == accepted, message(e) if e else "admitted"
    if e is not None:
        assert "spec.devices.config[0].opaque.parameters.ifName: " in message(e), message(e)


def test_docs_dra_example_is_admitted_as_written(policies, admin_api):
    """docs/dra.md's complete example, every object of it (in the policies' namespace):
    the DeviceClass, the ResourceClaimTemplate and the pod are admitted and stored."""
    objs = k8s.CustomObjectsApi(admin_api)
    for doc in dra_example():
        doc["metadata"].pop("namespace", None)
        if doc["kind"] == "DeviceClass":  # cluster-scoped, maybe there already: applied
            objs.patch_cluster_custom_object(   # (dry run), as `kubectl apply` would
                GROUP, VERSION, "deviceclasses", doc["metadata"]["name"], doc,
                dry_run="All", field_manager="netattach-test", force=True,
                _content_type="application/apply-patch+yaml")
        elif doc["kind"] == "Pod":
            k8s.CoreV1Api(admin_api).create_namespaced_pod(policies, doc)
        else:
            create(admin_api, policies, doc, dry_run=False)()
    stored = objs.get_namespaced_custom_object(GROUP, VERSION, policies,
                                               "resourceclaimtemplates", "macvlan")
    assert params(stored)["plugins"][0]["type"] == "macvlan"


ALLOWLIST_OVERLAY = "my-netattach-policies/kustomization.yaml"


def test_the_allowlist_is_the_configmap_docs_overlay_sets(cluster, policies, admin_api,
                                                          tmp_path):
    """docs/security.md's overlay (beside a clone of the repository) sets the allowlist
    through the ConfigMap: applied with `kubectl apply -k` (scoped as the module's), a
    claim of a type it adds is admitted once the API server reads the new parameter,
    and refused again once deploy/policies' own list is back."""
    m = re.search(rf"```yaml\n(# {re.escape(ALLOWLIST_OVERLAY)}\n.*?)```",
                  SECURITY_DOC.read_text(), re.S)
    assert m, f"docs/security.md shows no {ALLOWLIST_OVERLAY}"
    shutil.copytree(cl.DEPLOY_DIR, tmp_path / "netattach" / "deploy")
    (tmp_path / ALLOWLIST_OVERLAY).parent.mkdir()
    (tmp_path / ALLOWLIST_OVERLAY).write_text(m.group(1))
    [cm] = [d for d in cl.kustomize(tmp_path / "my-netattach-policies")
            if d["kind"] == "ConfigMap"]
    allowed = set(cm["data"]["allowedPluginTypes"].split(","))
    added = sorted(allowed - DEFAULT_ALLOWED)
    assert added and (cm["metadata"]["name"], cm["metadata"]["namespace"]) == (
        "netattach-admission", "kube-system")
    obj = example_claim()
    params(obj)["plugins"][0]["type"] = added[0]
    msg = refused_by("netattach-claims", create(admin_api, policies, obj))
    assert f"plugin type {added[0]} is not in the cluster's allowlist" in msg, msg
    label = k8s.CoreV1Api(admin_api).read_namespace(policies).metadata.labels[LABEL]
    mine = scoped_overlay(tmp_path / "scoped", tmp_path / "my-netattach-policies", label)
    kubectl(cluster, "apply", "-k", str(mine))
    try:
        faults.wait_for(f"a claim of type {added[0]} to be admitted",
                        lambda: refusal(create(admin_api, policies, obj)) is None, 120)
        assert lint_errors(obj, frozenset(allowed)) == []
    finally:
        original = scoped_overlay(tmp_path / "original", POLICIES_DIR, label)
        kubectl(cluster, "apply", "-k", str(original))
        in_force("netattach-claims", create(admin_api, policies, obj))


def test_without_the_configmap_claims_are_refused_not_unchecked(cluster, policies, admin_api,
                                                              tmp_path):
    """The binding's parameterNotFoundAction Deny: with the ConfigMap deleted, the good
    claim of docs/dra.md is refused (once the API server sees it gone), never admitted
    unchecked; `kubectl apply -k` of the policies puts the ConfigMap back."""
    good = example_claim()
    label = k8s.CoreV1Api(admin_api).read_namespace(policies).metadata.labels[LABEL]
    kubectl(cluster, "delete", "configmap", "-n", "kube-system", "netattach-admission")
    try:
        in_force("netattach-claims", create(admin_api, policies, good))
        msg = refused_by("netattach-claims", create(admin_api, policies, good))
        assert "no params found" in msg, msg
    finally:
        kubectl(cluster, "apply", "-k",
                str(scoped_overlay(tmp_path / "original", POLICIES_DIR, label)))
    faults.wait_for("the good claim to be admitted again",
                    lambda: refusal(create(admin_api, policies, good)) is None, 120)


# ---------------------------------------------------------------- network-status

def test_a_pod_cannot_be_created_with_network_status(policies, admin_api):
    """Not even by a cluster admin: the message names the annotation and who asked."""
    core = k8s.CoreV1Api(admin_api)
    msg = refused_by("netattach-network-status", lambda: core.create_namespaced_pod(
        policies, pod("forged", annotations={STATUS: '[{"name": "x", "ips": ["10.0.0.1"]}]'})))
    assert "metadata.annotations[k8s.v1.cni.cncf.io/network-status]: " \
           "netattach-testbed-admin may not set it" in msg, msg


def test_only_netattachs_accounts_set_change_or_remove_network_status(
        policies, admin_api, plugin_kube, daemon_kubeconfig):
    """On a pod of NODE: the admin may not set it (pod or status), the plugin's account
    sets it with netattach's own client, the daemon's changes it, the admin may neither
    change nor remove it; other annotations stay the owner's to edit."""
    core = k8s.CoreV1Api(admin_api)
    name = f"p-{uuid.uuid4().hex[:8]}"
    core.create_namespaced_pod(policies, pod(name))
    forged = {"metadata": {"annotations": {STATUS: "[]"}}}
    key = "metadata.annotations[k8s.v1.cni.cncf.io/network-status]"
    for patch in (core.patch_namespaced_pod, core.patch_namespaced_pod_status):
        msg = refused_by("netattach-network-status",
                         lambda patch=patch: patch(name, policies, forged))
        assert f"{key}: netattach-testbed-admin may not set it" in msg, msg
    plugin_kube.patch_pod_annotations(policies, name, {STATUS: '[{"name": "a"}]'})
    Kube(str(daemon_kubeconfig), 10.0).patch_pod_annotations(
        policies, name, {STATUS: '[{"name": "b"}]'})
    assert core.read_namespaced_pod(name, policies).metadata.annotations[STATUS] == \
        '[{"name": "b"}]'
    for value, verb in (("[]", "change"), (None, "remove")):
        msg = refused_by("netattach-network-status", lambda value=value: core.patch_namespaced_pod(
            name, policies, {"metadata": {"annotations": {STATUS: value}}}))
        assert f"{key}: netattach-testbed-admin may not {verb} it" in msg, msg
    core.patch_namespaced_pod(name, policies, {"metadata": {"annotations": {"note": "x"}}})
    assert core.read_namespaced_pod(name, policies).metadata.annotations == {
        STATUS: '[{"name": "b"}]', "note": "x"}


def test_a_binding_cannot_carry_network_status(policies, admin_api):
    """A Binding's annotations are copied to the pod it binds: refused there too."""
    core = k8s.CoreV1Api(admin_api)
    name = f"p-{uuid.uuid4().hex[:8]}"
    core.create_namespaced_pod(policies, pod(name, node=None))
    msg = refused_by("netattach-network-status", lambda: core.create_namespaced_pod_binding(
        name, policies, {"metadata": {"name": name, "annotations": {STATUS: "[]"}},
                         "target": {"kind": "Node", "name": NODE}}, _preload_content=False))
    assert "metadata.annotations[k8s.v1.cni.cncf.io/network-status]" in msg, msg
    assert core.read_namespaced_pod(name, policies).spec.node_name is None


def _template(annotations: dict | None = None) -> dict:
    return {"metadata": {"labels": {"app": "a"}, "annotations": annotations or {}},
            "spec": {**pod("x")["spec"], "nodeName": None, "restartPolicy": "Always"}}


def _workloads(annotations: dict | None) -> dict[str, tuple[str, Callable[..., Any], dict]]:
    """kind -> (the key of its pod template, its create call, a body)."""
    t = _template(annotations)
    job = {**t, "spec": {**t["spec"], "restartPolicy": "Never"}}
    sel = {"matchLabels": {"app": "a"}}
    return {
        "Deployment": ("spec.template", k8s.AppsV1Api.create_namespaced_deployment,
                       {"spec": {"selector": sel, "template": t}}),
        "ReplicaSet": ("spec.template", k8s.AppsV1Api.create_namespaced_replica_set,
                       {"spec": {"selector": sel, "template": t}}),
        "StatefulSet": ("spec.template", k8s.AppsV1Api.create_namespaced_stateful_set,
                        {"spec": {"selector": sel, "serviceName": "s", "template": t}}),
        "DaemonSet": ("spec.template", k8s.AppsV1Api.create_namespaced_daemon_set,
                      {"spec": {"selector": sel, "template": t}}),
        "Job": ("spec.template", k8s.BatchV1Api.create_namespaced_job,
                {"spec": {"template": job}}),
        "CronJob": ("spec.jobTemplate.spec.template", k8s.BatchV1Api.create_namespaced_cron_job,
                    {"spec": {"schedule": "@daily", "jobTemplate": {"spec": {"template": job}}}}),
        "ReplicationController": (
            "spec.template", k8s.CoreV1Api.create_namespaced_replication_controller,
            {"spec": {"selector": {"app": "a"}, "template": t}}),
        "PodTemplate": ("template", k8s.CoreV1Api.create_namespaced_pod_template,
                        {"template": t}),
    }


@pytest.mark.parametrize("kind", list(_workloads(None)))
def test_a_pod_template_cannot_carry_network_status(policies, admin_api, kind):
    """Each pod template a controller copies into pods: refused with the annotation
    (naming the template's key), admitted without (dry runs)."""
    for template_annotations in ({STATUS: "[]"}, None):
        path, method, body = _workloads(template_annotations)[kind]
        api = getattr(k8s, method.__qualname__.split(".")[0])(admin_api)
        create_it = getattr(api, method.__name__)
        body = {"metadata": {"name": f"w-{uuid.uuid4().hex[:8]}"}, **body}

        def call(create_it=create_it, body=body) -> Any:
            return create_it(policies, body, dry_run="All")
        if template_annotations:
            msg = refused_by("netattach-network-status-templates", call)
            assert f"denied request: {path}.metadata.annotations[{STATUS}]: " in msg, msg
        else:
            call()


def test_a_template_stored_without_network_status_cannot_get_it(policies, admin_api):
    apps = k8s.AppsV1Api(admin_api)
    name = f"d-{uuid.uuid4().hex[:8]}"
    _, _, body = _workloads(None)["Deployment"]
    apps.create_namespaced_deployment(policies, {"metadata": {"name": name}, **body})
    msg = refused_by("netattach-network-status-templates", lambda: apps.patch_namespaced_deployment(
        name, policies, {"spec": {"template": {"metadata": {"annotations": {STATUS: "[]"}}}}}))
    assert f"spec.template.metadata.annotations[{STATUS}]" in msg, msg
    apps.patch_namespaced_deployment(name, policies, {"spec": {"replicas": 3}})


# ---------------------------------------------------------------- node-bound tokens

def _kube_refused(call: Callable[[], Any]) -> str:
    with pytest.raises(KubeError) as e:
        call()
    assert e.value.status == 422 and "netattach-node-bound" in str(e.value), str(e.value)
    return str(e.value)


@pytest.mark.parametrize("account", ["netattach", "netattach-daemon"])
def test_a_node_bound_token_writes_the_pods_of_its_node_only(
        policies, admin_api, plugin_kubeconfig, daemon_kubeconfig, account):
    """netattach's own client, with a token bound to a pod on NODE (as the DaemonSet's
    pods get): it publishes network-status on a pod of NODE; on a pod of another node or
    of none it is refused, the message naming spec.nodeName."""
    kube = Kube(str(plugin_kubeconfig if account == "netattach" else daemon_kubeconfig), 10.0)
    core = k8s.CoreV1Api(admin_api)
    names = {node: f"p-{uuid.uuid4().hex[:8]}" for node in (NODE, OTHER_NODE, None)}
    for node, name in names.items():
        core.create_namespaced_pod(policies, pod(name, node))
    kube.patch_pod_annotations(policies, names[NODE], {STATUS: "[]"})
    for node in (OTHER_NODE, None):
        msg = _kube_refused(lambda node=node: kube.patch_pod_annotations(
            policies, names[node], {STATUS: "[]"}))
        assert f"system:serviceaccount:kube-system:{account} (a token of node {NODE}) may " \
               f"write to the pods of its node only: pod {policies}/{names[node]} has " \
               f"spec.nodeName {node or 'unset'}" in msg, msg
        assert STATUS not in (core.read_namespaced_pod(names[node], policies).metadata
                              .annotations or {})


def test_a_token_naming_no_node_is_not_pinned(cluster, policies, admin_api, tmp_path):
    """What the policy leaves to RBAC (docs/security.md): a token of the same account
    that names no node (here a TokenRequest without a pod) is not pinned."""
    path = cl.plugin_kubeconfig(cluster, path=tmp_path / "unbound.kubeconfig",
                                expiration_seconds=600)
    name = f"p-{uuid.uuid4().hex[:8]}"
    k8s.CoreV1Api(admin_api).create_namespaced_pod(policies, pod(name, OTHER_NODE))
    Kube(str(path), 10.0).patch_pod_annotations(policies, name, {STATUS: "[]"})


def _claim_on(admin_api, namespace: str, node: str) -> str:
    """A claim of docs/dra.md's config allocated (as the scheduler would write it) to a
    device of `node`'s pool; returns its name."""
    obj = example_claim()
    create(admin_api, namespace, obj, dry_run=False)()
    name = obj["metadata"]["name"]
    k8s.CustomObjectsApi(admin_api).patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, "resourceclaims", name, {"status": {"allocation": {
            "devices": {"results": [{"request": "macvlan0", "driver": DRIVER, "pool": node,
                                     "device": "eth1-0"}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}})
    return name


def _entry(node: str) -> dict:
    return {"driver": DRIVER, "pool": node, "device": "eth1-0", "conditions": [{
        "type": "Ready", "status": "True", "reason": "NetworkInterfaceReady", "message": "m",
        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}


def test_a_node_bound_token_writes_the_claims_of_its_node_only(policies, admin_api,
                                                               plugin_kube):
    """A claim allocated to NODE: netattach's client writes its status.devices entry. A
    claim allocated to another node, or not at all: even a write that changes nothing
    (what a DEL's clearing sends) is refused, the message naming the allocation; so is
    the entry itself where RBAC would let it through (`arbitrary-node:patch`, which
    Kubernetes' own per-driver check asks for; granted here in this namespace only)."""
    mine, theirs = _claim_on(admin_api, policies, NODE), _claim_on(admin_api, policies, OTHER_NODE)
    unallocated = example_claim()
    create(admin_api, policies, unallocated, dry_run=False)()
    plugin_kube.apply_claim_devices(policies, mine, [_entry(NODE)])
    for name in (theirs, unallocated["metadata"]["name"]):
        msg = _kube_refused(lambda name=name: plugin_kube.apply_claim_devices(policies, name, []))
        assert f"may write to the ResourceClaims allocated to its node only: ResourceClaim " \
               f"{policies}/{name} is not (status.allocation.nodeSelector)" in msg, msg
    rbac = k8s.RbacAuthorizationV1Api(admin_api)
    rbac.create_namespaced_role(policies, {"metadata": {"name": "any-node"}, "rules": [{
        "apiGroups": [GROUP], "resources": ["resourceclaims/driver"],
        "resourceNames": [DRIVER], "verbs": ["arbitrary-node:patch"]}]})
    rbac.create_namespaced_role_binding(policies, {
        "metadata": {"name": "any-node"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "any-node"},
        "subjects": [{"kind": "ServiceAccount", "name": "netattach",
                      "namespace": "kube-system"}]})
    seen: list[str] = []

    def past_rbac() -> bool:  # RBAC reaches the authorizer in the background too
        try:
            plugin_kube.apply_claim_devices(policies, theirs, [_entry(OTHER_NODE)])
        except KubeError as e:
            seen[:] = [str(e)]
            return "netattach-node-bound" in str(e)
        raise AssertionError(f"ResourceClaim {theirs} of {OTHER_NODE} written")
    faults.wait_for("RBAC to let the write reach the policy", past_rbac)
    assert "is not (status.allocation.nodeSelector)" in seen[0], seen
    claim = k8s.CustomObjectsApi(admin_api).get_namespaced_custom_object(
        GROUP, VERSION, policies, "resourceclaims", theirs)
    assert "devices" not in claim["status"]
    got = k8s.CustomObjectsApi(admin_api).get_namespaced_custom_object(
        GROUP, VERSION, policies, "resourceclaims", mine)["status"]["devices"]
    assert [(d["pool"], d["device"]) for d in got] == [(NODE, "eth1-0")]


# ---------------------------------------------------------------- the node's ResourceSlice

def test_the_daemons_slice_is_of_its_nodes_pool(admin_api, daemon_kubeconfig):
    """deploy/thick/rbac.yaml's netattach-daemon-dra-slices: the daemon's account (token
    bound to a pod on NODE) writes a slice of NODE only in the pool named after NODE, as
    daemon/dra.py publishes it; another pool is refused, the message naming
    spec.pool.name (an update cannot change a pool's name: the field is immutable)."""
    from netattach.daemon import dra
    mine = k8s.CustomObjectsApi(cl.api_client(daemon_kubeconfig))
    admin = k8s.CustomObjectsApi(admin_api)

    def body(pool: str) -> dict:
        return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceSlice",
                "metadata": {"name": f"pool-{uuid.uuid4().hex[:8]}"},
                "spec": {**dra.slice_spec(NODE, [{"name": "cni-0"}], 1),
                         "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1}}}

    other = body("a-pool-of-another-node")
    in_force("netattach-daemon-dra-slices", lambda: mine.create_cluster_custom_object(
        GROUP, VERSION, "resourceslices", other, dry_run="All"))
    msg = refused_by("netattach-daemon-dra-slices", lambda: mine.create_cluster_custom_object(
        GROUP, VERSION, "resourceslices", other))
    assert f"spec.pool.name: netattach-daemon may write the pool of its own node only " \
           f"(spec.pool.name = spec.nodeName), not a-pool-of-another-node of node {NODE}" in msg
    own = mine.create_cluster_custom_object(GROUP, VERSION, "resourceslices", body(NODE))
    admin.delete_cluster_custom_object(GROUP, VERSION, "resourceslices", own["metadata"]["name"])
