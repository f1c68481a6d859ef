"""cni_main's one mapping (cni.errors.as_cni_error): every exception a command lets out
becomes one CNI error whose code is its kind's."""
from __future__ import annotations

import json

import pytest

from netattach.cli import cni_main
from netattach.cni.errors import CniError
from netattach.commands import add
from netattach.kube.client import KubeError
from netattach.node.state import StateError
from netattach.spec.delegates import DelegateError
from netattach.spec.plan import PlanError

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
    monkeypatch.setattr(add, "cmd_add", lambda orch, req, conf: fail(req, conf))
    doc, status = cni_main(ENV, json.dumps(CONF).encode())
    assert status == 1 and doc["code"] == code and doc["cniVersion"] == "1.0.0"
    if not isinstance(error, CniError):  # not a netattach error kind: see the traceback
        assert doc["details"] == "see the netattach log for the traceback"
    else:
        assert doc["msg"] == str(error)


def test_every_kind_carries_its_code():
    from netattach.cni import errors
    kinds = {errors.VersionError: 1, errors.UnknownContainer: 3, errors.InvalidEnv: 4,
             errors.IOFailure: 5, errors.DecodeFailure: 6, errors.ConfigError: 7,
             errors.TryAgain: 11, errors.NotAvailable: 50, errors.InternalError: 999}
    for kind, code in kinds.items():
        e = kind("m", "d")
        assert e.code == code and e.to_dict("1.0.0") == {
            "cniVersion": "1.0.0", "code": code, "msg": "m", "details": "d"}
        inner = e.within("pod ns/p: network n")
        assert type(inner) is kind and inner.code == code and inner.details == "d"
        assert inner.msg == "pod ns/p: network n: m" and str(inner) == "pod ns/p: network n: m; d"


@pytest.mark.parametrize("code", [0, -1, True, "7", None])
def test_a_child_code_that_is_not_a_positive_integer_is_999(code):
    from netattach.cni.errors import ChildError
    assert ChildError(code, "x").code == 999  # the spec defines no code 0


def test_the_config_version_is_checked_before_anything_runs(monkeypatch):
    """Defect 1: an unsupported netattach cniVersion fails with code 1 before any command
    runs (as libcni's skel); the error carries a version netattach speaks."""
    def never(orch, req, conf):
        raise AssertionError("the command ran")
    monkeypatch.setattr(add, "cmd_add", never)
    for version, code in (("2.0.0", 1), ("1.2.0", 1), ("1.0", 1), ("x", 7)):
        doc, status = cni_main(ENV, json.dumps({**CONF, "cniVersion": version}).encode())
        assert status == 1 and doc["code"] == code, (version, doc)
        assert doc["cniVersion"] == "1.1.0" and "cniVersion" in doc["msg"]
