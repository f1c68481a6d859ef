"""The e2e guard (testbed/netattach_testbed/artifact.py): NETATTACH_EXE required, stale builds refused."""
from __future__ import annotations

import os

import pytest

from netattach_testbed import artifact
from netattach_testbed.scenario import netattach_command


def make_tree(tmp_path):
    src = tmp_path / "src" / "netattach"
    (src / "__pycache__").mkdir(parents=True)
    (src / "cli.py").write_text("")
    (src / "__pycache__" / "cli.cpython-311.pyc").write_text("")
    exe = tmp_path / "dist" / "netattach"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    return src, exe


def test_stale_sources_are_the_newer_files_bytecode_left_out(tmp_path):
    src, exe = make_tree(tmp_path)
    os.utime(exe, (1_000_000, 1_000_000))
    os.utime(src / "cli.py", (900_000, 900_000))
    os.utime(src / "__pycache__" / "cli.cpython-311.pyc", (2_000_000, 2_000_000))
    assert artifact.stale_sources(exe, src) == []
    os.utime(src / "cli.py", (1_000_001, 1_000_001))
    assert artifact.stale_sources(exe, src) == [src / "cli.py"]


def test_without_netattach_exe_the_message_says_what_to_run(monkeypatch):
    monkeypatch.delenv("NETATTACH_EXE", raising=False)
    with pytest.raises(RuntimeError) as e:
        artifact.required_artifact("e2e tests")
    assert str(e.value) == ("e2e tests run the built artifact: run `make build` and set "
                            "NETATTACH_EXE, or use `make test`")


def test_netattach_exe_must_be_an_executable_file(monkeypatch, tmp_path):
    monkeypatch.setenv("NETATTACH_EXE", str(tmp_path / "missing"))
    with pytest.raises(RuntimeError, match="no executable file there"):
        netattach_command()
    (tmp_path / "plain").write_text("")
    monkeypatch.setenv("NETATTACH_EXE", str(tmp_path / "plain"))
    with pytest.raises(RuntimeError, match="no executable file there"):
        netattach_command()


def test_an_artifact_older_than_the_sources_is_refused(monkeypatch, tmp_path):
    src, exe = make_tree(tmp_path)
    os.utime(exe, (1_000_000, 1_000_000))
    monkeypatch.setattr(artifact, "SOURCES", src)
    monkeypatch.setattr(artifact, "ROOT", tmp_path)
    monkeypatch.setenv("NETATTACH_EXE", str(exe))
    with pytest.raises(RuntimeError, match=r"older than src/netattach/cli\.py: stale build"):
        artifact.required_artifact("e2e tests")
    os.utime(exe, None)  # now
    assert artifact.required_artifact("e2e tests") == exe
