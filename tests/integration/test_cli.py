"""The installed `netattach` command as a runtime sees it: exit status and exactly one
JSON document on stdout (result, VERSION answer or CNI error), nothing else."""
from __future__ import annotations

import json
import subprocess

import pytest

from netattach_testbed.scenario import netattach_command

CONF = {"cniVersion": "1.0.0", "name": "na", "type": "netattach",
        "clusterNetwork": "/nonexistent/10-x.conf", "logToStderr": False}
ENV = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "abc123", "CNI_NETNS": "/var/run/netns/x",
       "CNI_IFNAME": "eth0", "CNI_PATH": "/usr/lib/cni", "PATH": "/usr/bin:/bin"}


def run(env: dict, stdin: str | bytes, argv: tuple = ()) -> tuple[int, dict, str]:
    p = subprocess.run([netattach_command(), *argv], input=stdin if isinstance(stdin, bytes)
                       else stdin.encode(), capture_output=True, env=env, timeout=60)
    out = p.stdout.decode()
    assert out.count("\n") <= 1, f"more than one line on stdout: {out!r}"
    return p.returncode, json.loads(out) if out else {}, p.stderr.decode()


def test_version():
    code, doc, _ = run({"CNI_COMMAND": "VERSION", "PATH": "/usr/bin"}, '{"cniVersion":"0.4.0"}')
    assert code == 0
    assert doc == {"cniVersion": "0.4.0", "supportedVersions": [
        "0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]}


def test_missing_env_names_every_variable():
    env = {"CNI_COMMAND": "ADD", "PATH": "/usr/bin"}
    code, doc, _ = run(env, json.dumps(CONF))
    assert code == 1 and doc["code"] == 4
    for var in ("CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"):
        assert var in doc["msg"]


@pytest.mark.parametrize("var,value", [
    ("CNI_CONTAINERID", "../../etc"), ("CNI_CONTAINERID", "a/b"),
    ("CNI_IFNAME", "a-very-long-ifname0"), ("CNI_IFNAME", "../x"), ("CNI_IFNAME", "."),
    # control characters: the annotation's rule refused them, CNI_IFNAME's did not (issue 9)
    ("CNI_IFNAME", "eth\x010"), ("CNI_IFNAME", "eth0\x7f"), ("CNI_IFNAME", "eth\x1b[0"),
])
def test_hostile_names_refused_before_use(var, value, tmp_path):
    conf = {**CONF, "cniDir": str(tmp_path / "state")}
    code, doc, _ = run({**ENV, var: value}, json.dumps(conf))
    assert code == 1 and doc["code"] == 4 and repr(value)[1:-1] in doc["msg"]
    assert not (tmp_path / "state").exists()  # nothing touched the state dir


def test_bad_json_is_code_6():
    code, doc, _ = run(ENV, "{not json")
    assert code == 1 and doc["code"] == 6


def test_bad_config_is_code_7_naming_the_key():
    code, doc, _ = run(ENV, json.dumps({**CONF, "namespaceIsolation": "yes"}))
    assert code == 1 and doc["code"] == 7 and "'namespaceIsolation'" in doc["msg"]


def test_error_document_carries_the_config_version(tmp_path):
    conf = {**CONF, "cniVersion": "0.4.0", "cniDir": str(tmp_path / "s")}
    code, doc, _ = run({**ENV, "CNI_NETNS": "/nonexistent"}, json.dumps(conf))
    assert code == 1 and doc["cniVersion"] == "0.4.0"
    assert "/nonexistent/10-x.conf" in doc["msg"]


def test_logs_never_reach_stdout(tmp_path):
    conf = {**CONF, "logToStderr": True, "logLevel": "debug", "cniDir": str(tmp_path / "s")}
    code, doc, err = run(ENV, json.dumps(conf))
    assert code == 1 and "code" in doc   # stdout parsed as the single error document
    assert "ERROR" in err                 # the log went to stderr


def test_version_flag_agrees_with_cni_version():
    p = subprocess.run([netattach_command(), "--version"], capture_output=True, text=True)
    assert p.returncode == 0 and "1.1.0" in p.stdout
