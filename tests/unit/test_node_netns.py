"""node/netns.py, the one way into a pod netns: its errors by step, and that no thread
is left in another namespace (the namespace entered here is the test's own)."""
from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading

import pytest

from netattach.node import netns

OWN = "/proc/self/ns/net"
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="setns(2) needs CAP_SYS_ADMIN")


def test_missing_path_is_an_open_error_and_not_created(tmp_path):
    missing = str(tmp_path / "gone")
    with pytest.raises(netns.NetnsOpenError) as e:
        with netns.inside(missing):
            pytest.fail("the body ran")
    assert e.value.errno == errno.ENOENT and e.value.path == missing and missing in str(e.value)
    with pytest.raises(netns.NetnsOpenError):
        netns.run_inside(missing, lambda: pytest.fail("fn ran"))
    assert not os.path.exists(missing)


def test_a_file_that_is_no_namespace_is_an_enter_error(tmp_path):
    plain = tmp_path / "plain"
    plain.write_text("")
    with pytest.raises(netns.NetnsEnterError) as e:
        with netns.inside(str(plain)):
            pytest.fail("the body ran")
    assert e.value.errno == errno.EINVAL and e.value.path == str(plain)
    with pytest.raises(netns.NetnsEnterError):
        netns.run_inside(str(plain), lambda: pytest.fail("fn ran"))
    assert not isinstance(e.value, netns.NetnsOpenError)


@root_only
def test_inside_switches_back_after_an_exception():
    before = os.readlink("/proc/thread-self/ns/net")
    with pytest.raises(KeyError):
        with netns.inside(OWN):
            raise KeyError("x")
    assert os.readlink("/proc/thread-self/ns/net") == before


@root_only
def test_run_inside_runs_in_a_thread_of_its_own_and_hands_back_its_answer_and_errors():
    seen = []
    assert netns.run_inside(OWN, lambda: seen.append(threading.current_thread().name) or 7,
                            "netns-test") == 7
    assert seen == ["netns-test"]
    with pytest.raises(ZeroDivisionError):
        netns.run_inside(OWN, lambda: 1 // 0)


def test_importing_netns_imports_no_library():
    code = ("import sys, netattach.node.netns, netattach.node.netnsinfo; "
            "print(sorted({m.split('.')[0] for m in sys.modules} - set(sys.stdlib_module_names)"
            " - {'netattach', '_distutils_hack', '__main__'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
