"""A pod's ServiceAccount volume as kubelet writes it, and polling with a deadline:
shared by the installer's tests (tests/integration/test_install.py) and its end to end
test against the real API server (tests/e2e/test_install_e2e.py)."""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

CA = b"-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"


def wait_for(predicate, what: str, timeout: float = 60.0):
    """Poll `predicate` every 20 ms until it returns something truthy; fail naming `what`.

    The timeout is a hang guard (see netattach_testbed.faults.wait_for): generous, so that
    a loaded machine makes a wait longer, never a failure."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")


def write_sa(sa: Path, token: str, generation: int, ca: bytes = CA) -> None:
    """Fill a ServiceAccount volume the way kubelet's AtomicWriter does: a new
    `..<timestamp>` dir, a `..data_tmp` symlink to it renamed over `..data`, the
    top-level names linking through `..data`, the old generation removed."""
    sa.mkdir(exist_ok=True)
    gen = sa / f"..2026_01_01_00_00_00.{generation:09d}"
    gen.mkdir()
    (gen / "token").write_text(token)
    (gen / "ca.crt").write_bytes(ca)
    (gen / "namespace").write_text("kube-system")
    old = os.readlink(sa / "..data") if (sa / "..data").is_symlink() else None
    (sa / "..data_tmp").symlink_to(gen.name)
    os.rename(sa / "..data_tmp", sa / "..data")
    for name in ("token", "ca.crt", "namespace"):
        if not (sa / name).is_symlink():
            (sa / name).symlink_to(f"..data/{name}")
    if old:
        shutil.rmtree(sa / old)
