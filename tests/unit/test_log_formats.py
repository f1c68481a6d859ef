"""The log formats (node/logsetup.py; docs/configuration.md, "Logs"): text lines with a
UTC ISO 8601 time whatever TZ says, JSON lines with the pod, sandbox and network of
the thread's log_context; `logFormat` in the schema, the daemon's and the installer's
flags; a CNI call's lines carry its pod and sandbox (commands/call.py).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from netattach.cni.errors import CniError
from netattach.commands.call import cni_main
from netattach.node import logsetup
from netattach.node.logsetup import log_context
from netattach.spec.netconf import parse_netconf

ISO_UTC = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


@pytest.fixture(autouse=True)
def _close_handlers():
    yield
    for handler in logging.getLogger("netattach").handlers:
        handler.close()
    logging.getLogger("netattach").handlers.clear()


def json_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# ---------------------------------------------------------------- text

FORMAT_IN_ANOTHER_ZONE = """
import logging
from netattach.node import logsetup
record = logging.LogRecord("netattach.t", logging.INFO, "x.py", 1, "hi %s", ("there",), None)
record.created = 1700000000.5  # 2023-11-14 22:13:20.5 UTC, 2023-11-15 07:13:20.5 in XYZ-9
for fmt in ("text", "json"):
    print(logsetup.formatter(fmt, "p[1] %(levelname)s %(name)s: %(message)s").format(record))
"""


def test_the_time_is_utc_whatever_tz_says():
    """A child whose TZ is nine hours east (a POSIX TZ: no zone files needed)."""
    out = subprocess.run([sys.executable, "-c", FORMAT_IN_ANOTHER_ZONE], capture_output=True,
                         text=True, env={**os.environ, "TZ": "XYZ-9"}, check=True).stdout
    text, line = out.splitlines()
    assert text == "2023-11-14T22:13:20.500Z p[1] INFO netattach.t: hi there"
    assert json.loads(line)["time"] == "2023-11-14T22:13:20.500Z"


def test_text_lines_of_the_plugin(tmp_path):
    logsetup.setup_logging(str(tmp_path / "n.log"), "info", False)
    logging.getLogger("netattach.t").info("one %d", 1)
    [line] = (tmp_path / "n.log").read_text().splitlines()
    assert re.fullmatch(ISO_UTC + rf" netattach\[{os.getpid()}\] INFO netattach.t: one 1", line)


def test_text_lines_of_the_installer(capsys):
    from netattach import install
    install._setup_logging("info")
    logging.getLogger("netattach.install.t").warning("two")
    line = capsys.readouterr().err.strip()
    assert re.fullmatch(ISO_UTC + rf" netattach-install\[{os.getpid()}\] WARNING: two", line)
    install._setup_logging("info", "json")
    logging.getLogger("netattach.install.t").info("three")
    record = json.loads(capsys.readouterr().err)
    assert record["msg"] == "three" and record["logger"] == "netattach.install.t"


# ---------------------------------------------------------------- json

def test_json_lines_fields_in_order_and_context(tmp_path):
    logsetup.setup_logging(str(tmp_path / "n.log"), "debug", False, None, "json")
    log = logging.getLogger("netattach.t")
    log.info("outside")
    with log_context(pod="ns/p", sandbox="c1"):
        log.debug("call %s", "started")
        with log_context(network="ns/net-a"):
            log.warning("inner")
            log.info("its own", extra={"network": "other/net-b"})
        log.error("after")
    log.info("outside again")
    records = json_lines(tmp_path / "n.log")
    assert [list(r) for r in records[:2]] == [
        ["time", "level", "msg", "logger", "pid"],
        ["time", "level", "pod", "sandbox", "msg", "logger", "pid"]]
    assert [(r["level"], r.get("pod"), r.get("sandbox"), r.get("network"), r["msg"])
            for r in records] == [
        ("info", None, None, None, "outside"),
        ("debug", "ns/p", "c1", None, "call started"),
        ("warning", "ns/p", "c1", "ns/net-a", "inner"),
        ("info", "ns/p", "c1", "other/net-b", "its own"),
        ("error", "ns/p", "c1", None, "after"),
        ("info", None, None, None, "outside again")]
    assert all(re.fullmatch(ISO_UTC, r["time"]) for r in records)
    assert {(r["logger"], r["pid"]) for r in records} == {("netattach.t", os.getpid())}


def test_a_json_record_is_one_line_whatever_it_holds(tmp_path):
    logsetup.setup_logging(str(tmp_path / "n.log"), "info", False, None, "json")
    log = logging.getLogger("netattach.t")
    log.info("two\nlines, \"quoted\", tab\t, é, \udcff")
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed")
    first, second = (tmp_path / "n.log").read_text().splitlines()
    assert json.loads(first)["msg"] == "two\nlines, \"quoted\", tab\t, é, \udcff"
    assert first.isascii()
    record = json.loads(second)
    assert record["msg"] == "failed" and record["level"] == "error"
    assert record["exc"].startswith("Traceback") and "ValueError: boom" in record["exc"]


def test_contexts_are_per_thread(tmp_path):
    """The node daemon runs calls on several threads: each line carries its own
    thread's context, whatever the other threads entered meanwhile."""
    logsetup.setup_logging(str(tmp_path / "n.log"), "info", False, None, "json")
    log = logging.getLogger("netattach.t")
    entered, logged = threading.Event(), threading.Event()

    def other() -> None:
        with log_context(pod="ns/b", sandbox="cb"):
            entered.set()
            logged.wait()
            log.info("from b")

    thread = threading.Thread(target=other)
    thread.start()
    entered.wait()
    with log_context(pod="ns/a", sandbox="ca"):
        log.info("from a")
    logged.set()
    thread.join()
    log.info("none")
    assert [(r["msg"], r.get("pod"), r.get("sandbox")) for r in json_lines(tmp_path / "n.log")] \
        == [("from a", "ns/a", "ca"), ("from b", "ns/b", "cb"), ("none", None, None)]


def test_a_context_is_left_on_an_exception(tmp_path):
    logsetup.setup_logging(str(tmp_path / "n.log"), "info", False, None, "json")
    with pytest.raises(RuntimeError), log_context(pod="ns/p", network="n"):
        raise RuntimeError
    logging.getLogger("netattach.t").info("after")
    assert set(json_lines(tmp_path / "n.log")[0]) == {"time", "level", "msg", "logger", "pid"}


# ---------------------------------------------------------------- the CNI call

CONF = {"cniVersion": "1.0.0", "name": "na", "type": "netattach",
        "clusterNetwork": "/nonexistent/10-x.conf", "logToStderr": False, "logFormat": "json"}
ENV = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "abc123", "CNI_NETNS": "/var/run/netns/x",
       "CNI_IFNAME": "eth0", "CNI_PATH": "/usr/lib/cni",
       "CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p"}


def test_a_cni_calls_lines_carry_its_pod_and_sandbox(tmp_path):
    """Thin mode: logFormat json from the conf; the failing ADD's lines (the first debug
    line, the error) name the pod and the sandbox; the context is left at the end."""
    conf = {**CONF, "logFile": str(tmp_path / "n.log"), "logLevel": "debug",
            "cniDir": str(tmp_path / "state"), "kubeconfig": str(tmp_path / "nowhere")}
    doc, code = cni_main(ENV, json.dumps(conf).encode())
    assert code == 1 and str(tmp_path / "nowhere") in doc["msg"]
    records = json_lines(tmp_path / "n.log")
    assert records[0]["level"] == "debug" and records[0]["msg"].startswith("ADD container=")
    assert (records[-1]["level"], records[-1]["msg"]) == ("error", doc["msg"])
    assert all((r["pod"], r["sandbox"]) == ("ns/p", "abc123") for r in records), records
    logging.getLogger("netattach.t").info("after the call")
    assert "pod" not in json_lines(tmp_path / "n.log")[-1]


# ---------------------------------------------------------------- the settings

def test_log_format_key_values_and_default():
    base = {"type": "netattach", "clusterNetwork": "/c.conf"}
    assert parse_netconf(base).log_format == "text"
    assert parse_netconf({**base, "logFormat": "json"}).log_format == "json"
    with pytest.raises(CniError) as e:
        parse_netconf({**base, "logFormat": "xml"})
    assert e.value.code == 7 and "logFormat" in e.value.msg


@pytest.mark.parametrize("module, flag", [("daemon", "--log-format"),
                                          ("install", "--log-format"),
                                          ("install", "--installer-log-format")])
def test_the_programs_flags_take_the_same_values(module, flag):
    import importlib
    parser = argparse.ArgumentParser()
    importlib.import_module(f"netattach.{module}").add_arguments(parser)
    dest = flag[2:].replace("-", "_")
    assert getattr(parser.parse_args([]), dest) == "text"
    assert getattr(parser.parse_args([flag, "json"]), dest) == "json"
    with pytest.raises(SystemExit):
        parser.parse_args([flag, "xml"])


def test_the_installer_writes_log_format_only_when_not_the_default():
    from netattach.install.primary import PluginSettings
    settings = PluginSettings(bin_dir="/opt/cni/bin", cni_dir="/var/lib/netattach",
                              kubeconfig="/k", log_level="info")
    assert "logFormat" not in settings.plugin_entry("/etc/cni/net.d/10-c.conf")
    json_settings = PluginSettings(bin_dir="/opt/cni/bin", cni_dir="/var/lib/netattach",
                                   kubeconfig="/k", log_level="info", log_format="json")
    entry = json_settings.plugin_entry("/etc/cni/net.d/10-c.conf")
    assert entry["logFormat"] == "json"
    assert parse_netconf(entry).log_format == "json"
