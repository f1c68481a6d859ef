"""The exec'd path imports only what it uses (issue 11): every module VERSION, STATUS,
scenario 1's ADD and its DEL import, recorded by the interpreter itself
(`-X importtime`, through PYTHONPROFILEIMPORTTIME), is netattach's own or the
standard library's, and none of the standard library's heavy packages. An import
check, not a timing: what it asserts holds on any machine, however loaded.

The plugin runs as the virtualenv's console script (the same code as the built
executable, whose frozen imports the interpreter does not report) against the real
API server, with the kubeconfig as `netattach install` writes it (JSON, token, CA
file), real plugins and a real netns.
"""
from __future__ import annotations

import dataclasses
import json
import sys

import pytest

from netattach_testbed import scenario as sc

# Standard-library packages the exec'd path never needs (each costs from a few to tens
# of ms, or starts machinery): asynchronous I/O, process pools, XML, decimal
# arithmetic, test frameworks, archives. (ctypes is not here: on Python 3.11, which
# has no os.setns, node/netns.py calls libc's setns through it.)
HEAVY_STDLIB = {"asyncio", "concurrent", "multiprocessing", "xml", "decimal", "unittest",
                "sqlite3", "tkinter", "pydoc", "doctest", "zipfile", "tarfile"}


def imported(stderr: str, top_level: bool = True) -> set[str]:
    """Names of the modules `-X importtime` reported in `stderr`: top-level names, or
    (`top_level` False) the full dotted ones."""
    out = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":  # the header line
                out.add(name.split(".")[0] if top_level else name)
    return out


def outside_allowlist(modules: set[str]) -> list[str]:
    # "org": the standard library's copy.py tries `from org.python.core import
    # PyStringMap` (a Jython probe) and -X importtime reports the failed attempt too
    allowed = set(sys.stdlib_module_names) | {"netattach", "_distutils_hack", "__main__",
                                             "encodings", "site", "sitecustomize", "org"}
    return sorted((modules - allowed) | (modules & HEAVY_STDLIB))


@pytest.fixture
def console_scenario(scenario, tmp_path):
    """Scenario 1, exec'ing the console script; its kubeconfig is JSON, the installer's
    format (cluster.write_kubeconfig), which the exec'd path reads without YAML."""
    json.loads(open(scenario.netconf["kubeconfig"]).read())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "netattach").symlink_to(sc.venv_command())
    netconf = {**scenario.netconf, "binDir": str(bin_dir)}
    return dataclasses.replace(scenario, bin_dir=bin_dir, netconf=netconf)


def test_exec_path_imports_only_the_standard_library_and_netattach(console_scenario):
    s = console_scenario
    seen, full = {}, {}
    for command in ("VERSION", "STATUS", "ADD", "DEL"):
        run = s.run(command, env_overrides={"PYTHONPROFILEIMPORTTIME": "1"})
        assert run.code == 0, (command, run.stdout, s.log_text())
        seen[command] = imported(run.stderr)
        full[command] = imported(run.stderr, top_level=False)
        assert "netattach" in seen[command], run.stderr[-2000:]  # the probe saw the imports
        assert outside_allowlist(seen[command]) == [], (command, outside_allowlist(seen[command]))
    # what the lean path removed: the API library, the schema library, netlink, YAML
    for command, modules in seen.items():
        assert not modules & {"lightkube", "httpx2", "httpcore2", "jsonschema", "pyroute2",
                              "yaml", "kubernetes", "grpc"}, (command, modules)
    # ADD speaks HTTP/1.1 through kube/http11.py over ssl: not http.client, whose email
    # header parser (with datetime, random, urllib.parse, ipaddress) cost 23 ms
    assert "ssl" in seen["ADD"] and "netattach.kube.http11" in full["ADD"]
    assert not seen["ADD"] & {"http", "email", "urllib", "ipaddress", "datetime"}, seen["ADD"]
    assert "ssl" not in seen["DEL"]
    # the API server's ASCII host reaches getaddrinfo and ssl as bytes, not through
    # the "idna" codec (transport._Connection)
    assert "encodings.idna" not in full["ADD"], sorted(full["ADD"])
    # what the standard library would pull in for nothing (cli.DEFERRED_MODULES): inspect
    # (with ast and dis) under dataclasses, traceback (with linecache and tokenize)
    # under logging
    for command, modules in seen.items():
        assert not modules & {"inspect", "ast", "dis", "traceback", "linecache", "tokenize"}, \
            (command, modules)
    # typing (about 4 ms): the exec'd path's modules import it for the type checker only
    # (`TYPE_CHECKING = False`, cli.py)
    assert not (seen["ADD"] | seen["DEL"]) & {"typing"}, sorted(seen["ADD"] | seen["DEL"])
    # VERSION: the C scanner and string encoder of _json (jsonutil), not the json
    # package with re, enum and typing
    assert not seen["VERSION"] & {"typing", "json", "re", "enum"}, seen["VERSION"]
    sc.assert_clean(s)


def test_the_check_sees_a_module_outside_the_allowlist():
    """The check itself can fail: a third-party and a heavy standard-library import."""
    stderr = ("import time: self [us] | cumulative | imported package\n"
              "import time:       100 |        100 | netattach\n"
              "import time:       100 |        100 | lightkube.config\n"
              "import time:       100 |        100 |   asyncio.events\n")
    assert outside_allowlist(imported(stderr)) == ["asyncio", "lightkube"]
