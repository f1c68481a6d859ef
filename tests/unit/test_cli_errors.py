"""cni_main's last resort: an exception no command wrapped keeps the code of its kind."""
from __future__ import annotations

import json

import pytest

from netattach import attach
from netattach.cli import cni_main
from netattach.delegates import DelegateError
from netattach.kube import KubeError
from netattach.plan import PlanError
from netattach.state import StateError

ENV = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/var/run/netns/x",
       "CNI_IFNAME": "eth0", "CNI_PATH": "/opt/cni/bin"}
CONF = {"cniVersion": "1.0.0", "name": "na", "type": "netattach", "clusterNetwork": "/x.conf",
        "logToStderr": False}


@pytest.mark.parametrize("error,code", [
    (StateError("state file gone bad"), 5),
    (IsADirectoryError(21, "Is a directory"), 5),
    (KubeError("API server unreachable"), 11),
    (DelegateError("ns/n", "bad spec.config"), 7),
    (PlanError("interface net1 twice"), 7),
    (KeyError("attachments"), 999),
])
def test_an_unwrapped_failure_keeps_the_code_of_its_kind(monkeypatch, error, code):
    def fail(req, conf):
        raise error
    monkeypatch.setattr(attach, "cmd_add", fail)
    doc, status = cni_main(ENV, json.dumps(CONF).encode())
    assert status == 1 and doc["code"] == code and doc["cniVersion"] == "1.0.0"
    assert doc["details"] == "see the netattach log for the traceback"
