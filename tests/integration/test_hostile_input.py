"""Hostile values reach the installed `netattach` the way a runtime and the API server
hand them over, and each is refused before it is used: one CNI error naming it, no
child plugin run, no state written, no API request built from it.

The executable runs as a runtime runs it (CNI env + stdin). A loopback stub stands in
for the API server and records every request; the cluster default network's plugin
is a canary script that records every call. Parsing alone is covered in tests/unit
(test_spec_selection, test_spec_delegates, test_cni_errors_request; hostile container IDs and
ifnames on ADD in test_cli.py): here is what the whole ADD or DEL does with the value.
"""
from __future__ import annotations

import json
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from netattach.cni.jsonutil import MAX_DEPTH
from netattach.spec.selection import MAX_ANNOTATION_BYTES, NETWORKS_ANNOTATION
from netattach_testbed.scenario import netattach_command
from netattach_testbed.statefiles import live
from tests.unit.test_kube_client import Stub, kubeconfig

NAD_PATH = "/apis/k8s.cni.cncf.io/v1/namespaces/{ns}/network-attachment-definitions/{name}"
CANARY = """#!/bin/sh
echo "$CNI_COMMAND $CNI_IFNAME" >> {calls}
cat > /dev/null
if [ "$CNI_COMMAND" = ADD ]; then
  echo '{{"cniVersion": "1.0.0", "ips": [{{"address": "198.18.9.2/24"}}]}}'
fi
"""


class FakeApi(Stub):
    """The loopback stub of test_kube_client.py, answering by path: `objects` maps a request
    path to the JSON object served; any other GET is 404, any POST (an event) 201."""

    def __init__(self, objects: dict[str, dict]):
        super().__init__([])
        self.objects = objects

    def next_answer(self) -> tuple[int, dict]:
        request = self.seen[-1]
        if request["method"] == "POST":
            return 201, {}
        found = self.objects.get(request["path"])
        return (200, found) if found is not None else (404, {"kind": "Status", "code": 404})

    def paths(self) -> list[str]:
        return [f"{r['method']} {r['path']}" for r in self.seen]


@dataclass
class Node:
    root: Path
    api: FakeApi
    netconf: dict

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    def canary_calls(self) -> list[str]:
        calls = self.root / "canary.calls"
        return calls.read_text().splitlines() if calls.exists() else []

    def pod(self, annotation: str | None) -> None:
        annotations = {NETWORKS_ANNOTATION: annotation} if annotation is not None else {}
        self.api.objects["/api/v1/namespaces/ns/pods/p"] = {"metadata": {
            "name": "p", "namespace": "ns", "uid": "u1", "annotations": annotations}}

    def nad(self, name: str, config: str | dict, ns: str = "ns") -> None:
        self.api.objects[NAD_PATH.format(ns=ns, name=name)] = {
            "metadata": {"name": name, "namespace": ns},
            "spec": {"config": config if isinstance(config, str) else json.dumps(config)}}

    def run(self, command: str = "ADD", netconf: dict | None = None, stdin: bytes | None = None,
            **env: str) -> Run:
        environ = {"CNI_COMMAND": command, "CNI_CONTAINERID": "c0ffee", "CNI_NETNS": "/nonexistent",
                   "CNI_IFNAME": "eth0", "CNI_PATH": str(self.root / "bin"), "PATH": "/usr/bin:/bin",
                   "CNI_ARGS": "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_UID=u1", **env}
        data = stdin if stdin is not None else json.dumps({**self.netconf, **(netconf or {})}).encode()
        p = subprocess.run([netattach_command()], input=data, env=environ, capture_output=True,
                           timeout=60)
        out = p.stdout.decode()
        assert out.count("\n") <= 1, f"more than one line on stdout: {out!r}"
        return Run(p.returncode, json.loads(out) if out else None, p.stderr.decode(), self)


@dataclass
class Run:
    code: int
    doc: dict | None
    stderr: str
    node: Node

    def refused(self, code: int, *phrases: str) -> str:
        """Assert: exit 1 with CNI error `code` whose message holds every phrase, no
        child run, nothing in the state dir, no traceback. Returns the message."""
        log_file = self.node.root / "netattach.log"  # none when refused before the config
        log = log_file.read_text() if log_file.exists() else ""
        assert self.code == 1 and self.doc and self.doc["code"] == code, (self.doc, log)
        for phrase in phrases:
            assert phrase in self.doc["msg"], (phrase, self.doc["msg"])
        assert self.node.canary_calls() == []
        assert live(self.node.state_dir) == []  # at most the tombstone of a refused ADD
        assert "Traceback" not in log + self.stderr
        return self.doc["msg"]


@pytest.fixture
def node(tmp_path):
    api = FakeApi({})
    threading.Thread(target=api.serve_forever, daemon=True).start()
    (tmp_path / "bin").mkdir()
    canary = tmp_path / "bin" / "canary"
    canary.write_text(CANARY.format(calls=tmp_path / "canary.calls"))
    canary.chmod(0o755)
    (tmp_path / "conf").mkdir()
    default = tmp_path / "conf" / "10-default.conf"
    default.write_text(json.dumps({"cniVersion": "1.0.0", "name": "default-net", "type": "canary"}))
    netconf = {"cniVersion": "1.0.0", "name": "na", "type": "netattach",
               "clusterNetwork": str(default), "confDir": str(tmp_path / "conf"),
               "cniDir": str(tmp_path / "state"), "binDir": str(tmp_path / "bin"),
               "kubeconfig": str(kubeconfig(tmp_path / "kubeconfig", api.url)),
               "logFile": str(tmp_path / "netattach.log"), "logLevel": "debug",
               "logToStderr": False}
    yield Node(tmp_path, api, netconf)
    api.shutdown()
    api.server_close()


def test_the_harness_sees_children_state_and_requests(node):
    """Control: with valid input the canary runs and the stub sees the ADD's requests,
    so the refusals below are observed, not assumed."""
    node.pod("net-x")
    node.nad("net-x", {"cniVersion": "1.0.0", "name": "net-x", "type": "canary"})
    run = node.run()
    assert run.code == 0, (run.doc, run.stderr)
    assert node.canary_calls() == ["ADD eth0", "ADD net1"]
    assert node.api.paths()[:2] == [
        "GET /api/v1/namespaces/ns/pods/p", "GET " + NAD_PATH.format(ns="ns", name="net-x")]
    assert live(node.state_dir) == ["c0ffee.json"]


# ---------------------------------------------------------------- plugin types


@pytest.mark.parametrize("ptype", ["../../../bin/sh", "/bin/sh", "a/b", ".."])
@pytest.mark.parametrize("shape", ["conf", "conflist"])
def test_nad_plugin_type_with_a_path_refused_before_any_child(node, ptype, shape):
    """The NAD's second plugin is hostile: the cluster default network (the canary, first
    in the ADD) is not attached and rolled back; the plan refuses it before anything."""
    plugin = {"type": ptype}
    config = (plugin | {"cniVersion": "1.0.0", "name": "net-x"} if shape == "conf" else
              {"cniVersion": "1.0.0", "name": "net-x", "plugins": [{"type": "canary"}, plugin]})
    node.pod("net-x")
    node.nad("net-x", config)
    node.run().refused(7, "pod ns/p: network ns/net-x", f"invalid plugin type {ptype!r}")


def test_cluster_network_plugin_type_with_a_path_refused(node, tmp_path):
    hostile = tmp_path / "hostile.conflist"
    hostile.write_text(json.dumps({"cniVersion": "1.0.0", "name": "cn", "plugins": [
        {"type": "canary"}, {"type": "../bin/canary"}]}))
    node.pod(None)
    node.run(netconf={"clusterNetwork": str(hostile)}).refused(
        7, "network cn", "invalid plugin type '../bin/canary'")


# ---------------------------------------------------------------- names that become paths


@pytest.mark.parametrize("cni_args", [
    "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=../../../api/v1/secrets/s",
    "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p?watch=true",
    "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p#x",
    "K8S_POD_NAMESPACE=../kube-system;K8S_POD_NAME=p",
    "K8S_POD_NAMESPACE=NS;K8S_POD_NAME=p",
])
@pytest.mark.parametrize("command", ["ADD", "DEL"])
def test_pod_names_from_cni_args_never_reach_the_api(node, cni_args, command):
    node.pod("")
    msg = node.run(command, CNI_ARGS=cni_args).refused(4, "K8S_POD_NAMESPACE=", "is not a pod")
    assert node.api.paths() == [], msg


@pytest.mark.parametrize("ref,phrase", [
    ("../x", "DNS-1123"), ("Bad_Name", "DNS-1123"), ("ns/a/b", "more than one '/'"),
    ("ns%2F..%2Fx", "DNS-1123"), ("x?y", "DNS-1123"), ("a" * 64, "DNS-1123"),
])
def test_nad_references_that_are_not_dns1123(node, ref, phrase):
    """In the pod annotation (after GET pod: code 7, a Warning event, no NAD GET) and in
    defaultNetworks (refused with the config: no request at all)."""
    node.pod(ref)
    node.run().refused(7, "pod ns/p", phrase)
    assert [p for p in node.api.paths() if not p.startswith("POST /api/v1/namespaces/ns/events")] \
        == ["GET /api/v1/namespaces/ns/pods/p"]

    node.api.seen.clear()
    node.pod(None)
    node.run(netconf={"defaultNetworks": ["net-ok", ref]}).refused(
        7, "'defaultNetworks.1'", phrase)
    assert node.api.paths() == []


@pytest.mark.parametrize("value", ["../../x", "ns/../../x", "Bad_Name/x", "ns/x?y", "a/b/c"])
def test_cluster_network_that_is_neither_path_nor_nad_name(node, value):
    node.pod(None)
    node.run(netconf={"clusterNetwork": value}).refused(
        7, f"cluster default network {value!r} is neither", "DNS-1123")
    assert not [p for p in node.api.paths() if "network-attachment-definitions" in p]


# ---------------------------------------------------------------- sizes and shapes


def test_enormous_annotation_is_refused_naming_size_and_limit(node):
    """Kubernetes allows 256 KiB for all of a pod's annotations; netattach reads at most
    64 KiB of its selection annotation (selection.MAX_ANNOTATION_BYTES)."""
    node.pod("n," * (MAX_ANNOTATION_BYTES // 2) + "x")  # one byte over
    node.run().refused(7, f"{MAX_ANNOTATION_BYTES + 1} bytes long",
                       f"at most {MAX_ANNOTATION_BYTES} are accepted")


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("where", ["stdin", "nad-config", "annotation"])
def test_deep_nesting_refused_wherever_json_comes_in(node, where):
    """jsonutil.MAX_DEPTH, one level over, on each way JSON comes in: code 6 for stdin,
    7 for the NAD's config and the annotation."""
    deep = nested(MAX_DEPTH)  # MAX_DEPTH levels, inside one more object or list
    too_deep = f"nested too deeply: more than {MAX_DEPTH} levels"
    if where == "stdin":
        node.run(stdin=json.dumps({**node.netconf, "runtimeConfig": {"x": "@"}}).replace(
            '"@"', deep).encode()).refused(6, "stdin is not valid JSON", too_deep)
    elif where == "nad-config":
        node.pod("net-x")
        node.nad("net-x", '{"cniVersion": "1.0.0", "name": "net-x", "type": "canary", "x": '
                 + deep + "}")
        node.run().refused(7, "NetworkAttachmentDefinition ns/net-x", too_deep)
    else:
        node.pod('[{"name": "net-x", "cni-args": {"x": ' + deep + "}}]")
        node.run().refused(7, NETWORKS_ANNOTATION, too_deep)


@pytest.mark.parametrize("config,phrase", [
    ("{not json", "spec.config is not valid JSON"),
    ('[{"type": "canary"}]', "spec.config must be a JSON object"),
    ('"canary"', "spec.config must be a JSON object"),
    ('{"cniVersion": "1.0.0", "name": "net-x", "type": "canary", "mtu": NaN}', "invalid JSON constant"),
    ('{"cniVersion": "1.0.0", "name": "net-x", "plugins": []}', "'plugins' must be a non-empty list"),
])
def test_nad_config_that_is_no_cni_config(node, config, phrase):
    node.pod("net-x")
    node.nad("net-x", config)
    node.run().refused(7, "NetworkAttachmentDefinition ns/net-x", phrase)


def test_conflist_on_disk_with_zero_plugins(node, tmp_path):
    empty = tmp_path / "conf" / "20-empty.conflist"
    empty.write_text(json.dumps({"cniVersion": "1.0.0", "name": "cn", "plugins": []}))
    node.pod(None)
    node.run(netconf={"clusterNetwork": str(empty)}).refused(
        7, str(empty), "'plugins' must be a non-empty list")


# ---------------------------------------------------------------- the state dir


@pytest.mark.parametrize("command", ["DEL", "CHECK"])
@pytest.mark.parametrize("var,value", [("CNI_CONTAINERID", "../etc/victim"),
                                       ("CNI_CONTAINERID", ".."), ("CNI_IFNAME", "../../x")])
def test_names_crafted_to_escape_the_state_dir(node, command, var, value):
    """ADD is in test_cli.py; DEL and CHECK read, lock and remove state by container ID:
    `<cniDir>/../etc/victim.json` would be the file below."""
    victim = node.root / "etc" / "victim.json"
    victim.parent.mkdir()
    victim.write_text("keep")
    node.state_dir.mkdir()
    node.run(command, **{var: value}).refused(4, value)
    assert victim.read_text() == "keep" and node.api.paths() == []
    assert sorted(p.name for p in victim.parent.iterdir()) == ["victim.json"]  # no .lock
