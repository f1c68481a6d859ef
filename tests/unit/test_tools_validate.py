"""`netattach validate`: each class of mistake with its key and message, document
indexes, the spec's examples and deploy/examples, and the command itself (exit
statuses, text and --output json) through the installed command or the artifact."""
from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest
import yaml

from netattach.tools.validate import Finding, format_text, lint_sources
from netattach_testbed.scenario import netattach_command

REPO = Path(__file__).resolve().parents[2]
SPEC_EXAMPLES = REPO / "tests" / "data" / "spec_examples"
DEPLOY_EXAMPLES = REPO / "deploy" / "examples"
NETS = "metadata.annotations[k8s.v1.cni.cncf.io/networks]"


def lint(*texts: str, **kw) -> list[Finding]:
    """Findings for YAML texts given as files f0.yaml, f1.yaml, ..."""
    return lint_sources([(f"f{i}.yaml", textwrap.dedent(t).encode()) for i, t in enumerate(texts)],
                        **kw)


def nad(config: object = None, name: str = "net-a", extra: str = "", **meta) -> str:
    """A NAD document; `config` a dict/list (JSON-encoded) or str (as is), None for no spec."""
    doc: dict = {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                 "metadata": {"name": name, **meta}}
    if config is not None:
        doc["spec"] = {"config": config if isinstance(config, str) else json.dumps(config)}
    return yaml.safe_dump(doc, sort_keys=False) + extra


def pod(networks: object, name: str = "web", namespace: str | None = None,
        annotations: dict | None = None) -> str:
    meta: dict = {"name": name, "annotations": {**({"k8s.v1.cni.cncf.io/networks":
                                                     networks if isinstance(networks, str)
                                                     else json.dumps(networks)}
                                                    if networks is not None else {}),
                                                 **(annotations or {})}}
    if namespace:
        meta["namespace"] = namespace
    return yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                           "spec": {"containers": [{"name": "a", "image": "i"}]}}, sort_keys=False)


def conf(**plugin) -> dict:
    return {"cniVersion": "1.0.0", "name": "net-a", "type": "macvlan", **plugin}


def conflist(*plugins: dict, **top) -> dict:
    return {"cniVersion": "1.0.0", "name": "net-a", "plugins": list(plugins), **top}


def only(findings: list[Finding], severity: str | None = None) -> list[tuple[str, str | None, str]]:
    return [(f.severity, f.key, f.message) for f in findings
            if severity is None or f.severity == severity]


def assert_one(findings: list[Finding], severity: str, key: str, fragment: str) -> None:
    hits = [f for f in findings if (f.severity, f.key) == (severity, key) and fragment in f.message]
    assert len(hits) == 1, format_text(findings) or "(no findings)"


# ---------------------------------------------------------------- NADs

ALL_CAPS = {"ips": True, "mac": True, "portMappings": True, "bandwidth": True,
            "infinibandGUID": True}

NAD_MISTAKES = [
    # metadata (spec §3.3)
    ("bad name", nad(conf(), name="Net_A"), "error", "metadata.name",
     "is not a DNS-1123 label"),
    ("subdomain name", nad(conf(), name="net.a"), "error", "metadata.name",
     "is a DNS-1123 subdomain: the API server accepts it"),
    ("name too long", nad(conf(), name="n" * 64), "error", "metadata.name", "at most 63"),
    ("no name", nad(conf(), name=None), "error", "metadata.name", "required"),
    ("generateName", nad(conf(), name=None, generateName="net-"), "error", "metadata.name",
     "generateName gives a name nobody can select by"),
    ("bad namespace", nad(conf(), namespace="Other_NS"), "error", "metadata.namespace",
     "is not a DNS-1123 label"),
    ("annotation not a string", nad(conf(), annotations={"k8s.v1.cni.cncf.io/resourceName": 3}),
     "error", "metadata.annotations[k8s.v1.cni.cncf.io/resourceName]",
     "annotation values must be strings, not a number"),
    # object shape (§3.1, §3.2)
    ("apiVersion", nad(conf()).replace("k8s.cni.cncf.io/v1", "k8s.cni.cncf.io/v1beta1"),
     "error", "apiVersion", "must be 'k8s.cni.cncf.io/v1'"),
    ("kind typo", nad(conf()).replace("NetworkAttachmentDefinition", "NetworkAttachmentDefiniton"),
     "error", "kind", "did you mean NetworkAttachmentDefinition?"),
    ("unknown top-level field", nad(conf(), extra="status: {}\n"), "warning", "status",
     "unknown field"),
    ("unknown spec field", nad(conf()) + "  vlan: 7\n", "warning", "spec.vlan",
     "the CRD (deploy/base/crd.yaml) prunes everything under spec but config"),
    ("spec not an object", nad() + "spec: macvlan\n", "error", "spec",
     "spec must be an object, not a string"),
    ("config as YAML mapping", nad() + "spec:\n  config:\n    type: macvlan\n", "error",
     "spec.config", "must be a string of JSON, not an object (§3.2); write the JSON as a YAML "
     "string, e.g. a block scalar (config: |)"),
    # spec.config: JSON, conf or conflist (CNI SPEC.md section 1)
    ("config not JSON", nad('{"cniVersion": "1.0.0", "type": "macvlan",}'), "error",
     "spec.config", "spec.config is not valid JSON"),
    ("config not an object", nad("[1, 2]"), "error", "spec.config",
     "must be a JSON object (a CNI config or conflist), not a list"),
    ("zero plugins", nad(conflist()), "error", "spec.config", "'plugins' must be a non-empty list"),
    ("plugins not a list", nad({"cniVersion": "1.0.0", "plugins": {"type": "x"}}), "error",
     "spec.config", "'plugins' must be a non-empty list"),
    ("plugin without type", nad(conflist({"type": "bridge"}, {"sysctl": {}})), "error",
     "spec.config", "plugins[1] has no 'type'"),
    ("plugin not an object", nad(conflist("bridge")), "error", "spec.config",
     "plugins[0] is not a JSON object"),
    ("conf without type", nad({"cniVersion": "1.0.0", "bridge": "br0"}), "error", "spec.config",
     "the configuration has no 'type'"),
    ("unknown cniVersion", nad(conf(cniVersion="0.5.0")), "error", "spec.config",
     "'0.5.0'"),
    ("malformed cniVersion", nad(conf(cniVersion="latest")), "error", "spec.config",
     "invalid cniVersion 'latest'"),
    ("cniVersion not a string", nad(conf(cniVersion=1)), "error", "spec.config",
     "cniVersion must be a string"),
    ("no cniVersion", nad({"name": "net-a", "type": "macvlan"}), "warning",
     "spec.config.cniVersion", "reads it as 0.1.0"),
    ("config name not a string", nad(conf(name=5)), "error", "spec.config",
     "the \"name\" in spec.config must be a string, not a number"),
    ("network name with a space", nad(conf(name="my net")), "error", "spec.config.name",
     "invalid network name 'my net'"),
    ("network name differs", nad(conf(name="other")), "note", "spec.config.name",
     "strongly recommends they match (§3.4.3)"),
    ("hostile type", nad(conf(type="../../usr/bin/sh")), "error", "spec.config.type",
     "invalid plugin type '../../usr/bin/sh'"),
    ("hostile type in a list", nad(conflist({"type": "bridge"}, {"type": "/bin/sh"})), "error",
     "spec.config.plugins[1].type", "invalid plugin type '/bin/sh'"),
    ("dot-dot type", nad(conf(type="..")), "error", "spec.config.type", "invalid plugin type"),
    ("hostile ipam type", nad(conf(ipam={"type": "../host-local"})), "error",
     "spec.config.ipam.type", "invalid plugin type '../host-local'"),
    ("netattach itself", nad(conflist({"type": "netattach"})), "error",
     "spec.config.plugins[0].type", "is a delegating meta-plugin"),
    ("capabilities not an object", nad(conf(capabilities=["ips"])), "error", "spec.config",
     "'capabilities' must be an object"),
    ("capability not a boolean", nad(conf(capabilities={"mac": "true"})), "warning",
     "spec.config.capabilities.mac", "is a string: only JSON true declares a capability"),
    ("capability in the wrong case", nad(conflist({"type": "portmap",
                                                   "capabilities": {"portmappings": True}})),
     "warning", "spec.config.plugins[0].capabilities.portmappings", "did you mean 'portMappings'"),
    ("runtimeConfig in a plugin", nad(conf(runtimeConfig={"mac": "02:00:00:00:00:01"})),
     "warning", "spec.config.runtimeConfig", "reserved for the runtime"),
    ("cni.dev key", nad(conf(**{"cni.dev/valid-attachments": []})), "warning",
     "spec.config.cni.dev/valid-attachments", "reserved for the runtime"),
    ("type next to plugins", nad(conflist({"type": "bridge"}, type="macvlan")), "warning",
     "spec.config.type", "ignores the top-level \"type\""),
    # on-disk configs (§3.2.4, §3.4.1)
    ("no spec", nad(), "note", "spec", "the on-disk CNI config whose \"name\" is \"net-a\""),
    ("no config", nad() + "spec: {}\n", "note", "spec.config", "absent: netattach uses the on-disk"),
    ("empty config", nad("  "), "note", "spec.config", "is empty, which netattach reads as absent"),
]


@pytest.mark.parametrize("text,severity,key,fragment",
                         [case[1:] for case in NAD_MISTAKES], ids=[c[0] for c in NAD_MISTAKES])
def test_nad_mistake(text, severity, key, fragment):
    findings = lint(text)
    assert_one(findings, severity, key, fragment)
    assert all(f.kind in ("NetworkAttachmentDefinition", "NetworkAttachmentDefiniton")
               and f.document == 0 and f.file == "f0.yaml" for f in findings)


def test_the_config_of_a_nad_with_a_bad_name_is_still_checked():
    assert [(f.severity, f.key) for f in lint(nad(conf(type="a/b", name="net.a"), name="net.a"))] \
        == [("error", "metadata.name"), ("error", "spec.config.type")]
    assert [(f.severity, f.key) for f in lint(nad(conf(type="a/b"), name=None))] == [
        ("error", "metadata.name"), ("error", "spec.config.type")]


@pytest.mark.parametrize("config", [
    conf(),
    conf(capabilities=ALL_CAPS),
    conflist({"type": "bridge", "ipam": {"type": "host-local", "subnet": "10.1.0.0/24"}},
             {"type": "tuning"}, {"type": "portmap", "capabilities": {"portMappings": True}}),
    {"cniVersion": "0.3.0", "type": "awesome-plugin"},   # name injected (§3.4.2)
    {"cniVersions": ["0.4.0", "1.0.0"], "name": "net-a", "type": "bridge"},
    conf(args={"cni": {"spoofchk": "on"}}),              # NAD args are legitimate (§4.1.2.1.6.2)
])
def test_valid_nads_have_no_findings(config):
    assert lint(nad(config)) == []


# ---------------------------------------------------------------- pods

def net_a(*plugins: dict) -> str:
    return nad(conflist(*plugins) if plugins else conf(capabilities=ALL_CAPS))


SUBNET_NAD = nad(conf(capabilities={"ips": True},
                      ipam={"type": "host-local", "ranges": [[{"subnet": "10.1.0.0/24"}]]}))

POD_MISTAKES = [
    ("annotation not JSON", [pod('[{"name": "net-a",}]')], "error", NETS, "not valid JSON"),
    ("annotation an object", [pod('{"name": "net-a"}')], "error", NETS, "wrap the object in [ ]"),
    ("element not an object", [pod('["net-a"]')], "error", f"{NETS}[0]",
     "each element must be a JSON object, not a string"),
    ("no name", [pod([{"interface": "x"}])], "error", f"{NETS}[0].name", "the required key is missing"),
    ("bad network name", [pod("Net_A")], "error", f"{NETS}[0].name", "must be a DNS-1123 label"),
    ("namespace form with two slashes", [pod("a/b/c")], "error", f"{NETS}[0]",
     "has more than one '/'; expected [namespace/]name[@interface]"),
    ("empty namespace", [pod("/net-a")], "error", f"{NETS}[0].namespace", "has an empty namespace"),
    ("bad namespace", [pod([{"name": "net-a", "namespace": "Other"}])], "error",
     f"{NETS}[0].namespace", "a namespace must be a DNS-1123 label"),
    ("empty item", [pod("net-a,,net-b")], "error", f"{NETS}[1]", "empty item"),
    ("duplicate interface", [pod("net-a@data0,net-b@data0")], "error", f"{NETS}[1].interface",
     "interface name already requested by element 0"),
    ("interface eth0", [pod([{"name": "net-a", "interface": "eth0"}])], "error",
     f"{NETS}[0].interface", "is already used by an earlier attachment"),
    ("interface too long", [pod("net-a@averyverylongname")], "error", f"{NETS}[0].interface",
     "not a valid Linux interface name"),
    ("bad MAC", [pod([{"name": "net-a", "mac": "01:00:5e:00:00:01"}])], "error",
     f"{NETS}[0].mac", "is a multicast address"),
    ("bad IP", [pod([{"name": "net-a", "ips": ["10.1.0.300/24"]}])], "error", f"{NETS}[0].ips",
     "is not an IPv4/IPv6 address"),
    ("ips and ipam-claim-reference", [pod([{"name": "net-a", "ips": ["10.1.0.5/24"],
                                            "ipam-claim-reference": "claim"}])],
     "error", f"{NETS}[0].ipam-claim-reference", "cannot be combined with \"ips\""),
    ("port mapping out of range", [pod([{"name": "net-a", "portMappings": [
        {"hostPort": 0, "containerPort": 80}]}])], "error", f"{NETS}[0].portMappings",
     "hostPort must be an integer from 1 to 65535"),
    ("default-route twice", [pod([{"name": "net-a", "default-route": ["10.1.0.1"]},
                                  {"name": "net-b", "default-route": ["10.2.0.1"]}])],
     "error", f"{NETS}[1].default-route", "only one element may set default-route"),
    ("two IPv4 gateways", [pod([{"name": "net-a", "default-route": ["10.1.0.1", "10.1.0.2"]}])],
     "error", f"{NETS}[0].default-route", "netattach installs at most one default gateway per "
     "address family"),
    ("loopback gateway", [pod([{"name": "net-a", "default-route": ["127.0.0.1"]}])], "error",
     f"{NETS}[0].default-route", "is not a unicast address"),
    ("annotation as a YAML list", [textwrap.dedent("""\
        apiVersion: v1
        kind: Pod
        metadata:
          name: web
          annotations:
            k8s.v1.cni.cncf.io/networks: [net-a]
        """)], "error", NETS, "annotation values must be strings, not a list"),
    # capabilities (§4.1.2.1.3.2, .4.2, .7.2, .8.2, .10.2), checked against a NAD in the files
    ("ips without the capability", [net_a({"type": "macvlan"}), pod([{"name": "net-a",
                                                                       "ips": ["10.1.0.5/24"]}])],
     "error", f"{NETS}[0].ips", "asks for 'ips' but no plugin of NetworkAttachmentDefinition "
     "net-a declares the capability; add \"capabilities\": {\"ips\": true}"),
    ("mac without the capability", [net_a({"type": "macvlan"}),
                                    pod([{"name": "net-a", "mac": "02:00:00:00:00:01"}])],
     "error", f"{NETS}[0].mac", "asks for 'mac'"),
    ("portMappings without the capability", [net_a({"type": "bridge"}), pod([{
        "name": "net-a", "portMappings": [{"hostPort": 8080, "containerPort": 80}]}])],
     "error", f"{NETS}[0].portMappings", "asks for 'portMappings'"),
    ("bandwidth without the capability", [net_a({"type": "bridge"}), pod([{
        "name": "net-a", "bandwidth": {"ingressRate": 1000000}}])],
     "error", f"{NETS}[0].bandwidth", "asks for 'bandwidth'"),
    ("infiniband-guid without the capability", [net_a({"type": "ib-sriov"}), pod([{
        "name": "net-a", "infiniband-guid": "24:8a:07:03:00:8d:ae:2f"}])],
     "error", f"{NETS}[0].infiniband-guid", "asks for 'infinibandGUID'"),
    ("capability declared false", [net_a({"type": "macvlan", "capabilities": {"mac": False}}),
                                   pod([{"name": "net-a", "mac": "02:00:00:00:00:01"}])],
     "error", f"{NETS}[0].mac", "asks for 'mac'"),
    # references and sanity
    ("NAD not in the files", [pod("net-b")], "note", f"{NETS}[0].name",
     "NetworkAttachmentDefinition default/net-b is not in the files given"),
    ("capabilities of an on-disk NAD", [nad(name="net-a"), pod([{"name": "net-a",
                                                                 "ips": ["10.1.0.5/24"]}])],
     "note", f"{NETS}[0]", "capabilities for ips not checked: default/net-a has its config on "
     "the nodes' disk"),
    ("gateway outside the subnet", [SUBNET_NAD, pod([{"name": "net-a", "ips": ["10.1.0.5/24"],
                                                      "default-route": ["10.9.0.1"]}])],
     "warning", f"{NETS}[0].default-route", "gateway 10.9.0.1 is outside every subnet this "
     "attachment gets (10.1.0.0/24): the default route via net1 fails"),
    ("gateway outside the NAD's range", [SUBNET_NAD, pod([{"name": "net-a",
                                                           "default-route": ["10.9.0.1"]}])],
     "warning", f"{NETS}[0].default-route", "outside every subnet this attachment gets "
     "(10.1.0.0/24)"),
    ("gateway outside static addresses", [nad(conf(ipam={"type": "static", "addresses": [
        {"address": "10.5.0.5/24"}, {"address": "fd00:5::5/64"}]})),
        pod([{"name": "net-a", "default-route": ["10.6.0.1", "fd00:5::1"]}])],
     "warning", f"{NETS}[0].default-route", "gateway 10.6.0.1 is outside every subnet this "
     "attachment gets (10.5.0.0/24)"),
    ("gateway is the pod's address", [SUBNET_NAD, pod([{"name": "net-a", "ips": ["10.1.0.5/24"],
                                                        "default-route": ["10.1.0.5"]}])],
     "warning", f"{NETS}[0].default-route", "gateway 10.1.0.5 is the pod's own address"),
    ("burst under a frame", [pod([{"name": "net-b", "bandwidth": {"egressRate": 10**6,
                                                                  "egressBurst": 1000}}])],
     "warning", f"{NETS}[0].bandwidth.egressBurst", "1000 bits is less than one 1500-byte frame"),
    ("network-status in a manifest", [pod(None, annotations={
        "k8s.v1.cni.cncf.io/network-status": "[]"})], "note",
     "metadata.annotations[k8s.v1.cni.cncf.io/network-status]", "is written by the plugin"),
    ("default-network annotation with two networks", [pod(None, annotations={
        "v1.multus-cni.io/default-network": "a,b"})], "error",
     "metadata.annotations[v1.multus-cni.io/default-network]", "must name exactly one network, not 2"),
    ("default-network looked up in kube-system", [nad(conf(), name="a"), pod(None, annotations={
        "v1.multus-cni.io/default-network": "a"})], "note",
     "metadata.annotations[v1.multus-cni.io/default-network][0].name",
     "NetworkAttachmentDefinition kube-system/a is not in the files given"),
    ("bad default-network annotation", [pod(None, annotations={
        "v1.multus-cni.io/default-network": "A"})], "error",
     "metadata.annotations[v1.multus-cni.io/default-network][0].name", "DNS-1123 label"),
]


@pytest.mark.parametrize("texts,severity,key,fragment",
                         [case[1:] for case in POD_MISTAKES], ids=[c[0] for c in POD_MISTAKES])
def test_pod_mistake(texts, severity, key, fragment):
    assert_one(lint(*texts), severity, key, fragment)


def test_every_missing_capability_is_reported_not_only_the_first():
    findings = lint(net_a({"type": "macvlan"}), pod([{
        "name": "net-a", "ips": ["10.1.0.5/24"], "mac": "02:00:00:00:00:01",
        "portMappings": [{"hostPort": 1, "containerPort": 2}], "bandwidth": {"egressRate": 10**7},
        "infiniband-guid": "24:8a:07:03:00:8d:ae:2f", "deviceID": "0000:04:00.5",
        "ipam-claim-reference": None}]))
    # the deviceID first: net-a has no resourceName, so the ADD refuses it
    assert [(f.severity, f.key) for f in findings] == [
        ("error", f"{NETS}[0].{k}") for k in ("deviceID", "ips", "mac", "portMappings",
                                              "bandwidth", "infiniband-guid")]
    assert all(f.document == 0 and f.file == "f1.yaml" and f.kind == "Pod" for f in findings)


def test_declared_capabilities_pass():
    assert lint(net_a(), pod([{
        "name": "net-a", "interface": "data0", "ips": ["10.1.0.5/24"], "mac": "02:00:00:00:00:01",
        "portMappings": [{"hostPort": 1, "containerPort": 2}], "bandwidth": {"egressRate": 10**7},
        "infiniband-guid": "24:8a:07:03:00:8d:ae:2f", "default-route": ["10.1.0.1"]}])) == []


def test_strict_makes_a_missing_nad_an_error():
    findings = lint(pod("net-a,net-b"), nad(conf()), strict=True)
    assert only(findings) == [("error", f"{NETS}[1].name",
                               "NetworkAttachmentDefinition default/net-b is not in the files "
                               "given: it must exist in the cluster when the pod starts, or the "
                               "ADD fails (§3.4.1 step 4)")]


def test_namespaces_resolve_like_kubectl_apply():
    text = nad(conf()) + "---\n" + pod("net-a,team-b/net-a", namespace="team-a")
    # NAD without namespace: in --namespace; the pod's own namespace for its references
    assert [f.key for f in lint(text, namespace="team-a")] == [f"{NETS}[1].name"]
    assert [f.message.split(" is ")[0] for f in lint(text)] == [
        "NetworkAttachmentDefinition team-a/net-a", "NetworkAttachmentDefinition team-b/net-a"]


def test_pod_templates_of_workloads():
    spec = {"metadata": {"annotations": {"k8s.v1.cni.cncf.io/networks": "net-a@eth0"}},
            "spec": {"containers": [{"name": "a", "image": "i"}]}}
    docs = [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
         "spec": {"template": spec}},
        {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c", "namespace": "x"},
         "spec": {"jobTemplate": {"spec": {"template": spec}}}},
    ]
    findings = lint(yaml.safe_dump_all(docs), nad(conf()), nad(conf(), namespace="x"))
    assert [(f.document, f.kind, f.key, f.severity) for f in findings] == [
        (0, "Deployment", f"spec.template.{NETS}[0].interface", "error"),
        (1, "CronJob", f"spec.jobTemplate.spec.template.{NETS}[0].interface", "error")]


def test_list_items_keep_their_document_and_item():
    items = {"apiVersion": "v1", "kind": "List", "items": [
        yaml.safe_load(nad(conf())), yaml.safe_load(pod("net-a@eth0"))]}
    findings = lint("kind: ConfigMap\n---\n" + yaml.safe_dump(items))
    assert [(f.document, f.key, f.kind) for f in findings] == [
        (1, f"items[1].{NETS}[0].interface", "Pod")]


def test_multi_document_indexes_and_a_yaml_error_later_on():
    text = (nad(conf()) + "---\n" + nad(conflist(), name="net-b") + "---\n---\n"
            + nad(conf(type="/x", name="net-c"), name="net-c") + "---\nkind: [oops\n")
    findings = lint(text)
    assert [(f.document, f.name, f.severity, f.key) for f in findings] == [
        (1, "net-b", "error", "spec.config"),
        (3, "net-c", "error", "spec.config.type"),     # the empty document 2 still counts
        (4, None, "error", None)]
    assert findings[-1].message == (
        "not valid YAML: line 24, column 1: did not find expected ',' or ']' (while parsing a "
        "flow sequence at line 23, column 7)")


@pytest.mark.parametrize("text,key,fragment", [
    ("- a\n- b\n", None, "not a Kubernetes object"),
    ("just text\n", None, "not a Kubernetes object"),
    ("apiVersion: v1\nmetadata: {name: x}\n", "kind", "required"),
])
def test_documents_that_are_not_objects(text, key, fragment):
    assert_one(lint(text), "error", key, fragment)


def test_other_kinds_and_empty_documents_are_skipped():
    assert lint("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\n\n---\n# nothing\n"
                "---\napiVersion: k8s.cni.cncf.io/v1alpha1\nkind: IPAMClaim\nmetadata: {name: a.b}\n"
                ) == []


def test_deeply_nested_yaml_is_a_finding_not_a_crash():
    assert_one(lint("a: " + "[" * 5000), "error", None, "not valid YAML")


def test_a_nad_defined_twice():
    findings = lint(nad(conf()), nad(conf()))
    assert only(findings) == [("warning", "metadata.name", "NetworkAttachmentDefinition "
                               "default/net-a is also defined at f0.yaml:0; kubectl apply keeps "
                               "the last one")]


def test_text_format():
    findings = lint(nad(conf(type="a/b"), namespace="ns1"), "apiVersion: v1\nmetadata: {}\n")
    assert format_text(findings) == (
        "f0.yaml:0 (NetworkAttachmentDefinition ns1/net-a): error: spec.config.type: invalid "
        "plugin type 'a/b'; a plugin type is a file name: not empty, '.', '..', no '/' or NUL\n"
        "f1.yaml:0: error: kind: required: every Kubernetes object has a kind\n")


# ---------------------------------------------------------------- the spec's examples

# Every NAD or pod example of the spec (and its other object examples, skipped as other
# kinds) is a fixture; left out are the runtimeConfig snippets with "..." (what the
# plugin sends, not manifests), the Go types, the §8.1 CRD (split across code blocks
# past repair) and the bare name lists of §8.3.1.
# The only findings above notes the spec's own examples draw (file -> findings).
SPEC_EXAMPLE_WARNINGS = {
    "s4_1_2_1_8_1_bandwidth.yaml": [
        ("warning", f"{NETS}[0].bandwidth.ingressBurst"),
        ("warning", f"{NETS}[0].bandwidth.egressBurst")],
}


@pytest.mark.parametrize("path", sorted(SPEC_EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_spec_example_passes(path):
    text = path.read_text()
    assert text.startswith("# Multi-net spec v1.3 §"), "each fixture cites its section"
    findings = lint_sources([(path.name, path.read_bytes())])
    assert [(f.severity, f.key) for f in findings if f.severity != "note"] == \
        SPEC_EXAMPLE_WARNINGS.get(path.name, [])


def test_spec_examples_cover_every_section_with_a_nad_or_pod_example():
    sections = {p.name.split("_", 1)[0] for p in SPEC_EXAMPLES.glob("*.yaml")}
    assert {"s3", "s4", "s5", "s8"} <= sections
    assert len(list(SPEC_EXAMPLES.glob("*.yaml"))) == 23


def test_spec_bandwidth_example_verbatim_is_refused_for_its_comments():
    verbatim = (SPEC_EXAMPLES / "s4_1_2_1_8_1_bandwidth.yaml").read_text().replace(
        '"ingressRate": 2048,', '"ingressRate": 2048, // Limit ingress to 2Kbps')
    assert_one(lint(verbatim), "error", NETS, "not valid JSON")


def test_spec_examples_with_their_nads_resolve():
    """§3.3.1: the NAD and the pod that selects it twice, in one file: nothing to note
    but the on-disk config of a NAD without spec."""
    path = SPEC_EXAMPLES / "s3_3_1_names.yaml"
    assert [(f.severity, f.key) for f in lint_sources([(path.name, path.read_bytes())])] == [
        ("note", "spec")]


# ---------------------------------------------------------------- deploy/examples

def test_deploy_examples_pass_together_and_alone():
    paths = sorted(DEPLOY_EXAMPLES.glob("*.yaml"))
    assert {p.name for p in paths} >= {"macvlan-host-local.yaml", "bridge-tuning-portmap.yaml",
                                       "on-disk-config.yaml", "pod-json-selection.yaml",
                                       "pod-short-form.yaml"}
    together = lint_sources([(p.name, p.read_bytes()) for p in paths], strict=True)
    assert only(together) == [("note", "spec", only(together)[0][2])]  # on-disk-config.yaml
    assert together[0].file == "on-disk-config.yaml"
    for p in paths:
        assert not [f for f in lint_sources([(p.name, p.read_bytes())]) if f.severity != "note"], p


def test_deploy_examples_json_pod_asks_for_every_capability_its_nads_declare():
    """The capability checks really ran on the example pod: take a capability away and
    the same files fail."""
    paths = sorted(DEPLOY_EXAMPLES.glob("*.yaml"))
    sources = [(p.name, p.read_bytes().replace(b'"capabilities": {"portMappings": true}',
                                                    b'"capabilities": {}'))
               for p in paths]
    assert [(f.file, f.key) for f in lint_sources(sources) if f.severity == "error"] == [
        ("pod-json-selection.yaml", f"{NETS}[1].portMappings")]


# ---------------------------------------------------------------- the command

def run_cli(*args: str, stdin: bytes | None = None, cwd: Path | None = None):
    return subprocess.run([netattach_command(), "validate", *args], input=stdin,
                          capture_output=True, cwd=cwd, timeout=60)


@pytest.fixture
def files(tmp_path):
    (tmp_path / "good.yaml").write_text(
        nad(conf(capabilities={"mac": True}, name="net-g"), name="net-g") + "---\n"
        + pod([{"name": "net-g", "mac": "02:00:00:00:00:01"}]))
    (tmp_path / "bad.yaml").write_text(
        nad(conf()) + "---\n" + pod([{"name": "net-a", "ips": ["10.1.0.5/24"]}], name="db",
                                    namespace="default"))
    return tmp_path


def test_cli_exit_0_and_summary(files):
    done = run_cli("good.yaml", cwd=files)
    assert (done.returncode, done.stdout) == (0, b"")
    assert done.stderr.decode() == ("netattach validate: 0 error(s), 0 warning(s), 0 note(s) "
                                    "in 1 file(s)\n")


def test_cli_exit_1_text(files):
    done = run_cli("bad.yaml", cwd=files)
    assert done.returncode == 1
    assert done.stdout.decode() == (
        f"bad.yaml:1 (Pod default/db): error: {NETS}[0].ips: network default/net-a: the "
        "selection asks for 'ips' but no plugin of NetworkAttachmentDefinition net-a declares "
        "the capability; add \"capabilities\": {\"ips\": true} to the plugin that handles it "
        "(multi-net spec §4.1.2.1.3.2)\n")


def test_cli_json(files):
    done = run_cli("--output", "json", "bad.yaml", "good.yaml", cwd=files)
    assert done.returncode == 1
    doc = json.loads(done.stdout)
    assert doc["summary"] == {"errors": 1, "warnings": 0, "notes": 0, "files": 2}
    [finding] = doc["findings"]
    assert set(finding) == {"file", "document", "kind", "name", "namespace", "key", "severity",
                            "message"}
    assert {k: v for k, v in finding.items() if k != "message"} == {
        "file": "bad.yaml", "document": 1, "kind": "Pod", "name": "db", "namespace": "default",
        "key": f"{NETS}[0].ips", "severity": "error"}


def test_cli_stdin_and_directories(files):
    done = run_cli("-", str(files), stdin=(files / "bad.yaml").read_bytes())
    assert done.returncode == 1
    lines = [line for line in done.stdout.decode().splitlines() if ": error: " in line]
    assert [line.split(" ")[0] for line in lines] == ["<stdin>:1", f"{files}/bad.yaml:1"]


def test_cli_exit_2_for_a_file_that_cannot_be_read(files):
    done = run_cli("--output", "json", "good.yaml", "missing.yaml", cwd=files)
    assert done.returncode == 2
    assert json.loads(done.stdout)["findings"] == [{
        "file": "missing.yaml", "document": None, "kind": None, "name": None, "namespace": None,
        "key": None, "severity": "error", "message": "cannot read: No such file or directory"}]


# What stops a read as root, where chmod 000 does not: a dangling link (open: ENOENT), a
# link to /proc/self/mem (open succeeds, read raises EIO), a subdirectory or a link to
# "." (a loop the old recursion walked 40 levels deep, linting every file each time),
# a FIFO (open blocks without a writer: the old code hung).
UNREADABLE = {
    "dangling link": (lambda d: (d / "x.yaml").symlink_to(d / "nowhere"),
                      "No such file or directory"),
    "read raises": (lambda d: (d / "x.yaml").symlink_to("/proc/self/mem"),
                    "Input/output error"),
    "subdirectory": (lambda d: (d / "x.yaml").mkdir(),
                     "Is a directory (subdirectories are not searched)"),
    "link to the directory": (lambda d: (d / "x.yaml").symlink_to("."),
                              "Is a directory (subdirectories are not searched)"),
    "fifo": (lambda d: os.mkfifo(d / "x.yaml"),
             "not a regular file (a FIFO, socket or device in a directory is not read; "
             "name it to read it)"),
}


@pytest.mark.parametrize("make, error", UNREADABLE.values(), ids=UNREADABLE)
def test_cli_exit_2_for_a_file_in_a_directory_that_cannot_be_read(files, make, error):
    """Issue 9 defect 7: such a file was skipped, exit 0 (1 here, for bad.yaml)."""
    make(files)
    done = run_cli("--output", "json", str(files))
    assert done.returncode == 2
    doc = json.loads(done.stdout)
    assert [f for f in doc["findings"] if f["document"] is None] == [{
        "file": f"{files}/x.yaml", "document": None, "kind": None, "name": None,
        "namespace": None, "key": None, "severity": "error", "message": f"cannot read: {error}"}]
    assert {f["file"] for f in doc["findings"] if f["document"] is not None} == {
        f"{files}/bad.yaml"}  # the others are still linted, once
    assert doc["summary"]["files"] == 2


@pytest.mark.parametrize("make, error", [UNREADABLE["dangling link"], UNREADABLE["read raises"]],
                         ids=["dangling link", "read raises"])
def test_cli_exit_2_for_a_file_given_that_cannot_be_read(files, make, error):
    make(files)
    done = run_cli("bad.yaml", "x.yaml", cwd=files)
    assert done.returncode == 2
    lines = done.stdout.decode().splitlines()
    assert lines[0] == f"x.yaml: error: cannot read: {error}"
    assert lines[1].startswith("bad.yaml:1 (Pod default/db): error: ") and len(lines) == 2


def test_cli_reads_a_fifo_given_by_name(files):
    done = subprocess.run(["bash", "-c", '"$0" validate <(cat bad.yaml)', netattach_command()],
                          cwd=files, capture_output=True, timeout=60)
    assert done.returncode == 1 and b"error: " + NETS.encode() in done.stdout


@pytest.mark.parametrize("args, says", [
    ((), b"FILE (or --cluster)"), (("--output", "yaml", "x.yaml"), b"invalid choice"),
    (("--chunk-size", "5", "x.yaml"), b"--chunk-size goes with --cluster"),
    (("--cluster", "--strict"), b"--strict lints files"),
    (("--cluster", "--claim-config-sources", "class"), b"--claim-config-sources lints files"),
    (("--cluster", "--chunk-size", "0"), b"'0' is not a whole number of at least 1"),
])
def test_cli_exit_2_for_usage_errors(args, says):
    """Flags that would do nothing where they are given are usage errors, not ignored."""
    done = run_cli(*args)
    assert done.returncode == 2 and b"usage: netattach validate" in done.stderr
    assert says in done.stderr


def test_cli_strict(files):
    (files / "pod.yaml").write_text(pod("net-z"))
    assert run_cli("pod.yaml", cwd=files).returncode == 0
    assert run_cli("--strict", "pod.yaml", cwd=files).returncode == 1


def test_cli_deploy_examples_and_spec_examples():
    assert run_cli("--strict", str(DEPLOY_EXAMPLES)).returncode == 0
    done = run_cli(*map(str, sorted(SPEC_EXAMPLES.glob("*.yaml"))))
    assert done.returncode == 0, done.stdout.decode()


def test_the_nodes_allowlist_and_nested_meta_plugins():
    """--allowed-plugin-types: a plugin or IPAM type outside it is an error; a nested
    `type` (flannel's delegate) naming a meta-plugin is one whatever the allowlist."""
    doc = nad(conflist({"type": "macvlan", "ipam": {"type": "dhcp"}},
                       {"type": "flannel", "delegate": {"type": "netattach"}}))
    allowed = frozenset({"macvlan", "flannel", "host-local"})
    assert only(lint(doc, allowed_plugin_types=allowed), "error") == [
        ("error", "spec.config.plugins[0].ipam.type", "plugin type 'dhcp' is not in the node's "
         "allowedPluginTypes (flannel, host-local, macvlan); allowedPluginTypes: the plugin "
         "types NetworkAttachmentDefinitions and claims may name on this node (netattach's "
         "configuration)"),
        ("error", "spec.config.plugins[1].delegate.type", "plugin type 'netattach' is a "
         "delegating meta-plugin; a delegate never is one (it would run with paths and "
         "credentials from the delegate's config); refused plugin types: multus, "
         "multus-shim, netattach, netattach-shim")]
    assert [f.key for f in lint(doc) if f.severity == "error"] == [
        "spec.config.plugins[1].delegate.type"]


def test_cli_claim_config_sources(tmp_path):
    """--claim-config-sources class: a claim's own CNI config is an error (exit 1); by
    default a note (exit 0)."""
    from tests.unit.test_tools_validate_claims import claim
    (tmp_path / "claim.yaml").write_text(yaml.safe_dump(claim()))
    done = run_cli("claim.yaml", cwd=tmp_path)
    assert done.returncode == 0 and b"note" in done.stdout, done.stdout
    done = run_cli("--claim-config-sources", "class", "claim.yaml", cwd=tmp_path)
    assert done.returncode == 1, done.stdout
    assert b"error" in done.stdout and b"source FromClaim" in done.stdout, done.stdout


def test_cli_allowed_plugin_types(files):
    """good.yaml's NAD is macvlan: within `macvlan,host-local`, outside `bridge`."""
    assert run_cli("--allowed-plugin-types", "macvlan,host-local", "good.yaml",
                   cwd=files).returncode == 0
    done = run_cli("--allowed-plugin-types", "bridge", "good.yaml", cwd=files)
    assert done.returncode == 1
    assert b"error: spec.config.type: plugin type 'macvlan' is not in the node's " \
           b"allowedPluginTypes (bridge)" in done.stdout


def test_a_device_id_through_a_nad_without_resource_name_and_the_default_caps():
    plain = nad(conf())
    devices = nad(conf(), name="net-d", annotations={
        "k8s.v1.cni.cncf.io/resourceName": "intel.com/sriov"})
    findings = lint(plain, devices, pod([{"name": "net-a", "deviceID": "0000:03:00.1"},
                                        {"name": "net-d", "deviceID": "0000:03:00.2"}]))
    assert [(f.severity, f.key) for f in findings if f.severity == "error"] == [
        ("error", f"{NETS}[0].deviceID")]
    many = lint(nad(conf()), pod(",".join(["net-a"] * 5)))
    assert any(f.severity == "warning" and "selects default/net-a 5 times" in f.message
               and "maxSameNetworkPerPod (4)" in f.message for f in many)
