"""atomicfile.replace: durable (file and directory fsync'ed) by default; durable=False
keeps it atomic and skips the fsyncs. Whether a file survives a power loss cannot be
tested here; what is pinned is which fsyncs are made and that the content is whole."""
from __future__ import annotations

import os

import pytest

from netattach.node import atomicfile


@pytest.mark.parametrize("durable, fsyncs", [(True, 2), (False, 0)])
def test_replace_fsyncs_only_when_durable(tmp_path, monkeypatch, durable, fsyncs):
    calls: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    target = tmp_path / "f.json"
    target.write_bytes(b"old")
    atomicfile.replace(str(target), b"new", 0o600, durable=durable)
    assert target.read_bytes() == b"new" and (target.stat().st_mode & 0o777) == 0o600
    assert len(calls) == fsyncs
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]  # no temp file left
