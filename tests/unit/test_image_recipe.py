"""The glibc floor of the image (hack/image/base.env) is the one the README promises hosts and
the one of the Containerfile's public bases, and the reading of `objdump -p` that tests/image
checks the dist with."""
from __future__ import annotations

import re

from tests.testbed import image as im

README = im.ROOT / "README.md"
CONTAINERFILE = im.ROOT / "Containerfile"


def test_readme_promises_the_floor_the_image_is_built_for():
    env = im.base_env()
    text = " ".join(README.read_text().split())
    stated = re.findall(r"built on Debian (\w+), so the executable runs on any host "
                        r"with glibc (\d+\.\d+) or newer", text)
    assert stated == [(env["IMAGE_SUITE"], env["IMAGE_GLIBC_FLOOR"])]
    assert im.glibc_floor() == im.version_tuple(env["IMAGE_GLIBC_FLOOR"]) >= (2, 17)


def test_containerfile_defaults_to_public_bases_of_the_same_suite_and_python():
    """A registry build (the ARG defaults) and `make image` (build args naming the local
    bases) build the dist on the same Debian release, so with the same glibc floor."""
    env = im.base_env()
    text = CONTAINERFILE.read_text()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.M))
    python = ".".join(env["IMAGE_PYTHON_VERSION"].split(".")[:2])
    assert args == {
        "BUILD_BASE": f"docker.io/library/python:{python}-slim-{env['IMAGE_SUITE']}",
        "RUNTIME_BASE": f"docker.io/library/debian:{env['IMAGE_SUITE']}-slim"}
    assert re.findall(r"^FROM (\S+)", text, re.M) == ["${BUILD_BASE}", "${RUNTIME_BASE}"]


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
