"""The package's layers (docs/architecture.md, "Layers"), checked from the source:
no import cycle inside `netattach`, and no import from a lower layer to a higher one.

An edge is every `import`/`from ... import` of a netattach module, at module level or
inside a function (a lazy import still ties the two modules together), and those under
`if TYPE_CHECKING:` too: they never run, but a module that names another's types
depends on it as much, and mypy reads them. Standard library only: the files are
parsed, nothing is imported.
"""
from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

# The layer order, lowest first, written once: a module may import modules of its own
# layer and of the layers before it. Folders that share a rank (a tuple) do not import
# each other. A module is placed by its longest matching prefix.
LAYERS: list[tuple[str, ...]] = [
    ("netattach", "netattach._dataclass_code"),  # the package's face, the startup hook
    ("netattach.cni",),
    ("netattach.spec",),
    ("netattach.kube", "netattach.node"),
    ("netattach.commands",),
    ("netattach.daemon", "netattach.install", "netattach.tools"),
    ("netattach.cli",),
]


def modules() -> dict[str, tuple[Path, str]]:
    out = {}
    for path in sorted((SRC / "netattach").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        package = name if parts[-1] == "__init__" else name.rpartition(".")[0]
        out[name] = (path, package)
    return out


def imports(path: Path, package: str, known: set[str]) -> set[str]:
    """The netattach modules `path` imports anywhere, `if TYPE_CHECKING:` included."""
    out: set[str] = set()
    todo: list[ast.AST] = [ast.parse(path.read_text())]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            out |= {base} | {f"{base}.{a.name}" for a in node.names}
        todo += list(ast.iter_child_nodes(node))
    return {m for m in out if m in known}


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports(path, package, known) - {name}
            for name, (path, package) in mods.items()}


def layer_of(module: str) -> tuple[int, str]:
    """(rank, folder) of `module`: the longest prefix in LAYERS."""
    best = (-1, "")
    for rank, folders in enumerate(LAYERS):
        for folder in folders:
            if (module == folder or module.startswith(folder + ".")) and \
                    len(folder) > len(best[1]):
                best = (rank, folder)
    assert best[0] >= 0, f"{module} is in no layer: add its folder to LAYERS"
    return best


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def upward(g: dict[str, set[str]]) -> list[str]:
    out = []
    for src, deps in sorted(g.items()):
        rank, folder = layer_of(src)
        for dep in sorted(deps):
            dep_rank, dep_folder = layer_of(dep)
            if dep_rank > rank or (dep_rank == rank and dep_folder != folder):
                out.append(f"{src} -> {dep}")
    return out


def test_every_module_has_a_layer():
    for name in modules():
        layer_of(name)


def test_no_import_cycle():
    """Also why the node daemon's threads may import netattach's own modules on first
    use, several at once (daemon._import_before_threads imports only libraries before
    them): two threads importing one module graph at once can only be handed a
    partially initialized module when that graph has a cycle. This graph holds every
    edge of the one run at import time, and more."""
    g = graph()
    assert g["netattach.daemon"] >= {"netattach.node.logsetup", "netattach.spec.netconf"}
    assert cycles(g) == []


def test_no_import_from_a_lower_layer_to_a_higher_one():
    assert upward(graph()) == []


def test_the_checks_can_fail():
    g = {"netattach.cni.a": {"netattach.spec.b"}, "netattach.spec.b": {"netattach.cni.a"},
         "netattach.kube.c": {"netattach.node.d"}, "netattach.node.d": set()}
    assert cycles(g) == [["netattach.cni.a", "netattach.spec.b"]]
    assert upward(g) == ["netattach.cni.a -> netattach.spec.b",
                         "netattach.kube.c -> netattach.node.d"]
