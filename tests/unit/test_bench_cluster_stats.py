"""The statistics and table of `make bench-cluster` (hack/benchlib/clusterstats.py): what
the audit log says of each daemon (requests in a window, WATCHes, when it is back after a
restart, whether its NAD WATCH was open at a create), and the table with the ratios
netattach / Multus."""
from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack"))

from benchlib import clusterstats as cs  # noqa: E402

A, B = "system:serviceaccount:kube-system:a", "system:serviceaccount:kube-system:b"
T0 = cs.timestamp("2026-11-28T08:00:00Z")


def ev(audit_id, who, verb, stage, at, code=200, res="pods", ended=None):
    def stamp(t):
        return f"2026-11-28T08:00:{t:09.6f}Z"
    return {"auditID": audit_id, "user": {"username": who}, "verb": verb, "stage": stage,
            "objectRef": {"resource": res}, "responseStatus": {"code": code},
            "requestReceivedTimestamp": stamp(at), "stageTimestamp": stamp(ended or at)}


def test_timestamps_are_read_with_their_microseconds():
    assert cs.timestamp("2026-11-28T08:00:01.250000Z") - T0 == 1.25


def test_requests_count_each_request_once_within_the_window():
    events = [ev("1", A, "watch", "ResponseStarted", 1), ev("1", A, "watch", "ResponseComplete", 1),
              ev("2", A, "list", "ResponseComplete", 2), ev("3", B, "get", "ResponseComplete", 9),
              ev("4", "someone-else", "get", "ResponseComplete", 2)]
    assert cs.requests_per_user(events, [A, B], T0, T0 + 5) == {A: 2, B: 0}
    assert cs.watches_per_user(events, [A, B], T0, T0 + 5) == {A: 1, B: 0}


def test_a_daemon_is_back_when_it_holds_both_watches_open():
    nads = "network-attachment-definitions"
    events = [
        # a: a pods WATCH ended at once (410 in the stream), then one that stays open
        ev("1", A, "watch", "ResponseStarted", 2), ev("1", A, "watch", "ResponseComplete", 2),
        ev("2", A, "list", "ResponseComplete", 3),
        ev("3", A, "watch", "ResponseStarted", 3.5),
        ev("4", A, "watch", "ResponseStarted", 2.5, res=nads),
        # b: its NAD WATCH refused (429), pods open: not back
        ev("5", B, "watch", "ResponseStarted", 2), ev("6", B, "watch", "ResponseStarted", 2,
                                                       code=429, res=nads),
        # before the restart: does not count
        ev("7", B, "watch", "ResponseStarted", 0.5, res=nads),
    ]
    back = cs.reconnected(events, [A, B], T0 + 1, T0 + 10)
    assert back == {A: T0 + 3.5, B: None}
    # too fresh to tell whether it stays open
    assert cs.reconnected(events, [A], T0 + 1, T0 + 4)[A] is None
    assert cs.first_requests(events, [A, B], T0 + 1) == {A: T0 + 2, B: T0 + 2}


def test_a_watch_open_across_a_create_was_sent_it():
    nads = "network-attachment-definitions"
    events = [ev("1", A, "watch", "ResponseStarted", 1, res=nads),
              ev("2", B, "watch", "ResponseStarted", 1, res=nads),
              ev("2", B, "watch", "ResponseComplete", 1, res=nads, ended=3)]
    assert cs.watch_open_at(events, [A, B], T0 + 2) == {A: True, B: True}
    assert cs.watch_open_at(events, [A, B], T0 + 4) == {A: True, B: False}
    assert cs.watch_open_at(events, [A, B], T0 + 0.5) == {A: False, B: False}


def test_spread_of_the_known_times_and_the_missing():
    assert cs.spread([T0 + 3, None, T0 + 1], T0) == {
        "first": 1.0, "last": 3.0, "spread": 2.0, "missing": 1}
    assert cs.spread([None], T0)["spread"] is None


def subject(cpu: float, p99: float | None, why: str | None = None) -> dict:
    r = {"daemons": 2, "idle": {"api_cpu_per_daemon": cpu, "requests_per_s_per_daemon": 0.0,
                                "api_cpu_slope_per_daemon": cpu / 2},
         "churn": {"api_cpu_per_daemon": 2 * cpu, "requests_per_s_per_daemon": 0.5,
                   "api_cpu_slope_per_daemon": cpu},
         "shared": {"idle": cpu / 4, "churn": 3 * cpu},
         "watches_per_daemon": 2.0, "propagation": {"p50": p99, "p99": p99},
         "restart": {"spread": 1.0, "last": 2.0, "api_cpu": 3.0}, "rss": {"mib": 40.0}}
    if why:
        r["propagation"].update(p50_na=why, p99_na=why)
    return r


def test_the_table_has_a_row_per_subject_and_the_ratios():
    text = cs.table({"machine": {"date": "today"}, "params": {"daemons": 2},
                     "subjects": {"netattach": subject(0.01, 0.2),
                                  "multus": subject(0.02, None, "no observable")}})
    rows = [r for r in text.splitlines() if r.startswith("| ") and not r.startswith("| -")]
    assert len(rows) == 4  # head, netattach, Multus, ratio
    head = [c.strip() for c in rows[0].strip("|").split("|")]
    ratio = [c.strip() for c in rows[3].strip("|").split("|")]
    col = dict(zip(head, ratio, strict=True))
    assert col["API CPU s/daemon idle"] == "0.50x" and col["req/s/daemon churn"] == "1.00x"
    assert col["API CPU s/added daemon churn"] == "0.50x"
    assert col["API CPU s/daemon churn, one API server"] == "0.50x"
    assert col["req/s/daemon idle"] == ""  # 0 / 0: no ratio
    negative = cs.table({"machine": {}, "params": {"daemons": 2}, "subjects": {
        "netattach": subject(-0.01, 0.2), "multus": subject(-0.02, 0.2)}})
    cells = [c.strip() for c in negative.splitlines()[-1].strip("|").split("|")]
    assert dict(zip(head, cells, strict=True))["API CPU s/daemon churn, one API server"] == ""
    assert col["NAD propagation p99 s"] == ""
    multus = dict(zip(head, [c.strip() for c in rows[2].strip("|").split("|")], strict=True))
    assert multus["NAD propagation p99 s"] == "n/a (no observable)"
    netattach = dict(zip(head, [c.strip() for c in rows[1].strip("|").split("|")], strict=True))
    assert all(netattach[h] for h in head)


def test_over_rounds_takes_each_columns_median_and_keeps_every_round():
    rounds = [{"daemons": 50, "idle": {"api_cpu_per_daemon": v}, "rss": {"mib": m},
               "propagation": {"p99_na": "no observable"}}
              for v, m in ((0.3, 47.0), (0.1, 48.0), (0.2, 46.0))]
    out = cs.over_rounds(rounds)
    assert out["idle"]["api_cpu_per_daemon"] == 0.2 and out["rss"]["mib"] == 47.0
    assert out["propagation"] == {"p99_na": "no observable"} and out["rounds"] == rounds
    assert rounds[0]["idle"]["api_cpu_per_daemon"] == 0.3  # the rounds are not changed


def test_the_slope_is_cpu_per_added_daemon_over_the_full_window():
    """Run.slope: the API server's CPU rate with every daemon minus its rate with the
    first half, per added daemon, over the full window's length."""
    import bench_cluster
    run = bench_cluster.Run.__new__(bench_cluster.Run)
    run.fleet = types.SimpleNamespace(n=50)
    run.r = {"idle_half": {"api_cpu": 1.0, "seconds": 50.0},
             "idle": {"api_cpu": 1.8, "seconds": 60.0}}
    run.slope("idle", 25)
    # 0.03 - 0.02 CPU s/s, times 60 s, over 25 added daemons
    assert run.r["idle"]["api_cpu_slope_per_daemon"] == pytest.approx(0.024)


def test_the_slope_takes_the_mean_of_the_half_windows_before_and_after():
    """Run.slope with `<name>_half2`: a drift of the API server's own CPU that is linear
    in time cancels out (half, all, half)."""
    import bench_cluster
    run = bench_cluster.Run.__new__(bench_cluster.Run)
    run.fleet = types.SimpleNamespace(n=50)
    drift = 0.01  # CPU s/s lost per window by the API server's own work
    run.r = {"churn_half": {"api_cpu": (0.05 + 2 * drift) * 60, "seconds": 60.0},
             "churn": {"api_cpu": (0.08 + drift) * 60, "seconds": 60.0},
             "churn_half2": {"api_cpu": 0.05 * 60, "seconds": 60.0}}
    run.slope("churn", 25)
    # 0.03 CPU s/s more with 25 more daemons, times 60 s, over 25: the drift is gone
    assert run.r["churn"]["api_cpu_slope_per_daemon"] == pytest.approx(0.072)


def test_the_one_api_server_order_rotates_so_each_takes_every_place():
    import bench_cluster
    orders = [bench_cluster.shared_order(["netattach", "multus"], r) for r in range(3)]
    assert orders == [["netattach", "multus", "none"], ["multus", "none", "netattach"],
                      ["none", "netattach", "multus"]]
    assert bench_cluster.shared_order(["netattach", "multus"], 3) == orders[0]


def test_one_api_server_cpu_per_daemon_cancels_a_linear_drift():
    """Per round the subject's window minus that round's no-daemon window, over N, the
    mean over a whole rotation: the API server's own CPU rising by the same step from
    window to window (in the rotated order) does not enter it."""
    import bench_cluster
    keys, step, own = ["netattach", "multus"], 0.3, {"netattach": 1.0, "multus": 2.0}
    rounds, t = [], 0
    for rnd in range(3):
        got = {}
        for key in bench_cluster.shared_order(keys, rnd):
            got[key] = {"churn": 3.0 + step * t + own.get(key, 0.0) * 50}
            t += 1
        rounds.append(got)
    for key in keys:
        assert bench_cluster.shared_per_daemon(rounds, key, "churn", 50) == \
            pytest.approx(own[key])
