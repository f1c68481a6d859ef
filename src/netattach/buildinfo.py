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
daemon's `netattach_build_info` metric. The exec'd VERSION call names the release and
commit on stderr without importing this module: the reading lives in the package's
`__init__` (imported by every netattach process anyway) and is re-exported here; the
thick shim reads its own copy of the stamp (netattach_shim.build_line).
"""
from __future__ import annotations

from . import COMMIT_FILE, UNKNOWN, __version__, commit, valid_commit

__all__ = ["COMMIT_FILE", "UNKNOWN", "commit", "describe", "valid_commit"]


def describe() -> str:
    """"<release> (commit <commit>)", e.g. "0.1.0 (commit 3f00fe…)": what --version, the
    programs' start lines and the VERSION call's line on stderr say."""
    return f"{__version__} (commit {commit()})"
