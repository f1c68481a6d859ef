"""What this netattach is: its release and the git commit it was built from (issue 24).

The release is the package's `__version__` (pyproject.toml's `version`). The commit is
stamped at build time, never computed at run time: netattach.spec writes it into
COMMIT_FILE beside the package's modules in the bundle, taking it from
$NETATTACH_COMMIT when set (the image's build stage, whose context has no .git: `make
image` passes hack/build-commit.sh's answer as the build arg NETATTACH_COMMIT), else
from hack/build-commit.sh in the checkout (`make build`). Its forms: 40 hex digits, the
same followed by "-dirty" when tracked files differed from that commit, or "unknown"
(a tree without .git, a registry build given no build arg). A virtualenv's netattach
(no bundle, no file) says "unknown" too.

Read by `netattach --version`, the daemon's and the installer's start lines and the
daemon's `netattach_build_info` metric; never on the exec'd CNI path (standard library
`os` only, imported when used).
"""
from __future__ import annotations

import os

from . import __version__

COMMIT_FILE = "build-commit"
"""The stamp's file name in the bundle, beside this module (netattach.spec writes it)."""
UNKNOWN = "unknown"
_HEX = frozenset("0123456789abcdef")


def valid_commit(text: str) -> bool:
    """True when `text` is one of the stamp's forms (module doc)."""
    sha = text.removesuffix("-dirty")
    return text == UNKNOWN or (len(sha) == 40 and set(sha) <= _HEX)


def commit(path: str | None = None) -> str:
    """The git commit this netattach was built from (module doc), read from `path`
    (default: COMMIT_FILE beside this module); "unknown" when there is no such file or it
    holds anything but a stamp's form. Never raises."""
    path = path or os.path.join(os.path.dirname(os.path.abspath(__file__)), COMMIT_FILE)
    try:
        with open(path, encoding="ascii") as f:
            text = f.read(64).strip()
    except (OSError, ValueError):
        return UNKNOWN
    return text if valid_commit(text) else UNKNOWN


def describe() -> str:
    """"<release> (commit <commit>)", e.g. "0.1.0 (commit 3f00fe…)": what --version and the
    programs' start lines say."""
    return f"{__version__} (commit {commit()})"
