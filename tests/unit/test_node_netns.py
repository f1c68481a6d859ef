"""node/netns.py, the one way into a pod netns: its errors by step, before any
setns(2); tests/integration/test_node_netns_real.py enters a namespace (root)."""
from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest

from netattach.node import netns


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


def test_importing_netns_imports_no_library():
    code = ("import sys, netattach.node.netns, netattach.node.netnsinfo; "
            "print(sorted({m.split('.')[0] for m in sys.modules} - set(sys.stdlib_module_names)"
            " - {'netattach', '_distutils_hack', '__main__'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
