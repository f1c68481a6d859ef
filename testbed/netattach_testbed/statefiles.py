"""What a test sees of netattach's state dir (cniDir): live state apart from tombstones.

A completed DEL (or an ADD that failed and undid everything) leaves `<id>.deleted`, an
empty tombstone that lets the runtime's next DEL of that container succeed at once,
`.tombstones-pruned`, the stamp of the hourly pruning, and `.status-memo`, thin STATUS's
memo (netattach/node/statusmemo.py). None holds an attachment; everything else
(`<id>.json`, `.lock`, temp files, `.json.corrupt`) does or guards one.
"""
from __future__ import annotations

from pathlib import Path

TOMBSTONE = ".deleted"
PRUNE_STAMP = ".tombstones-pruned"
STATUS_MEMO = ".status-memo"


def live(state_dir: Path) -> list[str]:
    """Names in `state_dir` other than tombstones, the prune stamp and STATUS's memo,
    sorted; [] when the dir does not exist."""
    if not state_dir.exists():
        return []
    return sorted(p.name for p in state_dir.iterdir() if holds_attachment(p.name))


def holds_attachment(name: str) -> bool:
    """True for an entry of the state dir that holds or guards a pod's attachment: not a
    tombstone, the prune stamp nor STATUS's memo (module doc)."""
    return not name.endswith(TOMBSTONE) and name not in (PRUNE_STAMP, STATUS_MEMO)


def tombstones(state_dir: Path) -> list[str]:
    """The container IDs with a tombstone in `state_dir`, sorted."""
    if not state_dir.exists():
        return []
    return sorted(p.name[:-len(TOMBSTONE)] for p in state_dir.iterdir()
                  if p.name.endswith(TOMBSTONE))
