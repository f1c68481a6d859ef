"""Bounded work and memory of the node daemon (issue 21), its pure parts: Events
aggregated as the kubelet's recorder aggregates them (daemon/events.py), the NAD
cache's trimming and config bound and its streamed LIST (daemon/cache.py). The daemon
itself under attack: tests/e2e/test_attack_daemon.py."""
from __future__ import annotations

import collections
import json
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from netattach.daemon import cache, podapi
from netattach.daemon.events import EventRecorder, pod_object
from netattach.kube.client import KubeError
from netattach.node.devices import RESOURCE_NAME_ANNOTATION

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


# ---------------------------------------------------------------- the NAD cache

def nad(name: str, config, **annotations: str) -> dict:
    return {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}",
                         "resourceVersion": "7", "generation": 1,
                         "creationTimestamp": "2024-01-01T00:00:00Z",
                         "annotations": annotations, "managedFields": [{"manager": "k"}] * 20,
                         "labels": {"a": "b"}},
            "spec": {"config": config}}


def test_the_nad_cache_keeps_what_netattach_reads_and_refuses_a_config_over_the_bound():
    """Name, namespace, uid, resourceVersion, the resourceName annotation and
    spec.config; not managedFields, labels, last-applied-configuration. A config over
    the bound (UTF-8 bytes) is not kept: a note of its size and the bound is."""
    trim = cache.nad_trimmer(100)
    config = json.dumps({"cniVersion": "1.0.0", "type": "bridge"})
    small = nad("a", config, **{RESOURCE_NAME_ANNOTATION: "r/x",
                                "kubectl.kubernetes.io/last-applied-configuration": "x" * 5000})
    assert trim(small) == {"metadata": {"name": "a", "namespace": "ns", "uid": "u-a",
                                        "resourceVersion": "7",
                                        "annotations": {RESOURCE_NAME_ANNOTATION: "r/x"}},
                           "spec": {"config": config}}
    assert "annotations" not in trim(nad("b", config))["metadata"]
    assert trim(nad("c", "x" * 100))["spec"] == {"config": "x" * 100}  # at the bound: kept
    over = trim(nad("d", "é" * 51))  # 51 characters, 102 bytes
    assert over == {"metadata": {"name": "d", "namespace": "ns", "uid": "u-d",
                                 "resourceVersion": "7"},
                    cache.REFUSED: {"bytes": 102, "limit": 100}}
    assert cache.config_size({"type": "x"}) == len('{"type": "x"}')  # not a string: its JSON


class Synced:
    """A cache as CachedPodApi reads it: listed, holding `objects` (trimmed)."""

    def __init__(self, *objects: dict) -> None:
        self.synced = threading.Event()
        self.synced.set()
        self.objects = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objects}

    def get(self, namespace, name):
        return self.objects.get((namespace, name))


class LiveNads:
    def __init__(self, *objects: dict) -> None:
        self.objects = {o["metadata"]["name"]: o for o in objects}

    def get_nad(self, namespace, name):
        return self.objects.get(name)


def api_with(cached: list[dict], live: list[dict], bound: int) -> podapi.CachedPodApi:
    return podapi.CachedPodApi(Synced(), Synced(*cached), lambda: LiveNads(*live), "",  # type: ignore[arg-type]
                               lambda *a: None, None, "c1", collections.Counter(),  # type: ignore[arg-type]
                               threading.Lock(), None, bound)


def test_a_pod_selecting_a_refused_nad_gets_code_7_naming_it_and_the_bound():
    """From the cache (its note) and from a live read alike (a NAD not cached yet)."""
    trim = cache.nad_trimmer(100)
    api = api_with([trim(nad("big", "x" * 500)), trim(nad("ok", "{}"))],
                   [nad("late", "y" * 300), nad("late-ok", "{}")], 100)
    assert api.get_nad("ns", "ok")["spec"] == {"config": "{}"}
    assert api.get_nad("ns", "late-ok")["spec"] == {"config": "{}"}
    assert api.get_nad("ns", "missing") is None
    for name, size in (("big", 500), ("late", 300)):
        with pytest.raises(podapi.DelegateError) as e:
            api.get_nad("ns", name)
        assert e.value.code == 7 and e.value.network == f"ns/{name}"
        assert f"NetworkAttachmentDefinition ns/{name}" in e.value.msg
        assert f"{size} bytes" in e.value.msg and "bound of 100 bytes" in e.value.msg
        assert "--max-nad-config-bytes" in e.value.msg


def list_body(items: list[dict], continue_: str = "") -> bytes:
    meta = {"resourceVersion": "42", **({"continue": continue_} if continue_ else {})}
    return json.dumps({"kind": "NetworkAttachmentDefinitionList", "apiVersion": "v1",
                       "metadata": meta, "items": items}).encode()


@given(cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=30),
       n=st.integers(min_value=0, max_value=6), continue_=st.sampled_from(["", "tok"]))
def test_a_list_parsed_as_it_streams_gives_each_object_and_the_lists_metadata(cuts, n,
                                                                                continue_):
    """However the answer is cut into chunks: every item, in order, as json.loads reads
    it, and the list's resourceVersion and continue token."""
    items = [nad(f"n{i}", json.dumps({"type": "bridge", "mtu": 1500.5, "i": i}),
                 **{RESOURCE_NAME_ANNOTATION: "é"}) for i in range(n)]
    body = list_body(items, continue_)
    points = sorted({c % (len(body) + 1) for c in cuts} | {0, len(body)})
    chunks = [body[a:b] for a, b in zip(points, points[1:])]
    got: list[dict] = []
    meta = cache.parse_list(iter(chunks), got.append)
    assert got == json.loads(body)["items"]
    assert meta == {"resourceVersion": "42", **({"continue": "tok"} if continue_ else {})}


def test_a_list_holds_one_object_at_a_time():
    """Each object is handed over when it is complete, before the next one is read: the
    parser never holds the whole answer."""
    items = [nad(f"n{i}", "x" * 10_000) for i in range(20)]
    body = list_body(items)
    handed: list[int] = []
    read = 0

    def chunks():
        nonlocal read
        for i in range(0, len(body), 4096):
            read = i + 4096
            yield body[i:i + 4096]

    cache.parse_list(chunks(), lambda item: handed.append(read))
    assert len(handed) == 20
    size = len(body) // 20
    for i, at in enumerate(handed):  # object i handed over within a chunk of its end
        assert at <= (i + 1) * size + 2 * 4096


def test_a_list_that_is_not_json_is_a_value_error():
    with pytest.raises(ValueError):
        cache.parse_list(iter([b'{"items": [{"a": ', b"nope"]), lambda item: None)


def test_a_refused_watch_backs_off_to_minutes_and_honours_retry_after():
    """The reconnect pauses grow to two minutes, and a Retry-After longer than the
    pause wins (issue 21: an overloaded API server is not hit every 8 s per node)."""
    from netattach.daemon import cache

    class Resp:
        status_code = 429
        headers = {"Retry-After": "90"}
        text = "too many requests"

        def read(self):
            return b""

    refused = cache._refused("WATCH /api/v1/pods", Resp())
    assert refused.retry_after == 90.0 and "HTTP 429" in str(refused)
    Resp.headers = {}
    assert cache._refused("LIST x", Resp()).retry_after is None
    assert cache.BACKOFF[-1] >= 120 and list(cache.BACKOFF) == sorted(cache.BACKOFF)
