"""The built artifact ($NETATTACH_EXE, `make build`: PyInstaller's onedir bundle) on its
own: the same answers as the virtualenv's console script, exec'd the way the installer
lays it out (a versioned directory behind a symlink), with a `noexec` TMPDIR and a
read-only /tmp, one JSON document on stdout, and the runtime's environment handed to
the children unchanged. Needs root (mounts, netns). The e2e suite runs the whole
scenario (API server, default-route through pyroute2, kubelet devices through grpc) on
the same artifact.
"""
from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import certifi
import pytest

from netattach import __version__
from netattach.cli import SUBCOMMANDS
from netattach_testbed import netns as tb
from netattach_testbed.artifact import required_artifact
from netattach_testbed.scenario import DEBIAN_CNI_DIR, bridge_conf, netattach_conf, venv_command

pytestmark = pytest.mark.integration

SUBNET = "198.18.60.0/24"
BASE_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}


@pytest.fixture(scope="module")
def exe() -> Path:
    try:
        return required_artifact("artifact tests")
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)


def run(argv: list[str], env: dict[str, str], stdin: str = "", cwd: str | Path = "/",
        ) -> subprocess.CompletedProcess:
    return subprocess.run(argv, input=stdin.encode(), env={**BASE_ENV, **env}, cwd=cwd,
                          capture_output=True, timeout=120)


def one_document(p: subprocess.CompletedProcess) -> dict:
    """stdout as exactly one JSON document on one line, nothing else."""
    out = p.stdout.decode()
    assert out.endswith("\n") and out.count("\n") == 1, f"stdout is not one line: {out!r}"
    return json.loads(out)


def version_answer(cmd: str | Path, cni_version: str = "1.0.0", env: dict[str, str] | None = None,
                   **kw) -> dict:
    p = run([str(cmd)], {**(env or {}), "CNI_COMMAND": "VERSION"},
            json.dumps({"cniVersion": cni_version}), **kw)
    assert p.returncode == 0, p.stderr.decode()
    return one_document(p)


@pytest.mark.parametrize("cni_version", ["0.1.0", "0.3.1", "1.0.0", "1.1.0"])
def test_cni_version_answer_is_the_venv_commands(exe, cni_version):
    frozen = run([str(exe)], {"CNI_COMMAND": "VERSION"}, json.dumps({"cniVersion": cni_version}))
    venv = run([venv_command()], {"CNI_COMMAND": "VERSION"}, json.dumps({"cniVersion": cni_version}))
    assert (frozen.returncode, frozen.stdout) == (venv.returncode, venv.stdout)
    assert one_document(frozen)["cniVersion"] == cni_version


def test_version_flag_agrees_with_cni_version_and_the_venv(exe):
    """--version: the release, the commit stamped at build time (the virtualenv, not a
    build, says "unknown"), the CNI versions of the VERSION answer."""
    frozen = run([str(exe), "--version"], {})
    assert frozen.returncode == 0 and frozen.stderr == b""
    supported = version_answer(exe)["supportedVersions"]
    m = re.fullmatch(rf"netattach {re.escape(__version__)} \(commit (\S+); "
                     rf"CNI {re.escape(', '.join(supported))}\)\n", frozen.stdout.decode())
    assert m, frozen.stdout
    assert run([venv_command(), "--version"], {}).stdout.decode() == \
        frozen.stdout.decode().replace(f"(commit {m[1]};", "(commit unknown;")


def test_the_version_call_logs_the_release_and_commit_on_stderr(exe, tmp_path):
    """A VERSION call (issue 24) writes one line to stderr, the one libcni copies into
    the runtime's log: thin mode's is --version's line, the thick shim's the same with
    "netattach-shim", from the stamp netattach.spec copied into the shim's prefix.
    stdout stays the one JSON answer."""
    from netattach.install.binary import SHIM_PYTHON, shim_script
    flag = run([str(exe), "--version"], {}).stdout.decode()
    thin = run([str(exe)], {"CNI_COMMAND": "VERSION"}, '{"cniVersion": "1.0.0"}')
    assert thin.returncode == 0 and thin.stderr.decode() == flag
    assert one_document(thin)["cniVersion"] == "1.0.0"
    version = tmp_path / "bin" / ".netattach-0123456789ab"
    shutil.copytree(exe.parent, version, symlinks=True)
    shim = tmp_path / "bin" / "netattach-shim"
    shim.write_bytes(shim_script(str(version / SHIM_PYTHON)))
    shim.chmod(0o755)
    thick = run([str(shim)], {"CNI_COMMAND": "VERSION"}, '{"cniVersion": "1.0.0"}')
    assert thick.returncode == 0 and one_document(thick)["cniVersion"] == "1.0.0"
    assert thick.stderr.decode() == flag.replace("netattach ", "netattach-shim ", 1)
    assert "(commit unknown;" not in flag or \
        (exe.parent / "_internal" / "netattach" / "build-commit").read_text().strip() == "unknown"


def test_the_bundle_is_stamped_with_the_commit_it_was_built_from(exe):
    """`make build` stamps hack/build-commit.sh's answer for this checkout: a commit of
    this repository (with "-dirty" when tracked files differed from it), or "unknown"
    only when the checkout has no .git. The artifact may be older than HEAD (an input-less
    commit does not rebuild it), never of another repository."""
    stamp = (exe.parent / "_internal" / "netattach" / "build-commit").read_text().strip()
    assert f"(commit {stamp};" in run([str(exe), "--version"], {}).stdout.decode()
    root = Path(__file__).resolve().parents[2]
    here = subprocess.run([str(root / "hack" / "build-commit.sh")], capture_output=True,
                          text=True, check=True).stdout.strip()
    if here == "unknown":
        assert stamp == "unknown"
        return
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", stamp), stamp
    sha = stamp.removesuffix("-dirty")
    assert subprocess.run(["git", "-C", str(root), "cat-file", "-e", f"{sha}^{{commit}}"],
                          capture_output=True).returncode == 0, f"{sha} is not a commit here"
    # the script itself: the commit of HEAD, -dirty exactly when a tracked file changed
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                            "--untracked-files=no"], capture_output=True, text=True,
                           check=True).stdout.strip()
    assert here == head + ("-dirty" if dirty else "")


def test_the_commit_of_a_tree_without_git_is_unknown(tmp_path):
    """A source tree without .git (a tarball, the image's build context) says so."""
    root = Path(__file__).resolve().parents[2]
    (tmp_path / "hack").mkdir()
    shutil.copy2(root / "hack" / "build-commit.sh", tmp_path / "hack")
    p = subprocess.run([str(tmp_path / "hack" / "build-commit.sh")], capture_output=True,
                       text=True, check=True)
    assert p.stdout == "unknown\n"


def test_the_bundle_holds_no_build_tool(exe):
    """setuptools (build/venv's build backend) is not in the bundle: PyInstaller adds a
    run-time hook for it that imports it at every start, some 70 ms of each CNI call
    (netattach.spec, `excludes`); nor are its distutils shims or pkg_resources."""
    internal = exe.parent / "_internal"
    if not internal.is_dir():
        pytest.fail(f"{exe} is not the onedir bundle `make build` makes", pytrace=False)
    found = [name for name in ("setuptools", "_distutils_hack", "distutils", "pkg_resources")
             if (internal / name).exists() or (internal / f"{name}.pyc").exists()]
    assert found == []


@pytest.mark.parametrize("argv", [[]] + [[name, "--help"] for name in SUBCOMMANDS],
                         ids=["no-arguments"] + list(SUBCOMMANDS))
def test_operator_commands_load_frozen(exe, argv):
    """Each subcommand's module is imported by name (cli.SUBCOMMANDS): in the bundle
    only because the spec collects every netattach submodule."""
    frozen = run([str(exe), *argv], {})
    venv = run([venv_command(), *argv], {})
    assert frozen.returncode == 0, frozen.stderr.decode()
    assert (frozen.stdout, frozen.stderr) == (venv.stdout, venv.stderr)


def test_installed_layout_versioned_dir_behind_a_swapped_symlink(exe, tmp_path):
    """The installer's layout: <binDir>/.netattach-<digest>/ (a copy of the bundle) and
    <binDir>/netattach -> .netattach-<digest>/netattach, replaced atomically on upgrade.
    The bootloader finds _internal/ from the resolved path, whatever the cwd, argv[0]
    or chain of links."""
    bin_dir = tmp_path / "opt-cni-bin"
    bin_dir.mkdir()
    old, new = bin_dir / ".netattach-0123abcd", bin_dir / ".netattach-fedc9876"
    shutil.copytree(exe.parent, old, symlinks=True)
    (bin_dir / "netattach").symlink_to(f"{old.name}/netattach")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "plugin").symlink_to(bin_dir / "netattach")  # a link to the link
    expected = version_answer(exe)

    for cmd, cwd in ((bin_dir / "netattach", "/"), (bin_dir / "netattach", elsewhere),
                     (elsewhere / "plugin", tmp_path), ("./netattach", bin_dir)):
        assert version_answer(cmd, cwd=cwd) == expected, (cmd, cwd)
    by_path = run(["netattach"], {"CNI_COMMAND": "VERSION", "PATH": str(bin_dir)},
                  '{"cniVersion": "1.0.0"}', cwd=elsewhere)  # argv[0] without a slash
    assert one_document(by_path) == expected

    # upgrade: new dir, new link renamed over the old one, old dir removed
    shutil.copytree(exe.parent, new, symlinks=True)
    (bin_dir / "netattach.new").symlink_to(f"{new.name}/netattach")
    os.replace(bin_dir / "netattach.new", bin_dir / "netattach")
    shutil.rmtree(old)
    assert version_answer(elsewhere / "plugin", cwd=elsewhere) == expected


def test_the_shim_runs_from_its_own_prefix_isolated(exe, tmp_path):
    """Thick mode's shim as `netattach install` lays it out: the bundle copied to
    <binDir>/.netattach-<digest>/ and <binDir>/netattach-shim the script naming its
    interpreter (shim/bin/python3 -SI). It answers VERSION as the venv's shim does; its
    interpreter finds libpython beside it ($ORIGIN, not the build machine's path) and
    its standard library in its own prefix, whatever PYTHON* the runtime's environment
    holds; and the prefix holds nothing of netattach's package nor any third-party
    module (the shim imports the standard library only)."""
    from netattach.install.binary import SHIM_PYTHON, shim_script
    bin_dir = tmp_path / "bin"
    version = bin_dir / ".netattach-0123456789ab"
    shutil.copytree(exe.parent, version, symlinks=True)
    shim = bin_dir / "netattach-shim"
    shim.write_bytes(shim_script(str(version / SHIM_PYTHON)))
    shim.chmod(0o755)
    hostile = {"PYTHONPATH": str(tmp_path), "PYTHONHOME": str(tmp_path),
               "PYTHONSTARTUP": str(tmp_path / "x"), "LD_LIBRARY_PATH": str(tmp_path)}
    (tmp_path / "netattach_shim.py").write_text("raise SystemExit('imported from PYTHONPATH')\n")
    for env in ({}, hostile):
        assert version_answer(shim, env=env) == version_answer(venv_command() + "-shim"), env
    python = version / SHIM_PYTHON
    p = run([str(python), "-SI", "-c", "import sys, json; print(json.dumps([sys.prefix, sys.path]))"],
            hostile)
    prefix, path = json.loads(p.stdout)
    assert p.returncode == 0 and prefix == str(version / "shim"), p.stderr.decode()
    assert all(entry.startswith(prefix + "/") for entry in path), path
    dynamic = subprocess.run(["readelf", "-d", str(python)], capture_output=True, text=True)
    assert re.search(r"R(UN)?PATH.*\[\$ORIGIN/\.\./lib\]", dynamic.stdout), dynamic.stdout
    stdlib = next((version / "shim" / "lib").glob("python3.*"))
    top = {entry.name.removesuffix(".pyc") for entry in stdlib.iterdir()}
    assert "netattach_shim" in top and "os" in top
    assert not top & {"netattach", "yaml", "lightkube", "httpx2", "pyroute2", "grpc",
                      "jsonschema", "prometheus_client", "site-packages"}, sorted(top)


def test_error_case_writes_one_json_document_and_nothing_else(exe, tmp_path):
    env = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "abc", "CNI_NETNS": "/var/run/netns/x",
           "CNI_IFNAME": "eth0", "CNI_PATH": DEBIAN_CNI_DIR}
    for stdin, code in (("{not json", 6), (json.dumps({"cniVersion": "1.0.0", "name": "n",
                                                        "type": "netattach"}), 7)):
        frozen, venv = run([str(exe)], env, stdin), run([venv_command()], env, stdin)
        assert frozen.returncode == 1
        assert one_document(frozen)["code"] == code
        assert frozen.stdout == venv.stdout
    missing = run([str(exe)], {"CNI_COMMAND": "DEL"}, "{}")
    assert missing.returncode == 1 and one_document(missing)["code"] == 4


def kubeconfig_with_inline_ca(path: Path) -> Path:
    """A kubeconfig whose CA is inline data (lightkube writes it to a temp file) and
    whose server refuses connections."""
    pem = Path(certifi.where()).read_text().split("-----END CERTIFICATE-----")[0]
    ca = base64.b64encode((pem + "-----END CERTIFICATE-----\n").encode()).decode()
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1",
                                               "certificate-authority-data": ca}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return path


def api_add(cmd: str | Path, tmp_path: Path, state_dir: Path | None = None,
            extra_env: dict[str, str] | None = None, wrapper: tuple[str, ...] = ()) -> dict:
    """An ADD for a pod: needs the API server, which refuses: code 11. Proves the
    frozen API client (lightkube, httpx2, yaml, msgspec, ssl) loads and runs."""
    conf = {"cniVersion": "1.0.0", "name": "n", "type": "netattach",
            "kubeconfig": str(kubeconfig_with_inline_ca(tmp_path / "kubeconfig")),
            "clusterNetwork": "/nonexistent/10-x.conf",
            "cniDir": str(state_dir or tmp_path / "state"), "logToStderr": False,
            "logFile": str((state_dir or tmp_path) / "log"), "apiTimeout": 5}
    env = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "abc", "CNI_NETNS": "/var/run/netns/x",
           "CNI_IFNAME": "eth0", "CNI_PATH": DEBIAN_CNI_DIR,
           "CNI_ARGS": "K8S_POD_NAMESPACE=a;K8S_POD_NAME=b;K8S_POD_INFRA_CONTAINER_ID=abc",
           **(extra_env or {})}
    p = run([*wrapper, str(cmd)], env, json.dumps(conf))
    assert p.returncode == 1, p.stderr.decode()
    return one_document(p)


def test_api_client_runs_frozen(exe, tmp_path):
    doc = api_add(exe, tmp_path)
    assert doc["code"] == 11 and "https://127.0.0.1:1 unreachable" in doc["msg"], doc
    assert doc == api_add(venv_command(), tmp_path)


def bridge_add_del(exe: Path, env: tb.HostEnv, extra_env: dict[str, str]) -> None:
    """ADD then DEL of the cluster default network (bridge + host-local, no API server:
    no K8S_POD_* in CNI_ARGS) in a new netns, through the artifact."""
    bin_dir = env.root / "bin"
    bin_dir.mkdir(exist_ok=True)
    cluster = env.conf_dir / "10-cluster.conf"
    cluster.write_text(json.dumps(bridge_conf(env.bridge_name(), SUBNET, env.ipam_dir,
                                              name="cluster-net", version="1.0.0",
                                              gateway=True)))
    conf = netattach_conf(env, env.root / "no-kubeconfig", str(cluster), bin_dir)
    ns = env.new_netns()
    cni_env = {"CNI_CONTAINERID": uuid.uuid4().hex, "CNI_NETNS": tb.netns_path(ns),
               "CNI_IFNAME": "eth0", "CNI_PATH": DEBIAN_CNI_DIR, **extra_env}
    add = run([str(exe)], {**cni_env, "CNI_COMMAND": "ADD"}, json.dumps(conf))
    assert add.returncode == 0, add.stdout.decode() + add.stderr.decode()
    address = one_document(add)["ips"][0]["address"]
    assert address.startswith("198.18.60.") and tb.addresses(ns, "eth0") == [address]
    delete = run([str(exe)], {**cni_env, "CNI_COMMAND": "DEL"}, json.dumps(conf))
    assert (delete.returncode, delete.stdout) == (0, b""), delete.stderr.decode()
    assert "eth0" not in {link["ifname"] for link in tb.links(ns)}


def test_noexec_tmpdir(exe, tmp_path, host_env):
    """Nothing is extracted or exec'd from TMPDIR: a `noexec` one changes nothing."""
    tmpdir = tmp_path / "noexec"
    tmpdir.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "noexec,size=1m", "tmpfs", str(tmpdir)],
                   check=True)
    try:
        env = {"TMPDIR": str(tmpdir)}
        p = run([str(exe)], {**env, "CNI_COMMAND": "VERSION"}, '{"cniVersion": "1.0.0"}')
        assert one_document(p) == version_answer(exe)
        bridge_add_del(exe, host_env, env)
        assert api_add(exe, tmp_path, extra_env=env)["code"] == 11
        p = run([str(exe)], {**env, "CNI_COMMAND": "VERSION"}, '{"cniVersion": "1.0.0"}')
        assert p.returncode == 0
    finally:
        subprocess.run(["umount", str(tmpdir)], check=True)


def test_read_only_tmp(exe, tmp_path):
    """/tmp read-only (in a private mount namespace of the plugin alone), TMPDIR unset:
    the bundle starts and answers; the API client's CA temp file goes to the next
    writable temp dir Python's tempfile finds (/var/tmp)."""
    ro_tmp = ("unshare", "--mount", "--propagation", "private", "sh", "-ec",
              "mount --bind /tmp /tmp; mount -o remount,bind,ro /tmp; "
              "if touch /tmp/.netattach-probe 2>/dev/null; then exit 97; fi; "
              'exec "$@"', "sh")
    p = run([*ro_tmp, str(exe)], {"CNI_COMMAND": "VERSION"}, '{"cniVersion": "1.0.0"}')
    assert p.returncode == 0, p.stderr.decode()
    assert one_document(p) == version_answer(exe)
    env = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "abc", "CNI_NETNS": "/var/run/netns/x",
           "CNI_IFNAME": "eth0", "CNI_PATH": DEBIAN_CNI_DIR}
    p = run([*ro_tmp, str(exe)], env, "{not json")
    assert p.returncode == 1 and one_document(p)["code"] == 6
    state = Path("/var/tmp") / f"netattach-test-{uuid.uuid4().hex[:12]}"
    try:
        assert api_add(exe, tmp_path, state_dir=state, wrapper=ro_tmp)["code"] == 11
    finally:
        shutil.rmtree(state, ignore_errors=True)


RECORDER = """#!/bin/sh
env > "{out}"
"""


def test_children_get_the_runtimes_environment(exe, tmp_path):
    """The bootloader's LD_LIBRARY_PATH (the bundle's _internal/ first) and its _PYI_*
    variables stay in netattach: a delegate gets the environment the runtime gave."""
    (tmp_path / "envrec").write_text(RECORDER.format(out=tmp_path / "child.env"))
    (tmp_path / "envrec").chmod(0o755)
    cluster = tmp_path / "10-rec.conf"
    cluster.write_text(json.dumps({"cniVersion": "1.1.0", "name": "rec", "type": "envrec"}))
    conf = {"cniVersion": "1.1.0", "name": "n", "type": "netattach", "logToStderr": False,
            "clusterNetwork": str(cluster), "binDir": str(tmp_path),
            "cniDir": str(tmp_path / "state")}
    for runtime_env in ({}, {"LD_LIBRARY_PATH": "/opt/runtime/lib"}):
        p = run([str(exe)], {"CNI_COMMAND": "STATUS", "CNI_PATH": str(tmp_path), **runtime_env},
                json.dumps(conf))
        assert (p.returncode, p.stdout) == (0, b""), p.stderr.decode()
        child = dict(line.split("=", 1) for line in
                     (tmp_path / "child.env").read_text().splitlines() if "=" in line)
        assert child.get("LD_LIBRARY_PATH") == runtime_env.get("LD_LIBRARY_PATH")
        leaked = [k for k in child if re.match(r"_PYI_|LD_LIBRARY_PATH_ORIG$", k)]
        assert not leaked, leaked
        assert child["CNI_COMMAND"] == "STATUS"
