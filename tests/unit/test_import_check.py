"""The exec'd path stays lean: which heavy modules each CNI command imports, checked by
name in a fresh interpreter (an import check, not a timing).

VERSION imports nothing outside the standard library but netattach's own modules; a
DEL from saved state or a tombstone, CHECK and STATUS never import the API client
(lightkube, httpx2), pyroute2, grpc, PyYAML or the official kubernetes client.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("lightkube", "httpx2", "pyroute2", "grpc", "google.protobuf", "yaml", "kubernetes")

PROBE = """
import json, sys
from netattach.cli import cni_main
doc, code = cni_main({env}, {stdin!r})
heavy = sorted({{m.split(".")[0] for m in sys.modules}} & {heavy})
third = sorted({{m.split(".")[0] for m in sys.modules
               if m.split(".")[0] not in sys.stdlib_module_names
               and m.split(".")[0] not in ("netattach", "_distutils_hack", "__main__")}})
print(json.dumps({{"code": code, "doc": doc, "heavy": heavy, "third": third}}))
"""


def probe(env: dict[str, str], stdin: dict | None) -> dict:
    code = PROBE.format(env=repr(env), stdin=json.dumps(stdin).encode() if stdin else b"",
                        heavy=repr(set(h.split(".")[0] for h in HEAVY)))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.splitlines()[-1])


def test_version_imports_only_the_standard_library():
    out = probe({"CNI_COMMAND": "VERSION"}, None)
    assert out["code"] == 0 and out["third"] == [] and out["heavy"] == []


@pytest.mark.parametrize("command", ["DEL", "STATUS"])
def test_del_and_status_without_the_api_import_no_heavy_module(tmp_path, command):
    (tmp_path / "state").mkdir(mode=0o700)
    (tmp_path / "state" / "c1.deleted").write_text("")  # the runtime's second DEL
    cluster = tmp_path / "10-cluster.conf"
    cluster.write_text(json.dumps({"cniVersion": "1.0.0", "name": "c", "type": "bridge"}))
    conf = {"cniVersion": "1.1.0", "name": "n", "type": "netattach",
            "clusterNetwork": str(cluster), "cniDir": str(tmp_path / "state"),
            "kubeconfig": str(tmp_path / "nowhere"), "logToStderr": False}
    env = {"CNI_COMMAND": command, "CNI_PATH": str(tmp_path), "CNI_CONTAINERID": "c1",
           "CNI_IFNAME": "eth0", "CNI_ARGS": "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p"}
    out = probe(env, conf)
    assert out["code"] == 0, out["doc"]
    assert out["heavy"] == []


STATUS_PROBE = """
import json, sys
from netattach.cli import cni_main
doc, code = cni_main({env}, {stdin!r})
print(json.dumps({{"code": code, "doc": doc, "modules": sorted(sys.modules)}}))
"""

# what a STATUS answered from the cluster default network's file must not import: the
# conflist engine and its process runner, the orchestrator and its state, logging, typing
NOT_ON_QUICK_STATUS = ("netattach.cni.chain", "netattach.cni.invoke", "netattach.node.state",
                       "netattach.commands.orchestrator", "netattach.commands.networks",
                       "netattach.spec.selection", "logging", "subprocess", "typing")


def test_a_status_with_nothing_to_forward_imports_no_engine_no_logging(tmp_path):
    """containerd execs STATUS at every CRI Status call: with the cluster default network
    below CNI 1.1.0 (nothing to forward) it reads two files and imports only what
    parsing the request and netattach's own configuration needs (commands/status.py)."""
    cluster = tmp_path / "10-cluster.conflist"
    cluster.write_text(json.dumps({"cniVersion": "1.0.0", "name": "c",
                                   "plugins": [{"type": "bridge"}]}))
    conf = {"cniVersion": "1.1.0", "name": "n", "type": "netattach",
            "clusterNetwork": str(cluster), "logToStderr": False}
    code = STATUS_PROBE.format(env=repr({"CNI_COMMAND": "STATUS", "CNI_PATH": str(tmp_path)}),
                               stdin=json.dumps(conf).encode())
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.splitlines()[-1])
    assert (out["code"], out["doc"]) == (0, None)
    assert "netattach.commands.status" in out["modules"]  # the probe can see modules
    assert sorted(set(NOT_ON_QUICK_STATUS) & set(out["modules"])) == []


FROZEN_STATUS_PROBE = """
import os, sys
sys.frozen = True  # as the built executable: the memo is used (node/statusmemo.py)
sys.executable = {exe!r}
import time
from netattach.node import statusmemo  # the files here are fresh: old enough so
statusmemo._now_ns = lambda: time.time_ns() + statusmemo.RACY_NS
statusmemo._source_digest = lambda: "a" * 64  # the bundle's
from netattach import cli
def emit(doc, code):  # cli.main's end (os._exit), with what it imported
    modules = sorted(sys.modules)
    import json
    print(json.dumps({{"code": code, "doc": doc, "modules": modules}}))
    sys.stdout.flush()
    os._exit(0)
cli._emit = emit
os.environ.update({env})
cli.main()
"""

# what a STATUS answered from its memo must not import: the request's and the
# configuration's parsers, their validator and dataclasses
NOT_ON_REMEMBERED_STATUS = ("netattach.cni.request", "netattach.spec.netconf",
                            "netattach.spec._netconf_validator", "dataclasses", "json", "re",
                            *NOT_ON_QUICK_STATUS)


def test_a_remembered_status_imports_no_parser(tmp_path):
    """The second of two identical thin STATUS calls is answered from the memo the
    first wrote, before the request or the configuration is parsed: cli.main as the
    built executable runs it."""
    cluster = tmp_path / "10-cluster.conflist"
    cluster.write_text(json.dumps({"cniVersion": "1.0.0", "name": "c",
                                   "plugins": [{"type": "bridge"}]}))
    (tmp_path / "state").mkdir(mode=0o700)
    exe = tmp_path / "netattach"
    exe.write_text("")
    conf = {"cniVersion": "1.1.0", "name": "n", "type": "netattach",
            "clusterNetwork": str(cluster), "cniDir": str(tmp_path / "state"),
            "logToStderr": False}
    code = FROZEN_STATUS_PROBE.format(
        exe=str(exe), env=repr({"CNI_COMMAND": "STATUS", "CNI_PATH": str(tmp_path)}))
    outs = []
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           input=json.dumps(conf), timeout=60)
        assert p.returncode == 0, p.stderr
        outs.append(json.loads(p.stdout.splitlines()[-1]))
    assert [(o["code"], o["doc"]) for o in outs] == [(0, None), (0, None)]
    assert "netattach.spec.netconf" in outs[0]["modules"]  # the first took the full way
    assert (tmp_path / "state" / ".status-memo").exists()
    assert "netattach.node.statusmemo" in outs[1]["modules"]
    assert sorted(set(NOT_ON_REMEMBERED_STATUS) & set(outs[1]["modules"])) == []


DEFER_PROBE = """
import io, json, sys
from netattach import cli
cli._defer_imports()
import dataclasses, logging
before = {name: name in sys.modules for name in ("ast", "dis", "linecache", "tokenize")}
stream = io.StringIO()
log = logging.getLogger("probe")
log.addHandler(logging.StreamHandler(stream))
try:
    1 / 0
except ZeroDivisionError:
    log.exception("failed")  # logging's traceback.print_exception: the real one loads
import inspect
print(json.dumps({"before": before, "logged": stream.getvalue(),
                  "signature": str(inspect.signature(cli.version_line)),
                  "linecache": "linecache" in sys.modules,
                  "same": sys.modules["traceback"].format_exc is not None}))
"""


def test_deferred_modules_load_on_first_use():
    """cli._defer_imports: `dataclasses` and `logging` import without inspect's and
    traceback's own imports; the first use of either (logging an exception, asking a
    signature) loads the real module, and whoever imported the stand-in sees it whole."""
    p = subprocess.run([sys.executable, "-c", DEFER_PROBE], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.splitlines()[-1])
    assert out["before"] == {"ast": False, "dis": False, "linecache": False, "tokenize": False}
    assert "failed\nTraceback (most recent call last):" in out["logged"]
    assert "ZeroDivisionError: division by zero" in out["logged"]
    assert out["signature"] == "() -> 'str'" and out["linecache"] and out["same"]
