"""The image `make image` builds ($NETATTACH_IMAGE: build/image/netattach.tar, a docker-archive
of the repository's Containerfile; docs/build.md, "make image"), read as an import reads it.

The installer copies the image's /opt/netattach onto every node, where the container runtime
execs it against the HOST's glibc: no file of that dist may need a GLIBC_ symbol version above
the floor the README promises (hack/image/base.env, IMAGE_GLIBC_FLOOR), and the dist runs in
the image's own root, which is Debian bullseye with exactly that glibc. Needs root (chroot).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hack.startup import api_refused_add
from netattach import __version__
from netattach.cni.version import SUPPORTED_VERSIONS
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
    # base and the dist
    assert im.layer_digests(archive) == archive.config["rootfs"]["diff_ids"]
    assert len(archive.layers) == 2


def test_dist_needs_no_glibc_above_the_floor(rootfs):
    floor = im.glibc_floor()
    files = im.elf_files(rootfs / DIST)
    needed = im.glibc_versions_needed(im.objdump_private_headers(files))
    names = {Path(f).name for f in needed}
    # the reading is not vacuous: the bootloaders, libpython and the extension modules
    assert {"netattach", "netattach-shim", "libpython3.11.so.1.0"} <= names, sorted(names)
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
    assert p.stdout.decode().startswith(f"netattach {__version__} (CNI ")

    for exe in (ENTRYPOINT[0], f"/{DIST}/shim/netattach-shim"):
        p = in_root(rootfs, [exe], {"CNI_COMMAND": "VERSION"}, '{"cniVersion":"1.0.0"}')
        assert p.returncode == 0, (exe, p.stderr.decode())
        assert json.loads(p.stdout) == {"cniVersion": "1.0.0",
                                        "supportedVersions": list(SUPPORTED_VERSIONS)}


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
