"""The test tree's own layout (docs/architecture.md, "The repository's layout"),
checked from the files:

* every test module's file name is unique across the tiers (tests/unit, integration,
  e2e, node, image): pytest imports a test file of a folder without `__init__.py` by
  its bare name, so two `test_x.py` in two tiers collide as soon as one run collects
  both, and a name found in a doc or a log names one file;
* no test file is named after a module path that no longer exists: `test_<m>.py`
  where `src/netattach/<m>.py` is gone but `src/netattach/<layer>/<m>.py` exists is
  named after the flat module before the layer folders, and is `test_<layer>_<m>.py`.
  Only the whole name is checked: `test_dra_claims.py` or `test_state_upgrade.py` name
  a behaviour, not the module `daemon/dra.py` or `node/state.py`.
* the test bed is a package of its own, `netattach_testbed` (testbed/, installed by
  `make venv`), outside src/ so that netattach's wheel and bundle never carry it; it,
  hack/ (the demo, the bench) and the bench's library import nothing of `tests`.

Standard library only: the files are listed, nothing is imported.
"""
from __future__ import annotations

import ast
import tomllib
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
PACKAGE = ROOT / "src" / "netattach"
# files pytest gives a meaning by name, one per folder
PER_FOLDER = {"conftest.py", "__init__.py"}


def tier_modules() -> list[Path]:
    """Every Python file under tests/ but the per-folder ones and the test data."""
    return sorted(p for p in TESTS.rglob("*.py")
                  if p.name not in PER_FOLDER and "__pycache__" not in p.parts
                  and p.relative_to(TESTS).parts[0] != "data")


def test_test_file_names_are_unique_across_tiers():
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in tier_modules():
        by_name[path.name].append(str(path.relative_to(ROOT)))
    repeated = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not repeated, f"test files sharing a name across tiers: {repeated}"


def test_the_uniqueness_check_sees_every_tier():
    tiers = {p.relative_to(TESTS).parts[0] for p in tier_modules() if p.name.startswith("test_")}
    assert {"unit", "integration", "e2e", "node", "image"} <= tiers


def _layer_modules() -> dict[str, list[str]]:
    """module name -> the folders holding a module of that name, as a test name spells
    them (`node`, or `node_netns` for node/netns/)."""
    out: dict[str, list[str]] = defaultdict(list)
    for path in PACKAGE.glob("*/**/*.py"):
        if path.name != "__init__.py" and not path.stem.startswith("_"):
            out[path.stem].append("_".join(path.parent.relative_to(PACKAGE).parts))
    return out


def stale_names(names: list[str], flat: set[str],
                layered: dict[str, list[str]]) -> dict[str, list[str]]:
    """test file name -> the names it should have instead (one per layer holding the
    module), for each `test_<m>.py` named after a module only a layer folder holds."""
    out = {}
    for name in names:
        stem = name.removeprefix("test_").removesuffix(".py")
        if stem not in flat and stem in layered:
            out[name] = [f"test_{layer}_{stem}.py" for layer in sorted(layered[stem])]
    return out


def test_no_test_file_is_named_after_a_module_that_moved_into_a_layer():
    flat = {p.stem for p in PACKAGE.glob("*.py")} | {
        p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    names = [p.name for p in tier_modules() if p.name.startswith("test_")]
    stale = stale_names(names, flat, _layer_modules())
    assert not stale, f"test files named after a module path that no longer exists: {stale}"


def test_the_stale_name_rule():
    layered = {"state": ["node"], "hotplug": ["daemon", "spec"], "client": ["kube"]}
    flat = {"cli", "install"}
    assert stale_names(["test_state.py", "test_hotplug.py", "test_node_state.py",
                        "test_state_upgrade.py", "test_cli.py", "test_install.py",
                        "test_hotplug_e2e.py"], flat, layered) == {
        "test_state.py": ["test_node_state.py"],
        "test_hotplug.py": ["test_daemon_hotplug.py", "test_spec_hotplug.py"]}


def imports_of_tests(path: Path) -> list[str]:
    """`import tests...` and `from tests... import` anywhere in `path` (inside
    functions too), as `line: module`."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        out += [f"{node.lineno}: {n}" for n in names if n == "tests" or n.startswith("tests.")]
    return out


def test_the_test_bed_hack_and_the_bench_import_nothing_of_tests():
    files = sorted((ROOT / "hack").rglob("*.py")) + sorted((ROOT / "testbed").rglob("*.py"))
    assert ROOT / "hack" / "bench.py" in files and ROOT / "hack" / "demo.py" in files
    assert ROOT / "hack" / "benchlib" / "subjects.py" in files
    assert ROOT / "testbed" / "netattach_testbed" / "cluster.py" in files
    found = {str(p.relative_to(ROOT)): i for p in files if (i := imports_of_tests(p))}
    assert not found, f"imports of tests.* outside tests/: {found}"


def test_the_import_check_sees_every_form(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import tests.testbed.cluster\nfrom tests import x\nimport testsuite\n"
                 "from . import tests\ndef f():\n    from tests.unit.test_x import y\n")
    assert sorted(imports_of_tests(f)) == ["1: tests.testbed.cluster", "2: tests",
                                           "6: tests.unit.test_x"]


def test_the_test_bed_is_not_part_of_netattachs_distribution():
    """The wheel finds packages under src/ only; the bundle collects `netattach`'s
    submodules (netattach.spec), and nothing of netattach imports the test bed."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["tool"]["setuptools"]["packages"]["find"]["where"] == ["src"]
    assert (ROOT / "testbed" / "netattach_testbed" / "__init__.py").exists()
    assert not list((ROOT / "src").glob("*testbed*"))
    testbed = tomllib.loads((ROOT / "testbed" / "pyproject.toml").read_text())
    assert testbed["tool"]["setuptools"]["packages"] == ["netattach_testbed"]
    assert not [p for p in (ROOT / "src").rglob("*.py") if "netattach_testbed" in p.read_text()]
