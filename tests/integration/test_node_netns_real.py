"""node/netns.py entering a network namespace (setns(2) needs root, as the integration
tier has): no thread is left in another namespace (the namespace entered is the test's
own)."""
from __future__ import annotations

import os
import threading

import pytest

from netattach.node import netns

pytestmark = pytest.mark.integration

OWN = "/proc/self/ns/net"


def test_inside_switches_back_after_an_exception():
    before = os.readlink("/proc/thread-self/ns/net")
    with pytest.raises(KeyError):
        with netns.inside(OWN):
            raise KeyError("x")
    assert os.readlink("/proc/thread-self/ns/net") == before


def test_run_inside_runs_in_a_thread_of_its_own_and_hands_back_its_answer_and_errors():
    seen = []
    assert netns.run_inside(OWN, lambda: seen.append(threading.current_thread().name) or 7,
                            "netns-test") == 7
    assert seen == ["netns-test"]
    with pytest.raises(ZeroDivisionError):
        netns.run_inside(OWN, lambda: 1 // 0)
