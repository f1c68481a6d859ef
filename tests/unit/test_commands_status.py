"""STATUS's answer without forwarding (commands/status.py): when the file alone settles
it, when it takes the full path, and that a thin STATUS answered so writes no log line
while a refused one still logs its cause."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from netattach.cni.errors import NotAvailable
from netattach.commands import call
from netattach.commands.status import answered_without_forwarding
from netattach.spec.netconf import parse_netconf


def conf_for(cluster_network: str, **extra):
    return parse_netconf({"cniVersion": "1.1.0", "name": "n", "type": "netattach",
                          "clusterNetwork": cluster_network, **extra})


def write(path: Path, doc) -> str:
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


@pytest.mark.parametrize("doc, expected", [
    ({"cniVersion": "1.0.0", "name": "c", "plugins": [{"type": "bridge"}]}, True),
    ({"cniVersion": "0.3.1", "name": "c", "type": "bridge"}, True),
    ({"cniVersion": "1.1.0", "name": "c", "plugins": [{"type": "bridge"}]}, False),
    ({"name": "c", "type": "bridge"}, False),          # no cniVersion: cmd_status says why
    ({"cniVersion": "one", "name": "c"}, False),       # not a version
    ({"cniVersion": 1, "name": "c"}, False),
    ('{"cniVersion": "1.0.0", ', False),               # not JSON
    ('["1.0.0"]', False),                              # not an object
    (b"\xff\xfe", False),                              # not UTF-8
])
def test_only_a_readable_file_below_1_1_0_is_answered_from_the_file(tmp_path, doc, expected):
    path = tmp_path / "10-c.conflist"
    if isinstance(doc, bytes):
        path.write_bytes(doc)
    else:
        write(path, doc)
    assert answered_without_forwarding(conf_for(str(path))) is expected


def test_a_directory_a_name_or_a_missing_file_take_the_full_path(tmp_path):
    write(tmp_path / "10-c.conf", {"cniVersion": "1.0.0", "name": "c", "type": "bridge"})
    assert not answered_without_forwarding(conf_for(str(tmp_path)))
    assert not answered_without_forwarding(conf_for("c", confDir=str(tmp_path)))
    assert not answered_without_forwarding(conf_for(str(tmp_path / "gone.conf")))


def test_a_missing_readiness_indicator_file_is_not_available(tmp_path):
    cluster = write(tmp_path / "10-c.conf", {"cniVersion": "1.0.0", "name": "c", "type": "b"})
    conf = conf_for(cluster, readinessindicatorfile=str(tmp_path / "ready"))
    with pytest.raises(NotAvailable, match="readiness indicator file .*ready does not exist"):
        answered_without_forwarding(conf)
    (tmp_path / "ready").write_text("")
    assert answered_without_forwarding(conf)


def run_status(tmp_path: Path, **extra):
    cluster = write(tmp_path / "10-c.conf", {"cniVersion": "1.0.0", "name": "c", "type": "b"})
    log = tmp_path / "netattach.log"
    conf = {"cniVersion": "1.1.0", "name": "n", "type": "netattach", "clusterNetwork": cluster,
            "logFile": str(log), "logToStderr": False, **extra}
    doc, code = call.cni_main({"CNI_COMMAND": "STATUS", "CNI_PATH": str(tmp_path)},
                              json.dumps(conf).encode())
    for handler in logging.getLogger("netattach").handlers:
        handler.flush()
    return doc, code, log.read_text() if log.exists() else ""


def test_a_thin_status_answered_from_the_file_logs_nothing(tmp_path):
    assert run_status(tmp_path) == (None, 0, "")


def test_a_refused_thin_status_still_logs_its_cause(tmp_path):
    doc, code, text = run_status(tmp_path, readinessindicatorfile=str(tmp_path / "ready"))
    assert code == 1 and doc["code"] == 50 and "ready does not exist" in doc["msg"]
    assert "readiness indicator file" in text and "ERROR" in text


def test_at_debug_level_status_takes_the_full_path_and_logs(tmp_path):
    doc, code, text = run_status(tmp_path, logLevel="debug")
    assert (doc, code) == (None, 0)
    assert "STATUS container=" in text and "timing: STATUS" in text
