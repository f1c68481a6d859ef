"""The exec'd path stays lean: which heavy modules each CNI command imports, checked by
name in a fresh interpreter (an import check, not a timing).

VERSION imports nothing outside the standard library but netattach's own modules; a
DEL from saved state or a tombstone, CHECK and STATUS never import the API client
(lightkube, httpx2), pyroute2, grpc, PyYAML or the official kubernetes client.
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

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


def _module_imports(path: Path, name: str, package: str) -> set[str]:
    """The netattach modules module `name` (file `path`, in `package`) imports while it
    is being initialized: its top-level imports, those in top-level if/try blocks too,
    but not those under `if TYPE_CHECKING`, which never run."""
    out: set[str] = set()
    todo = list(ast.parse(path.read_text()).body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If):
            if "TYPE_CHECKING" not in ast.dump(node.test):
                todo += node.body + node.orelse
        elif isinstance(node, ast.Try):
            todo += node.body + node.orelse + node.finalbody + \
                [n for h in node.handlers for n in h.body]
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            out |= {base} | {f"{base}.{a.name}" for a in node.names}
    return out


def test_netattach_modules_import_each_other_without_a_cycle():
    """Threads of the node daemon import netattach's own modules on first use, several
    at once (daemon._import_before_threads imports only libraries before them). Two
    threads importing one module graph at once can only be handed a partially
    initialized module when that graph has a cycle; netattach's has none."""
    root = Path(__file__).resolve().parents[2] / "src"
    modules: dict[str, tuple[Path, str]] = {}
    for path in sorted((root / "netattach").rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        package = name if parts[-1] == "__init__" else name.rpartition(".")[0]
        modules[name] = (path, package)
    graph = {name: {m for m in _module_imports(path, name, package) if m in modules}
             for name, (path, package) in modules.items()}
    assert graph["netattach.daemon"] >= {"netattach.node.logsetup", "netattach.spec.netconf"}
    state: dict[str, int] = {}  # 1: on the path being followed, 2: done

    def follow(name: str, path: list[str]) -> None:
        state[name] = 1
        for dep in sorted(graph[name]):
            assert state.get(dep) != 1, \
                "import cycle: " + " -> ".join(path[path.index(dep):] + [dep])
            if dep not in state:
                follow(dep, path + [dep])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            follow(name, [name])
