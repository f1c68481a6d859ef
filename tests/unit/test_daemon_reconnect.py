"""The node daemon's watch reconnect pause (cache.reconnect_pause: full jitter, bounded)
and the cache's last-change observable (WatchCache.changed, shown on /metrics), which
hack/bench_cluster.py times NAD propagation with."""
from __future__ import annotations

import random

from netattach.daemon import cache


def test_the_pause_is_drawn_over_the_whole_step_and_never_leaves_it():
    rng = random.Random(7)
    for failures in range(12):
        step = cache.BACKOFF[min(failures, len(cache.BACKOFF) - 1)]
        pauses = [cache.reconnect_pause(failures, rand=rng.random) for _ in range(400)]
        assert all(cache.MIN_PAUSE <= p <= step for p in pauses)
        # full jitter: spread over the step, not bunched at its end (the herd)
        assert min(pauses) < 0.1 * step + cache.MIN_PAUSE and max(pauses) > 0.9 * step


def test_the_bounds_hold_at_the_ends_of_the_random_range():
    assert cache.reconnect_pause(0, rand=lambda: 0.0) == cache.MIN_PAUSE
    assert cache.reconnect_pause(3, rand=lambda: 0.999999) <= cache.BACKOFF[3]
    assert cache.reconnect_pause(100, rand=lambda: 0.999999) <= cache.BACKOFF[-1]
    assert cache.reconnect_pause(-1, rand=lambda: 0.5) == cache.BACKOFF[0] * 0.5


def test_a_longer_retry_after_wins_and_is_capped():
    assert cache.reconnect_pause(0, retry_after=30.0, rand=lambda: 0.5) == 30.0
    assert cache.reconnect_pause(0, retry_after=10_000.0, rand=lambda: 0.5) == 600.0
    assert cache.reconnect_pause(8, retry_after=1.0, rand=lambda: 0.5) == 60.0


def test_changed_follows_stored_changes_and_not_bookmarks():
    c = cache.WatchCache(cache.NADS, "/x", None, lambda: None, cache.nad_trimmer(1024))
    assert c.changed == ("", 0.0)
    obj = {"metadata": {"namespace": "a", "name": "n", "resourceVersion": "41"},
           "spec": {"config": "{}"}}
    assert c._apply({"type": "ADDED", "object": obj}, "40") == "41"
    rv, at = c.changed
    assert rv == "41" and at > 0
    c._apply({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "99"}}}, "41")
    assert c.changed == ("41", at)
    c._apply({"type": "DELETED", "object": {**obj, "metadata": {
        **obj["metadata"], "resourceVersion": "42"}}}, "41")
    assert c.changed[0] == "42" and c.get("a", "n") is None


def test_metrics_show_the_last_change_of_each_cache():
    import threading
    from types import SimpleNamespace

    from prometheus_client import generate_latest

    from netattach.daemon import metrics

    nads = cache.WatchCache(cache.NADS, "/x", None, lambda: None, cache.nad_trimmer(1024))
    pods = cache.WatchCache(cache.PODS, "/y", None, lambda: None)
    nads._apply({"type": "ADDED", "object": {"metadata": {
        "namespace": "a", "name": "n", "resourceVersion": "1234"}}}, "1")
    d = SimpleNamespace(
        stats=SimpleNamespace(lock=threading.Lock(), requests={}, attachments=0, misses={},
                              refused={}, abandoned=0, observers=[]),
        in_flight=0, calls=SimpleNamespace(waiting=lambda: 0, saturated_for=lambda: 0.0),
        pods=pods, nads=nads,
        publisher=SimpleNamespace(sent=0, failed=0, dropped=0, pending=lambda: 0),
        hotplug=SimpleNamespace(lock=threading.Lock(), changes={}, queued=lambda: 0), dra=None,
        executor=SimpleNamespace(observers=[]))
    text = generate_latest(metrics.registry_for(d)).decode()
    kind = 'kind="NetworkAttachmentDefinition"'
    assert f"netattach_cache_changed_resource_version{{{kind}}} 1234.0" in text
    [line] = [x for x in text.splitlines()
              if x.startswith(f"netattach_cache_changed_timestamp_seconds{{{kind}}}")]
    assert abs(float(line.split()[1]) - nads.changed[1]) < 1e-3 * nads.changed[1]
    assert 'netattach_cache_changed_resource_version{kind="Pod"} NaN' in text


class _Resp:
    def __init__(self, lines, fail):
        self.status_code, self.lines, self.fail = 200, lines, fail

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def iter_lines(self):
        yield from self.lines
        raise self.fail


class _Http:
    """A client whose every WATCH delivers `lines`, then breaks (the API server went
    away); it records the params of each request and stops the cache at the third."""

    def __init__(self, cache_ref, lines):
        self.cache_ref, self.lines, self.calls = cache_ref, lines, []

    def __call__(self):
        return self

    def stream(self, method, path, params, read_timeout=None):
        self.calls.append(dict(params))
        if len(self.calls) >= 3:
            self.cache_ref[0].stop()
        return _Resp(self.lines if len(self.calls) == 1 else [], ConnectionError("gone"))

    def close(self):
        pass


def _run_watches(http: _Http) -> cache.WatchCache:
    """A NAD cache over `http`, its LIST at resourceVersion 100, run in this thread until
    `http` stops it (at its third WATCH, or as a test's client says)."""
    c = cache.WatchCache(cache.NADS, "/x", None, http, cache.nad_trimmer(1024))
    http.cache_ref.append(c)
    c._list = lambda: "100"  # type: ignore[method-assign]
    c._run()
    return c


def test_a_broken_watch_resumes_from_the_last_version_it_delivered(monkeypatch):
    """Not from the LIST's: every event since would come again, and after an API server
    restart that older version answers 410 and the daemon lists everything again."""
    import json

    monkeypatch.setattr(cache, "reconnect_pause", lambda *a, **k: 0.0)
    lines = [json.dumps({"type": "ADDED", "object": {"metadata": {
        "namespace": "a", "name": f"n{i}", "resourceVersion": str(100 + i)}}}) for i in (1, 2)]
    http = _Http([], lines)
    c = _run_watches(http)  # it returns once the third WATCH stopped it
    assert [p["resourceVersion"] for p in http.calls] == ["100", "102", "102"]
    assert c.get("a", "n2") is not None


def test_each_watch_draws_its_timeout_between_one_and_two_watch_seconds():
    """As client-go's reflector: a fleet of daemons that started together does not
    re-open its WATCHes in the same second every WATCH_SECONDS."""
    assert cache.watch_seconds(rand=lambda: 0.0) == cache.WATCH_SECONDS
    assert cache.watch_seconds(rand=lambda: 0.999999) == 2 * cache.WATCH_SECONDS - 1
    rng = random.Random(3)
    drawn = [cache.watch_seconds(rand=rng.random) for _ in range(400)]
    assert min(drawn) < 1.1 * cache.WATCH_SECONDS and max(drawn) > 1.9 * cache.WATCH_SECONDS


def test_the_watch_asks_for_a_drawn_timeout(monkeypatch):
    monkeypatch.setattr(cache, "reconnect_pause", lambda *a, **k: 0.0)
    draws = iter([0.0, 0.5, 0.25])
    drawn = cache.watch_seconds
    monkeypatch.setattr(cache, "watch_seconds", lambda: drawn(rand=lambda: next(draws)))
    http = _Http([], [])
    _run_watches(http)
    assert [p["timeoutSeconds"] for p in http.calls] == ["300", "450", "375"]


def test_the_step_never_exceeds_the_time_since_the_first_failure():
    """Full jitter makes failures come fast: by count alone a 15 s outage reaches the
    64 s step, and the last daemon is back a minute after the API server. Capped by the
    time since the first failure, each is back within about the outage's length."""
    top = lambda: 0.999999  # noqa: E731
    assert cache.reconnect_pause(7, rand=top) > 60  # by count alone
    assert cache.reconnect_pause(7, rand=top, elapsed=15.0) <= 15.0
    assert cache.reconnect_pause(7, rand=top, elapsed=500.0) <= cache.BACKOFF[7]
    # at the first failure (elapsed 0) the step is still the first one, not 0
    assert cache.reconnect_pause(0, rand=lambda: 0.5, elapsed=0.0) == cache.BACKOFF[0] * 0.5
    assert cache.reconnect_pause(3, rand=lambda: 0.5, elapsed=0.2) == cache.BACKOFF[0] * 0.5


def test_a_daemon_in_an_outage_is_back_within_about_its_length():
    """Simulated: failures every pause, the API server back at `outage` s; the daemon's
    next try after that is never more than the outage's length later."""
    rng = random.Random(11)
    for outage in (1.0, 5.0, 12.0, 40.0):
        for _ in range(200):
            t, failures = 0.0, 0
            while t < outage:
                t += cache.reconnect_pause(failures, rand=rng.random, elapsed=t)
                failures += 1
            assert t - outage <= max(outage, cache.BACKOFF[0])


def test_a_watch_cut_after_it_delivered_is_a_first_failure_again(monkeypatch):
    """A WATCH the server cuts in the middle of its answer (kube/http11.py: "ended inside
    its chunked body") after it delivered events is not one more failure of a row: the
    pause after each such cut stays the first step's, however many came before; WATCHes
    that fail before delivering anything still back off."""
    import json

    counts: list[int] = []
    monkeypatch.setattr(cache, "reconnect_pause",
                        lambda failures, *a, **k: counts.append(failures) or 0.0)

    class Delivering(_Http):
        def stream(self, method, path, params, read_timeout=None):
            self.calls.append(dict(params))
            n = len(self.calls)
            if n >= 6:
                self.cache_ref[0].stop()
            lines = [json.dumps({"type": "ADDED", "object": {"metadata": {
                "namespace": "a", "name": f"n{n}", "resourceVersion": str(100 + n)}}})]
            return _Resp(lines if n <= 3 else [], ConnectionError("cut"))

    _run_watches(Delivering([], []))
    assert counts == [0, 0, 0, 1, 2, 3]
