"""Per-test host environment (netns, links, dirs) and the end-of-session leak check."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from netattach_testbed import netns as tb
from netattach_testbed import runtime as rt


@pytest.fixture
def host_env():
    """A HostEnv: make netns/bridges/master links through it; all removed after the test."""
    env = tb.new_host_env()
    try:
        yield env
    finally:
        env.cleanup()


@pytest.fixture(scope="session", autouse=True)
def no_leaks_at_end():
    """Proves at the end of the session that tests left nothing behind: netns, links,
    dirs, processes (testbed/netattach_testbed/netns.py), and what a test-owned containerd may
    leave (testbed/netattach_testbed/runtime.py: shims, mounts, cgroups, libcni cache entries)."""
    yield
    left = tb.leaks() + rt.leaks()
    assert not left, f"tests left these behind: {sorted(left)}"


@pytest.fixture(scope="session")
def cni_testbin() -> Path:
    """Dir of the Go-built cnitool and CNI 1.1 reference plugins (`make testbin`)."""
    d = Path(os.environ.get("NETATTACH_CNI_BIN",
                            Path.home() / ".cache/netattach/testbin/cni-v1.9.1"))
    missing = [n for n in ("cnitool", "bridge", "host-local", "macvlan") if not (d / n).exists()]
    if missing:
        pytest.fail(f"{missing} not built in {d}: run `make testbin`")
    return d
