"""The migration pre-flight's checks (`netattach validate --cluster`, tools/preflight.py),
pure: NAD and pod objects as the API server lists them, a conf, the findings. The command
against a real API server, and as `kubectl netattach`, is in
tests/e2e/test_operator_tools.py."""
from __future__ import annotations

import json

import pytest

from netattach.spec.netconf import parse_netconf
from netattach.tools import preflight
from netattach.tools.preflight import ERROR, NOTE, WARNING, ConfError, check_cluster, load_conf

NETWORKS = "k8s.v1.cni.cncf.io/networks"
DEFAULT_NETWORK = "v1.multus-cni.io/default-network"
NA = "metadata.annotations[k8s.v1.cni.cncf.io/networks]"
DN = "metadata.annotations[v1.multus-cni.io/default-network]"

MACVLAN = {"cniVersion": "1.0.0", "type": "macvlan", "master": "eth0",
           "ipam": {"type": "static"}}
WITH_IPS = {"cniVersion": "1.0.0", "plugins": [
    {"type": "macvlan", "master": "eth0", "ipam": {"type": "static"},
     "capabilities": {"ips": True}}]}


def conf(**keys) -> object:
    return parse_netconf({**preflight.CONF_DEFAULTS, **keys})


def nad(ns: str, name: str, config: object = MACVLAN, **annotations: str) -> dict:
    spec = {} if config is None else {"config": config if isinstance(config, str)
                                      else json.dumps(config)}
    return {"metadata": {"namespace": ns, "name": name, "annotations": annotations},
            "spec": spec}


def pod(ns: str, name: str, networks: str | None = None, default: str | None = None,
        owner: str | None = None, **extra) -> dict:
    annotations = {k: v for k, v in ((NETWORKS, networks), (DEFAULT_NETWORK, default))
                   if v is not None}
    annotations.update(extra.pop("annotations", {}))
    meta: dict = {"namespace": ns, "name": name, "uid": f"uid-{name}",
                  "annotations": annotations}
    if owner:
        meta["ownerReferences"] = [{"kind": "ReplicaSet", "name": owner, "uid": f"u-{owner}",
                                    "controller": True}]
    return {"metadata": meta, "spec": extra.pop("spec", {}),
            "status": extra.pop("status", {"phase": "Running"})}


def found(findings) -> list[tuple]:
    """(kind, ns/name, key, severity) of each finding."""
    return [(f.kind, f"{f.namespace}/{f.name}" if f.namespace else f.name, f.key, f.severity)
            for f in findings]


def run(nads, pods, c=None, label=None):
    findings, _ = check_cluster(nads, pods, c or conf(), label)
    return findings


# ---------------------------------------------------------------- capabilities

def test_ips_without_the_capability_fails_where_multus_ignored_it():
    nads = [nad("app", "plain"), nad("app", "capable", WITH_IPS)]
    sel = json.dumps([{"name": "plain", "ips": ["10.1.0.5/24"], "mac": "02:00:00:00:00:01"},
                      {"name": "capable", "ips": ["10.2.0.5/24"]}])
    findings = run(nads, [pod("app", "db", sel)])
    assert found(findings) == [("Pod", "app/db", f"{NA}[0].ips", ERROR),
                               ("Pod", "app/db", f"{NA}[0].mac", ERROR)]
    assert "no plugin of NetworkAttachmentDefinition app/plain declares the capability" \
        in findings[0].message
    assert "Multus ignored the request" in findings[0].message


def test_a_pod_without_a_difference_has_no_finding():
    assert run([nad("app", "capable", WITH_IPS)],
               [pod("app", "ok", json.dumps([{"name": "capable", "ips": ["10.2.0.5/24"]}]))]) == []


# ---------------------------------------------------------------- NADs

@pytest.mark.parametrize("config, words", [
    ('{"cniVersion": "9.9.9", "type": "macvlan"}', "9.9.9"),
    ("not json", "not valid JSON"),
    ({"cniVersion": "1.0.0", "type": "multus"}, "multus"),
])
def test_a_nad_netattach_refuses_fails_each_pod_selecting_it(config, words):
    findings = run([nad("app", "bad", config)], [pod("app", "web", "bad"), pod("app", "x", None)])
    assert found(findings) == [("NetworkAttachmentDefinition", "app/bad", "spec.config", WARNING),
                               ("Pod", "app/web", f"{NA}[0].name", ERROR)]
    assert words in findings[0].message and words in findings[1].message


def test_allowed_plugin_types_of_the_conf():
    c = conf(allowedPluginTypes=["bridge", "host-local"])
    findings = run([nad("app", "mv")], [pod("app", "web", "mv")], c)
    assert found(findings) == [("NetworkAttachmentDefinition", "app/mv", "spec.config", WARNING),
                               ("Pod", "app/web", f"{NA}[0].name", ERROR)]
    assert "macvlan" in findings[1].message and "allowedPluginTypes" in findings[1].message


def test_missing_nad_and_on_disk_nad():
    sel = json.dumps([{"name": "gone"}, {"name": "disk", "ips": ["10.0.0.1/24"]},
                      {"name": "gone"}])  # named once
    findings = run([nad("app", "disk", None)], [pod("app", "web", sel)])
    assert found(findings) == [
        ("NetworkAttachmentDefinition", "app/disk", "spec.config", NOTE),
        ("Pod", "app/web", f"{NA}[0].name", ERROR),
        ("Pod", "app/web", f"{NA}[1]", NOTE)]
    assert "NetworkAttachmentDefinition app/gone not found" in findings[1].message
    assert "ips not checked" in findings[2].message


# ---------------------------------------------------------------- namespaceIsolation

def test_namespace_isolation_covers_both_annotations():
    c = conf(namespaceIsolation=True)
    nads = [nad("other", "net"), nad("default", "shared"), nad("kube-system", "eth")]
    pods = [pod("app", "cross", "other/net"),
            pod("app", "shared", "default/shared"),
            pod("app", "own-default", default="eth"),
            pod("app", "ok")]
    findings = run(nads, pods, c)
    assert found(findings) == [
        ("Pod", "app/cross", f"{NA}[0].namespace", ERROR),
        ("Pod", "app/shared", f"{NA}[0].namespace", NOTE),
        ("Pod", "app/own-default", DN, ERROR)]
    assert "namespace isolation" in findings[0].message
    assert "globalNamespaces defaults to default" in findings[1].message
    assert "kube-system/eth" in findings[2].message
    assert "Multus does not apply namespaceIsolation" in findings[2].message


def test_without_isolation_cross_namespace_is_fine_and_global_namespaces_set():
    assert run([nad("other", "net")], [pod("app", "cross", "other/net")]) == []
    c = conf(namespaceIsolation=True, globalNamespaces="other")
    assert run([nad("other", "net"), nad("default", "d")],
               [pod("app", "a", "other/net"), pod("app", "b", "default/d")], c)[0].severity \
        == ERROR


# ---------------------------------------------------------------- selection

@pytest.mark.parametrize("networks, key", [
    ("a,,b", f"{NA}[1]"),                             # Multus passed an empty item on
    (json.dumps([{"Name": "a"}]), f"{NA}[0].name"),   # Go matches keys in any case
    ("a@eth0", f"{NA}[0].interface"),
])
def test_selections_netattach_does_not_parse(networks, key):
    findings = run([nad("app", "a"), nad("app", "b")], [pod("app", "web", networks)])
    assert found(findings)[0][2:] == (key, ERROR)


def test_a_key_in_another_case_is_ignored_where_multus_read_it():
    sel = json.dumps([{"name": "a", "Interface": "data0", "vendor.io/x": 1, "future": 2}])
    findings = run([nad("app", "a")], [pod("app", "web", sel)])
    assert found(findings) == [("Pod", "app/web", f"{NA}[0].Interface", WARNING)]
    assert "'interface'" in findings[0].message


def test_caps_of_the_conf():
    findings = run([nad("app", "a")], [pod("app", "web", "a,a,a")], conf(maxSameNetworkPerPod=2))
    assert found(findings) == [("Pod", "app/web", NA, ERROR)]
    assert "maxSameNetworkPerPod=2" in findings[0].message
    findings = run([nad("app", "a")], [pod("app", "web", ",".join(["a"] * 3))],
                   conf(maxNetworksPerPod=2))
    assert "maxNetworksPerPod=2" in findings[0].message


def test_device_id():
    sel = json.dumps([{"name": "plain", "deviceID": "0000:03:00.1"},
                      {"name": "sriov", "deviceID": "0000:03:00.2"}])
    nads = [nad("app", "plain"), nad("app", "sriov", **{
        "k8s.v1.cni.cncf.io/resourceName": "intel.com/sriov"})]
    findings = run(nads, [pod("app", "web", sel)])
    assert found(findings) == [("Pod", "app/web", f"{NA}[0].deviceID", ERROR),
                               ("Pod", "app/web", f"{NA}[1].deviceID", WARNING)]


def test_default_route_and_old_status_annotation():
    sel = json.dumps([{"name": "a", "default-route": ["10.0.0.1"]},
                      {"name": "a", "default-route": ["10.0.0.2"]}])
    findings = run([nad("app", "a")], [pod("app", "web", sel),
                                       pod("app", "old", "a", annotations={
                                           "k8s.v1.cni.cncf.io/networks-status": "[]"})])
    assert found(findings) == [
        ("Pod", "app/web", NA + "[1].default-route", ERROR),
        ("Pod", "app/old", "metadata.annotations[k8s.v1.cni.cncf.io/networks-status]", NOTE)]


# ---------------------------------------------------------------- which pods

def test_pods_skipped_and_grouped():
    pods = [pod("app", "host", "gone", spec={"hostNetwork": True}),
            pod("app", "done", "gone", status={"phase": "Succeeded"}),
            pod("app", "bare"),
            pod("app", "web-1", "gone", owner="web"),
            pod("app", "web-2", "gone", owner="web"),
            pod("app", "web-3", "gone", owner="web"),
            pod("app", "other-1", "gone", owner="other")]
    findings, checked = check_cluster([], pods, conf())
    assert checked == 4
    assert [(f.name, f.also) for f in findings] == [("web-1", ("web-2", "web-3")),
                                                    ("other-1", ())]
    assert findings[0].text().endswith(
        "(also 2 other pods of the same controller and annotations: web-2, web-3)")
    assert findings[0].to_dict()["also"] == ["web-2", "web-3"]


# ---------------------------------------------------------------- the conf

def test_conf_findings_from_a_multus_conf():
    multus = json.dumps({"cniVersion": "0.3.1", "name": "multus-cni-network", "type": "multus",
                         "kubeconfig": "/etc/cni/net.d/multus.d/multus.kubeconfig",
                         "logFile": "/var/log/multus.log", "delegates": [{"type": "bridge"}],
                         "defaultNetworks": ["monitoring"]}).encode()
    c = load_conf(multus, "00-multus.conf")
    findings = run([], [], c, "00-multus.conf")
    assert found(findings) == [("NetConf", "00-multus.conf", "type", NOTE),
                               ("NetConf", "00-multus.conf", "delegates", WARNING),
                               ("NetConf", "00-multus.conf", "logFile", WARNING),
                               ("NetConf", "00-multus.conf", "defaultNetworks[0]", ERROR)]
    assert "kube-system/monitoring not found" in findings[3].message


def test_conf_forms():
    conflist = json.dumps({"cniVersion": "1.0.0", "name": "n", "plugins": [
        {"type": "netattach", "clusterNetwork": "/x", "namespaceIsolation": True}]}).encode()
    assert load_conf(conflist, "c").namespace_isolation is True
    assert load_conf(b"namespaceIsolation: true\nmaxNetworksPerPod: 3\n",
                     "netconf.yaml").max_networks_per_pod == 3
    with pytest.raises(ConfError, match="conf bad.yaml: .*maxNetworksPerPod"):
        load_conf(b"maxNetworksPerPod: 0\n", "bad.yaml")
    with pytest.raises(ConfError, match="without a netattach or multus entry"):
        load_conf(b'{"plugins": [{"type": "bridge"}]}', "x")
    with pytest.raises(ConfError, match="not list"):
        load_conf(b"[1]", "x")


# ---------------------------------------------------------------- kubectl-netattach

def test_kubectl_netattach_offers_the_operator_subcommands_only(monkeypatch, capsys):
    """Started as kubectl-netattach (kubectl's plugin: argv[0]'s file name), the program
    is `kubectl netattach` with status and validate; the node's commands are refused."""
    from netattach import cli
    monkeypatch.setattr("sys.argv", ["/home/me/bin/kubectl-netattach"])
    with pytest.raises(SystemExit) as exit_:
        cli.main(["install"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: kubectl netattach ")
    assert "invalid choice: 'install' (choose from 'validate', 'status')" in err
    with pytest.raises(SystemExit) as exit_:
        cli.main(["validate", "--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("usage: kubectl netattach validate ")


def test_console_script_kubectl_netattach():
    import tomllib
    from pathlib import Path
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    scripts = tomllib.loads(pyproject.read_text())["project"]["scripts"]
    assert scripts["kubectl-netattach"] == scripts["netattach"] == "netattach.cli:main"
