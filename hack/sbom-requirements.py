"""The part of the build lock that the bundle carries, as a requirements file: what the
image's SBOM describes (Containerfile, docs/build.md "The SBOM").

hack/lock/build.txt pins everything the build stage installs: netattach's runtime
dependencies, and what only builds it (PyInstaller and its helpers, pip, setuptools,
wheel), which the bundle does not contain. Kept here: pyproject.toml's
[project].dependencies and, through the lock's "# via" comments, every package one of
the kept ones needs; each with its pin and hashes, in the lock's order.

usage: python3 hack/sbom-requirements.py hack/lock/build.txt pyproject.toml > runtime.txt
Standard library only (the image's build stage runs it with its own Python).
"""
from __future__ import annotations

import re
import sys
import tomllib


def normalize(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def blocks(lock: str) -> list[tuple[str, list[str], set[str]]]:
    """(name, the requirement's lines, the names in its "# via") of each pin of `lock`."""
    out: list[tuple[str, list[str], set[str]]] = []
    for line in lock.splitlines():
        pin = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==\S+", line)
        if pin:
            out.append((normalize(pin.group(1)), [line], set()))
        elif out and line.startswith("    --hash="):
            out[-1][1].append(line)
        elif out and line.startswith("    #"):
            via = line.strip().lstrip("#").strip().removeprefix("via").strip()
            if via:
                out[-1][2].add(normalize(via) if " " not in via else via)
    return out


def runtime(lock: str, pyproject: dict) -> list[tuple[str, list[str]]]:
    """The kept pins (module doc), in the lock's order."""
    wanted = {normalize(re.split(r"[\s<>=!~;\[(]", d, maxsplit=1)[0])
              for d in pyproject["project"]["dependencies"]}
    pins = blocks(lock)
    missing = wanted - {name for name, _, _ in pins}
    if missing:
        raise SystemExit(f"the lock pins no {', '.join(sorted(missing))}: run `make lock`")
    kept = set(wanted)
    while True:
        more = {name for name, _, via in pins if name not in kept and via & kept}
        if not more:
            break
        kept |= more
    return [(name, lines) for name, lines, _ in pins if name in kept]


def main() -> None:
    lock_path, pyproject_path = sys.argv[1:3]
    with open(lock_path) as f:
        lock = f.read()
    with open(pyproject_path, "rb") as f:
        pyproject = tomllib.load(f)
    for _, lines in runtime(lock, pyproject):
        # a pin's lines end with the continuation of its hashes; the last one must not
        print("\n".join(lines).rstrip(" \\"))


if __name__ == "__main__":
    main()
