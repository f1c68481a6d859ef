"""The installer's record of its settings, which `netattach install --check` (the
DaemonSet's probes) checks against.

The probes exec `netattach install --check` with no flags, while the installer runs
with the admin's (`--host-conf-dir` on k3s, say): a check with the default paths would
look at the wrong dirs and never pass. So the installer, at start, writes what it was
told to `<--run-dir>/settings.json`, a dir of its pod's own (the DaemonSet mounts an
emptyDir there: it outlives a container restart, not the pod): every setting flag's
value, and the digest of its artifact (binary.tree_digest of an onedir source, which
the image cannot change, so the probe need not hash 80 MB each time). `--check`
takes its settings from that record; a flag given to `--check` whose value differs
from the flag's default overrides the record's (a check by hand). No record, or one
that cannot be read: not ready, and the message says why.

Document (JSON, 0600, written atomically):
    {"version": 1, "settings": {"<flag dest>": value, ...}, "artifactDigest": "<12 hex>"|null}
"""
from __future__ import annotations

import argparse
import json
import os
from typing import Any

from ..node import atomicfile
from .files import MAX_CONFIG_BYTES, InstallError, ensure_dir

RECORD_NAME = "settings.json"
VERSION = 1
NOT_RECORDED = frozenset({"check", "once", "run_dir", "installer_log_level",
                           "installer_log_format"})
"""Flags that say what this process does, not what is installed."""


def record_path(run_dir: str) -> str:
    return os.path.join(run_dir, RECORD_NAME)


def settings_of(args: argparse.Namespace, defaults: dict[str, Any]) -> dict[str, Any]:
    """The settings to record: the value of every flag of `defaults` (the dests of
    `netattach install`'s flags -> their defaults) but NOT_RECORDED's."""
    return {k: getattr(args, k) for k in sorted(defaults) if k not in NOT_RECORDED}


def write_record(run_dir: str, settings: dict[str, Any], digest: str | None) -> str:
    """Write the record into `run_dir` (made 0700 if missing); returns its path.
    Raises InstallError naming the file."""
    ensure_dir(run_dir, 0o700)
    path = record_path(run_dir)
    doc = {"version": VERSION, "settings": settings, "artifactDigest": digest}
    try:
        # a pod's own dir, gone with the pod: atomic is enough, no fsync
        atomicfile.replace(path, (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode(),
                           0o600, durable=False)
    except OSError as e:
        raise InstallError(f"cannot write the installer's record {path}: {e.strerror}") from None
    return path


def read_record(run_dir: str) -> tuple[dict[str, Any], str | None]:
    """(settings, artifact digest or None) of the record in `run_dir`. Raises
    InstallError saying why there is none usable: missing (the installer of this pod
    has not started, or runs with another --run-dir), unreadable, or not a record."""
    path = record_path(run_dir)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise InstallError(
            f"no record of the installer's settings at {path}: the installer of this pod "
            "has not started yet, or runs with another --run-dir") from None
    except OSError as e:
        raise InstallError(f"cannot read the installer's record {path}: {e.strerror}") from None
    try:
        doc = json.loads(raw)
    except ValueError:
        doc = None
    if not (isinstance(doc, dict) and doc.get("version") == VERSION
            and isinstance(doc.get("settings"), dict)):
        raise InstallError(f"{path} is not a record of version {VERSION} of the installer's "
                           "settings")
    digest = doc.get("artifactDigest")
    return doc["settings"], digest if isinstance(digest, str) else None


def apply_record(args: argparse.Namespace, settings: dict[str, Any],
                 defaults: dict[str, Any]) -> list[str]:
    """Give `args` (a --check's) the recorded `settings`, except where a flag of the
    check differs from its default (given by hand: kept). Returns the names of the
    flags kept whose value differs from the record's. Recorded names that are not flags
    (any more) are ignored."""
    kept = []
    for name, value in settings.items():
        if name not in defaults or name in NOT_RECORDED:
            continue
        if getattr(args, name) == defaults[name]:
            setattr(args, name, value)
        elif getattr(args, name) != value:
            kept.append(name)
    return kept
