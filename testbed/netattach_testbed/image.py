"""The container image `make image` builds (docs/build.md, "make image"): the docker-archive
build/image/netattach.tar, as the tests read it, and the glibc floor its dist must keep.

The archive is what `ctr images import`, `docker load` and `podman load` take: manifest.json
(the reference and the layer files), the image config, one uncompressed tar per layer.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from .artifact import ROOT, stale_sources

BASE_ENV = ROOT / "hack" / "image" / "base.env"


def base_env() -> dict[str, str]:
    """hack/image/base.env as {name: value}: what the image's bases are made of.

    The file is shared by the shell scripts and mk/image.mk: `NAME=value` lines, `#`
    comments. Raises OSError when the file cannot be read."""
    out = {}
    for line in BASE_ENV.read_text().splitlines():
        name, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            out[name.strip()] = value.strip()
    return out


def glibc_floor() -> tuple[int, ...]:
    """The oldest glibc the dist must run on (IMAGE_GLIBC_FLOOR of base.env), e.g. (2, 31):
    the glibc of the image's Debian suite, and the floor the README promises hosts."""
    return version_tuple(base_env()["IMAGE_GLIBC_FLOOR"])


def version_tuple(text: str) -> tuple[int, ...]:
    """"2.2.5" -> (2, 2, 5). Raises ValueError on anything but dot-separated integers."""
    return tuple(int(part) for part in text.split("."))


def required_image(who: str) -> Path:
    """The archive $NETATTACH_IMAGE names (`make test` sets it), checked to be current.

    who: the tests asking, for the message. Raises RuntimeError when NETATTACH_IMAGE is
    unset or names no file, or the archive is older than a file under src/netattach
    (`make image` gives it the time its build started, as `make build` does the artifact).
    """
    value = os.environ.get("NETATTACH_IMAGE")
    if not value:
        raise RuntimeError(f"{who} read the image: run `make image` and set NETATTACH_IMAGE "
                           "to build/image/netattach.tar, or use `make test`")
    archive = Path(value)
    if not archive.is_file():
        raise RuntimeError(f"NETATTACH_IMAGE={value} is no file: run `make image`")
    stale = stale_sources(archive)
    if stale:
        raise RuntimeError(f"{archive} is older than {stale[0].relative_to(ROOT)}: stale image, "
                           "run `make image` (or use `make test`)")
    return archive


@dataclass(frozen=True)
class Archive:
    """One image of a docker-archive: its manifest entry's RepoTags and layer file names
    (base layer first), its config (the image config JSON: "config", "rootfs", ...)."""
    path: Path
    repo_tags: list[str]
    layers: list[str]
    config: dict


def read_archive(path: Path) -> Archive:
    """The single image of the docker-archive at `path`. Raises ValueError when the
    manifest holds another number of images, tarfile.TarError/KeyError on a broken archive."""
    with tarfile.open(path) as tar:
        manifest = json.load(_member(tar, "manifest.json"))
        if len(manifest) != 1:
            raise ValueError(f"{path}: {len(manifest)} images in manifest.json, expected 1")
        [entry] = manifest
        config = json.load(_member(tar, entry["Config"]))
    return Archive(path, entry.get("RepoTags") or [], entry["Layers"], config)


def layer_digests(archive: Archive) -> list[str]:
    """"sha256:<hex>" of each layer file as stored (uncompressed), in the manifest's order:
    what the config's rootfs.diff_ids must list for an import to accept the layers."""
    out = []
    with tarfile.open(archive.path) as tar:
        for name in archive.layers:
            out.append("sha256:" + _sha256(_member(tar, name)))
    return out


def extract_rootfs(archive: Archive, dest: Path) -> Path:
    """The image's root filesystem: every layer unpacked into `dest` (created), base first,
    owners kept (needs root). Layers that delete files (whiteouts) are refused with
    ValueError, not applied: an image of netattach's Containerfile has none.
    Raises subprocess.CalledProcessError when tar fails."""
    dest.mkdir(parents=True)
    with tarfile.open(archive.path) as tar:
        for name in archive.layers:
            with subprocess.Popen(["tar", "-x", "-p", "--numeric-owner", "-C", str(dest)],
                                  stdin=subprocess.PIPE) as p:
                assert p.stdin is not None
                shutil.copyfileobj(_member(tar, name), p.stdin, 1 << 20)
                p.stdin.close()
            if p.returncode:
                raise subprocess.CalledProcessError(p.returncode, p.args)
    whiteouts = [str(p.relative_to(dest)) for p in dest.rglob(".wh.*")]
    if whiteouts:
        raise ValueError(f"{archive.path}: layers delete files ({whiteouts[:3]}); not applied")
    return dest


def _member(tar: tarfile.TarFile, name: str):
    f = tar.extractfile(name)
    if f is None:
        raise KeyError(f"{name} is no file in the archive")
    return f


def _sha256(f) -> str:
    h = hashlib.sha256()
    while chunk := f.read(1 << 20):
        h.update(chunk)
    return h.hexdigest()


# ------------------------------------------------------------- glibc symbol versions
_FILE = re.compile(r"^(\S.*?):\s+file format \S+$")
_REQUIRED_FROM = re.compile(r"^\s+required from (\S+):$")
_VERSION = re.compile(r"^\s+0x[0-9a-f]+ 0x[0-9a-f]+ \d+ (\S+)$")


def glibc_versions_needed(objdump_p: str) -> dict[str, set[str]]:
    """{file: the GLIBC_* version names it requires} from the output of `objdump -p FILE...`
    (its "Version References" section: "required from libc.so.6:" then one line per version,
    e.g. "0x09691a75 0x00 02 GLIBC_2.2.5"). Files that require none are left out. The names
    come from any library (libc, libm, libpthread, ld-linux: all glibc)."""
    out: dict[str, set[str]] = {}
    current = None
    in_refs = False
    for line in objdump_p.splitlines():
        if m := _FILE.match(line):
            current, in_refs = m.group(1), False
        elif _REQUIRED_FROM.match(line):
            in_refs = True
        elif in_refs and (m := _VERSION.match(line)):
            if m.group(1).startswith("GLIBC_") and current is not None:
                out.setdefault(current, set()).add(m.group(1))
        elif line.strip() and not line.startswith(" "):
            in_refs = False
    return out


def elf_files(top: Path) -> list[Path]:
    """Every regular file under `top` that starts with the ELF magic, sorted."""
    out = []
    for path in sorted(top.rglob("*")):
        if path.is_file() and not path.is_symlink():
            with path.open("rb") as f:
                if f.read(4) == b"\x7fELF":
                    out.append(path)
    return out


def objdump_private_headers(files: list[Path]) -> str:
    """`objdump -p` (binutils) of `files`, in batches. Raises
    subprocess.CalledProcessError when objdump fails on one."""
    out = []
    for i in range(0, len(files), 200):
        out.append(subprocess.run(["objdump", "-p", *map(str, files[i:i + 200])],
                                  check=True, capture_output=True, text=True).stdout)
    return "".join(out)
