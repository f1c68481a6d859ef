"""The glibc floor of the image (hack/image/base.env) is the one the README promises hosts and
the one of the Containerfile's public bases, pinned by digest; the build's Python packages are
the lock's (hack/lock/build.txt), hash-checked, in `make build` and the Containerfile alike;
the SBOM's tool is its own lock's (hack/lock/sbom.txt), in a virtualenv of its own, and the
SBOM lists the lock's runtime pins (hack/sbom-requirements.py); the image's OCI labels; and
the reading of `objdump -p` that tests/image checks the dist with."""
from __future__ import annotations

import importlib.util
import re
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from netattach_testbed import image as im

README = im.ROOT / "README.md"
CONTAINERFILE = im.ROOT / "Containerfile"
MAKEFILE = im.ROOT / "Makefile"
PYPROJECT = im.ROOT / "pyproject.toml"
LOCK = "hack/lock/build.txt"
LOCK_INPUT = im.ROOT / "hack" / "lock" / "build.in"
SBOM_LOCK = "hack/lock/sbom.txt"


def test_readme_promises_the_floor_the_image_is_built_for():
    env = im.base_env()
    text = " ".join(README.read_text().split())
    stated = re.findall(r"built on Debian (\w+), so the executable runs on any host "
                        r"with glibc (\d+\.\d+) or newer", text)
    assert stated == [(env["IMAGE_SUITE"], env["IMAGE_GLIBC_FLOOR"])]
    assert im.glibc_floor() == im.version_tuple(env["IMAGE_GLIBC_FLOOR"]) >= (2, 17)


def _base_args() -> dict[str, str]:
    return dict(re.findall(r"^ARG (\w+_BASE)=(\S+)$", CONTAINERFILE.read_text(), re.M))


def test_containerfile_defaults_to_public_bases_of_the_same_suite_and_python():
    """A registry build (the ARG defaults) and `make image` (build args naming the local
    bases) build the dist on the same Debian release, so with the same glibc floor."""
    env = im.base_env()
    text = CONTAINERFILE.read_text()
    python = ".".join(env["IMAGE_PYTHON_VERSION"].split(".")[:2])
    tags = {name: ref.split("@")[0] for name, ref in _base_args().items()}
    assert tags == {
        "BUILD_BASE": f"docker.io/library/python:{python}-slim-{env['IMAGE_SUITE']}",
        "RUNTIME_BASE": f"docker.io/library/debian:{env['IMAGE_SUITE']}-slim"}
    assert re.findall(r"^FROM (\S+)", text, re.M) == ["${BUILD_BASE}", "${RUNTIME_BASE}"]


def test_every_base_is_pinned_by_digest():
    """Each FROM is an ARG whose default names one image by its digest (a tag can be
    moved to another image; `make image` passes its local bases instead)."""
    text = CONTAINERFILE.read_text()
    args = _base_args()
    froms = re.findall(r"^FROM \$\{(\w+)\}", text, re.M)
    assert froms and len(froms) == len(re.findall(r"^FROM ", text, re.M))
    for name in froms:
        assert re.fullmatch(r"docker\.io/library/[\w.-]+:[\w.-]+@sha256:[0-9a-f]{64}",
                            args[name]), (name, args[name])


def _pip_installs(text: str) -> list[str]:
    """The `pip install` commands of a Containerfile or a Makefile, continuation lines
    joined."""
    joined = re.sub(r"\s*\\\n\s*", " ", text)
    return [m.strip() for m in re.findall(r"pip install ([^&;\n]+)", joined)]


def test_every_pip_install_of_the_builds_takes_the_lock_with_hashes_or_nothing():
    """In the Containerfile's build stage and in `make build`, pip installs the lock with
    --require-hashes, then netattach itself with no dependency and no isolated build
    (which would fetch the build backend unhashed); nothing else, and no constraints
    file or extra that would bring packages the lock does not pin."""
    containerfile = CONTAINERFILE.read_text()
    assert "PIP_CONSTRAINT" not in containerfile
    assert f"COPY {LOCK} " in containerfile
    assert f"COPY {SBOM_LOCK} " in containerfile
    assert _pip_installs(containerfile) == [
        f"-q --require-hashes -r {LOCK}", f"-q --require-hashes -r {SBOM_LOCK}",
        "-q --no-deps --no-build-isolation ."]
    # the SBOM tool's install is its own virtualenv's pip, not the build's
    assert re.search(rf"python -m venv (\S+) && \1/bin/pip install -q --require-hashes -r "
                     rf"{re.escape(SBOM_LOCK)}", containerfile)
    makefile = MAKEFILE.read_text()
    assert re.search(rf"^LOCK := {re.escape(LOCK)}$", makefile, re.M)
    build_venv = makefile[makefile.index("$(BUILD_VENV)/.installed:"):]
    build_venv = build_venv[:build_venv.index("\n\n")]
    assert _pip_installs(build_venv) == [
        "-q --disable-pip-version-check --require-hashes -r $(LOCK)",
        "-q --no-deps --no-build-isolation -e ."]
    assert re.search(r"^\$\(BUILD_VENV\)/\.installed: \$\(LOCK\) pyproject\.toml$",
                     makefile, re.M)


def _lock(lock: str = LOCK) -> tuple[list[str], dict[str, tuple[str, list[str]]]]:
    """hack/lock/build.txt (or `lock`): (its option lines, {canonical name: (version,
    hashes)})."""
    text = re.sub(r"\s*\\\n\s*", " ", (im.ROOT / lock).read_text())
    options, pins = [], {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("-"):
            options.append(line)
            continue
        m = re.fullmatch(r"([\w.-]+)==(\S+)((?: --hash=sha256:[0-9a-f]{64})+)", line)
        assert m, f"{lock}: not an exact pin with sha256 hashes: {line[:80]}"
        assert canonicalize_name(m[1]) not in pins, m[1]
        pins[canonicalize_name(m[1])] = (m[2], re.findall(r"sha256:([0-9a-f]{64})", m[3]))
    return options, pins


@pytest.mark.parametrize("lock", [LOCK, SBOM_LOCK])
def test_the_lock_pins_and_hashes_every_package_wheels_only(lock):
    options, pins = _lock(lock)
    assert options == ["--only-binary :all:"]
    assert pins and all(hashes for _, hashes in pins.values())


def test_the_sbom_tool_is_pinned_and_its_lock_covers_it():
    wanted = [line.split("#", 1)[0].strip()
              for line in (im.ROOT / "hack/lock/sbom.in").read_text().splitlines()]
    _, pins = _lock(SBOM_LOCK)
    [tool] = [Requirement(w) for w in wanted if w]
    assert tool.name == "cyclonedx-bom" and str(tool.specifier).startswith("==")
    assert tool.specifier.contains(pins["cyclonedx-bom"][0])


def test_the_sbom_lists_the_runtime_pins_of_the_lock_and_no_build_tool():
    """hack/sbom-requirements.py keeps pyproject's dependencies and what they need, each
    pinned and hashed as in the lock; PyInstaller, pip and the build backend only build
    the bundle."""
    spec = importlib.util.spec_from_file_location("sbom_requirements",
                                                  im.ROOT / "hack" / "sbom-requirements.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    project = tomllib.loads(PYPROJECT.read_text())
    kept = dict(module.runtime((im.ROOT / LOCK).read_text(), project))
    _, pins = _lock()
    assert {canonicalize_name(Requirement(d).name) for d in project["project"]["dependencies"]} \
        <= set(kept)
    assert not set(kept) & {"pyinstaller", "pyinstaller-hooks-contrib", "altgraph", "pip",
                            "setuptools", "wheel", "packaging"}
    assert {"typing-extensions", "httpx2", "h11", "idna"} <= set(kept)  # through "# via"
    for name, lines in kept.items():
        assert lines[0].startswith(f"{name}=={pins[name][0]} ")
        assert [h.split("sha256:")[1].rstrip(" \\") for h in lines[1:]] == pins[name][1]


def test_the_image_carries_the_oci_labels_and_the_version_of_pyproject():
    containerfile = CONTAINERFILE.read_text()
    runtime = containerfile[containerfile.rindex("FROM "):]
    labels = dict(re.findall(r'(org\.opencontainers\.image\.\w+)="([^"]*)"', runtime))
    assert set(labels) == {f"org.opencontainers.image.{k}" for k in (
        "title", "description", "version", "revision", "source", "licenses")}
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    assert labels["org.opencontainers.image.licenses"] == project["license"]
    assert f"ARG NETATTACH_VERSION={project['version']}\n" in runtime


def test_the_lock_covers_what_pyproject_asks_for_the_build():
    """Every requirement of netattach, of its `build` extra, of [build-system] and of
    the lock's input (pip) has a pin in the lock that satisfies it: `make lock` was run
    after pyproject.toml changed (else pip --require-hashes fails the build)."""
    project = tomllib.loads(PYPROJECT.read_text())
    wanted = [*project["project"]["dependencies"],
              *project["project"]["optional-dependencies"]["build"],
              *project["build-system"]["requires"],
              *(line.split("#", 1)[0].strip() for line in LOCK_INPUT.read_text().splitlines())]
    _, pins = _lock()
    for text in filter(None, wanted):
        req = Requirement(text)
        name = canonicalize_name(req.name)
        assert name in pins, f"{LOCK} has no {req.name}: run `make lock`"
        assert req.specifier.contains(pins[name][0], prereleases=True), (
            f"{LOCK} pins {req.name}=={pins[name][0]}, pyproject.toml asks {req}: run `make lock`")
    assert "netattach" not in pins


OBJDUMP_P = """
a/libfoo.so:     file format elf64-x86-64

Dynamic Section:
  NEEDED               libm.so.6
  NEEDED               libc.so.6

Version definitions:
1 0x01 0x0865f4e6 libfoo.so
2 0x00 0x0a63b2c5 GLIBC_9.99

Version References:
  required from libm.so.6:
    0x06969189 0x00 08 GLIBC_2.29
  required from libc.so.6:
    0x06969194 0x00 03 GLIBC_2.14
    0x09691a75 0x00 02 GLIBC_2.2.5
  required from libstdc++.so.6:
    0x08922974 0x00 04 GLIBCXX_3.4.29


b/noversions.so:     file format elf64-x86-64

Dynamic Section:
  NEEDED               libz.so.1


c/bin:     file format elf64-x86-64

Version References:
  required from libc.so.6:
    0x06969194 0x00 03 GLIBC_2.36
    0x0963cf85 0x00 04 GLIBC_PRIVATE
"""


def test_glibc_versions_needed_reads_version_references_only():
    assert im.glibc_versions_needed(OBJDUMP_P) == {
        "a/libfoo.so": {"GLIBC_2.29", "GLIBC_2.14", "GLIBC_2.2.5"},
        "c/bin": {"GLIBC_2.36", "GLIBC_PRIVATE"},
    }
    assert max(map(im.version_tuple, ["2.2.5", "2.14", "2.29"])) == (2, 29)
