"""The built artifact (`make build`: dist/netattach/netattach) as the tests require it.

The e2e tests and tests/integration/test_artifact.py run the executable PyInstaller
built, never the virtualenv's console script, and never one built from older sources.
"""
from __future__ import annotations

import os
from pathlib import Path

from .scenario import netattach_command

ROOT = Path(__file__).resolve().parent.parent.parent
SOURCES = ROOT / "src" / "netattach"


def stale_sources(exe: Path, sources: Path | None = None) -> list[Path]:
    """The files under `sources` (default: src/netattach; bytecode caches left out)
    modified after `exe`.

    `make build` gives the executable the time its build started, so a file edited
    during a build counts as newer. Raises OSError when `exe` cannot be stat'ed.
    """
    built = exe.stat().st_mtime
    out = []
    for dirpath, dirnames, filenames in os.walk(sources or SOURCES):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in filenames:
            path = Path(dirpath) / name
            if not name.endswith(".pyc") and path.stat().st_mtime > built:
                out.append(path)
    return sorted(out)


def required_artifact(who: str) -> Path:
    """The artifact $NETATTACH_EXE names, checked to be there and current.

    who: the tests asking, for the message ("e2e tests").
    Raises RuntimeError when NETATTACH_EXE is unset, names no executable file, or the
    executable is older than a file under src/netattach (the message names them).
    """
    if not os.environ.get("NETATTACH_EXE"):
        raise RuntimeError(f"{who} run the built artifact: run `make build` and set "
                           "NETATTACH_EXE, or use `make test`")
    exe = Path(netattach_command())
    stale = stale_sources(exe)
    if stale:
        names = ", ".join(str(p.relative_to(ROOT)) for p in stale[:5])
        more = f" and {len(stale) - 5} more" if len(stale) > 5 else ""
        raise RuntimeError(f"{exe} is older than {names}{more}: stale build, run `make build` "
                           "(or use `make test`)")
    return exe
