"""Bounded work and memory of the node daemon (issue 21), its pure parts: Events
aggregated as the kubelet's recorder aggregates them (daemon/events.py), the NAD
cache's trimming and config bound and its streamed LIST (daemon/cache.py). The daemon
itself under attack: tests/e2e/test_attack_daemon.py."""
from __future__ import annotations

import pytest

from netattach.daemon.events import EventRecorder, pod_object
from netattach.kube import KubeError

POD = {"namespace": "ns", "name": "p", "uid": "u1"}


class Sink:
    """The two Event writes of kube.Kube the recorder makes, recorded; `gone`: names the
    API server no longer has (404 on PATCH); `fail`: the next write's KubeError."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.gone: set[str] = set()
        self.fail: KubeError | None = None
        self.n = 0

    def _maybe_fail(self) -> None:
        if self.fail is not None:
            e, self.fail = self.fail, None
            raise e

    def post_event(self, involved, type_, reason, message, count=1, first_timestamp=None):
        self._maybe_fail()
        self.n += 1
        name = f"{involved['name']}.{self.n}"
        self.calls.append(("POST", name, involved["kind"], reason, message, count,
                           first_timestamp is not None))
        return name

    def patch_event(self, namespace, name, count, last_timestamp):
        self._maybe_fail()
        if name in self.gone:
            raise KubeError("not found", 404)
        self.calls.append(("PATCH", name, count))


def test_the_same_event_again_raises_the_count_of_the_first():
    """Same object, type, reason and message: one Event, its count raised by a PATCH.
    Another message, reason or object: another Event."""
    r, k = EventRecorder(), Sink()
    for _ in range(20):
        r.send(k, pod_object(POD), "Warning", "ErrorAddingNetwork", "child failed")
    r.send(k, pod_object(POD), "Warning", "ErrorAddingNetwork", "other message")
    r.send(k, pod_object({**POD, "uid": "u2"}), "Warning", "ErrorAddingNetwork", "child failed")
    posts = [c for c in k.calls if c[0] == "POST"]
    assert len(posts) == 3 and posts[0][1] == "p.1"
    assert [c for c in k.calls if c[0] == "PATCH"] == [("PATCH", "p.1", n) for n in range(2, 21)]
    assert (r.created, r.updated) == (3, 19)


def test_a_failed_write_counts_once_and_a_gone_event_is_made_anew_with_its_count():
    r, k = EventRecorder(), Sink()
    r.send(k, pod_object(POD), "Warning", "R", "m")
    k.fail = KubeError("HTTP 503", 503)
    with pytest.raises(KubeError):
        r.send(k, pod_object(POD), "Warning", "R", "m")
    r.send(k, pod_object(POD), "Warning", "R", "m")  # the publisher's retry
    assert k.calls[-1] == ("PATCH", "p.1", 2)
    k.gone.add("p.1")  # expired (event TTL)
    r.send(k, pod_object(POD), "Warning", "R", "m")
    assert k.calls[-1] == ("POST", "p.2", "Pod", "R", "m", 3, True)
    r.send(k, pod_object(POD), "Warning", "R", "m")
    assert k.calls[-1] == ("PATCH", "p.2", 4)


def test_the_recorder_remembers_a_bounded_number_of_events():
    """Least recently seen dropped first: memory bounded whatever the messages."""
    r, k = EventRecorder(max_entries=8), Sink()
    for i in range(1000):
        r.send(k, pod_object(POD), "Warning", "R", f"message {i}")
    assert len(r) == 8
    r.send(k, pod_object(POD), "Warning", "R", "message 999")  # still remembered
    r.send(k, pod_object(POD), "Warning", "R", "message 0")  # forgotten: a new Event
    assert k.calls[-2][0] == "PATCH" and k.calls[-1][0] == "POST"
