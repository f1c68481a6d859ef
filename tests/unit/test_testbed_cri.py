"""The test bed's teardown of sandboxes a stopped kubelet left (runtime.Cri.remove_all):
containerd answers "already in removing state" while a removal the kubelet began is
still running, and that must be waited out, not reported as a leak. The CRI calls are
scripted here (the logic under test is the wait); the real teardown runs in every
tests/node and tests/e2e session."""
from __future__ import annotations

from pathlib import Path

import pytest

from netattach_testbed import runtime as rt

REMOVING = ('failed to remove container "c1": failed to set removing state for container '
            '"c1": container is already in removing state')


class ScriptedCri(rt.Cri):
    """A Cri whose calls answer from `script`: verb -> list of results (an exception is
    raised, anything else returned), consumed in order; every call is recorded."""

    def __init__(self, script: dict[str, list]):
        super().__init__(client=Path("/nonexistent"), endpoint="unix:///nonexistent")
        self.script, self.calls = script, []

    def call(self, verb, *args, stdin=None):
        self.calls.append((verb, *args))
        answer = self.script[verb].pop(0) if self.script.get(verb) else {}
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_a_removal_in_flight_is_waited_out(monkeypatch):
    monkeypatch.setattr(rt.time, "sleep", lambda s: None)
    cri = ScriptedCri({"pods": [{"items": [{"id": "sb1"}, {"id": "sb2"}]}],
                       "rmp": [rt.CriError("rmp", "Unknown", REMOVING),
                               rt.CriError("rmp", "Unknown", REMOVING), {}, {}]})
    cri.remove_all()
    assert [c for c in cri.calls if c[0] == "rmp"] == [("rmp", "sb1")] * 3 + [("rmp", "sb2")]


def test_a_sandbox_the_kubelet_finished_removing_is_not_an_error():
    cri = ScriptedCri({"pods": [{"items": [{"id": "sb1"}]}],
                       "stopp": [rt.CriError("stopp", "NotFound", "sandbox sb1 not found")]})
    cri.remove_all()
    assert ("rmp", "sb1") not in cri.calls


def test_a_removal_that_never_ends_is_reported():
    cri = ScriptedCri({"pods": [{"items": [{"id": "sb1"}]}],
                       "rmp": [rt.CriError("rmp", "Unknown", REMOVING)] * 1000})
    with pytest.raises(rt.CriError, match="already in removing state"):
        cri.remove_all(timeout=0)


def test_any_other_failure_is_reported_at_once():
    cri = ScriptedCri({"pods": [{"items": [{"id": "sb1"}]}],
                       "rmp": [rt.CriError("rmp", "Unknown", "disk on fire"), {}]})
    with pytest.raises(rt.CriError, match="disk on fire"):
        cri.remove_all()
    assert cri.calls.count(("rmp", "sb1")) == 1
