"""Pure statistics of the simulated cluster bench (hack/bench_cluster.py): what the API
server's audit log says of each daemon (requests in a window, WATCHes opened, when it
came back after a restart, whether its NAD WATCH was open when a NAD was created),
percentiles, and the markdown table with the netattach / Multus ratios.

Audit events are audit.k8s.io/v1 Event dicts (netattach_testbed.cluster.AUDIT_POLICY:
stages ResponseStarted, for WATCHes, and ResponseComplete). Times are epoch seconds.
"""
from __future__ import annotations

import copy
import datetime as dt
import statistics
from collections.abc import Callable, Iterable
from typing import Any

from .podstartup import percentile

__all__ = ["percentile"]  # the bench's nearest-rank percentile, used with these

Event = dict[str, Any]
NAD_KIND = "NetworkAttachmentDefinition"


def timestamp(text: str) -> float:
    """Epoch seconds of an audit timestamp ("2026-11-28T07:48:41.123456Z")."""
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def received(event: Event) -> float:
    return timestamp(event["requestReceivedTimestamp"])


def user(event: Event) -> str:
    return (event.get("user") or {}).get("username", "")


def resource(event: Event) -> str:
    return (event.get("objectRef") or {}).get("resource", "")


def code(event: Event) -> int:
    return int((event.get("responseStatus") or {}).get("code") or 0)


def requests_per_user(events: Iterable[Event], users: Iterable[str], start: float,
                      end: float) -> dict[str, int]:
    """Requests of each of `users` received in [start, end): one per auditID (a WATCH
    has two events, ResponseStarted and ResponseComplete)."""
    seen: dict[str, set[str]] = {u: set() for u in users}
    for e in events:
        ids = seen.get(user(e))
        if ids is not None and start <= received(e) < end:
            ids.add(e["auditID"])
    return {u: len(ids) for u, ids in seen.items()}


def watches_per_user(events: Iterable[Event], users: Iterable[str], start: float,
                     end: float) -> dict[str, int]:
    """WATCHes each of `users` opened (ResponseStarted with 200) in [start, end)."""
    out = dict.fromkeys(users, 0)
    for e in events:
        u = user(e)
        if (u in out and e.get("verb") == "watch" and e.get("stage") == "ResponseStarted"
                and code(e) == 200 and start <= received(e) < end):
            out[u] += 1
    return out


def reconnected(events: Iterable[Event], users: Iterable[str], since: float, now: float,
                min_age: float = 1.0,
                resources: Iterable[str] = ("pods", "network-attachment-definitions")
                ) -> dict[str, float | None]:
    """When each of `users` had every one of `resources` watched again after `since` (an
    API server restart), as of `now`: for each resource, the start (ResponseStarted, 200)
    of the WATCH it holds open now (no ResponseComplete), received after `since` and at
    least `min_age` s before `now` (a WATCH the API server answers 200 and then ends with
    a 410 error event, "too old resource version", ends within milliseconds: that daemon
    is not back, it lists again); the latest over the resources, None if one has none."""
    wanted = tuple(resources)
    started: dict[str, tuple[str, str, float]] = {}
    ended: set[str] = set()
    for e in events:
        if e.get("verb") != "watch":
            continue
        if e.get("stage") == "ResponseComplete":
            ended.add(e["auditID"])
        elif e.get("stage") == "ResponseStarted" and code(e) == 200:
            started[e["auditID"]] = (user(e), resource(e), received(e))
    open_: dict[str, dict[str, float]] = {u: {} for u in users}
    for audit_id, (u, r, t) in started.items():
        per = open_.get(u)
        if (per is not None and r in wanted and audit_id not in ended
                and since <= t <= now - min_age):
            per[r] = max(per.get(r, t), t)
    return {u: max(per.values()) if len(per) == len(wanted) else None
            for u, per in open_.items()}


def first_requests(events: Iterable[Event], users: Iterable[str],
                   since: float) -> dict[str, float | None]:
    """The first request of each of `users` received after `since` (whatever its
    answer): when its daemon first tried again."""
    out: dict[str, float | None] = dict.fromkeys(users)
    for e in events:
        u = user(e)
        if u in out:
            t = received(e)
            if t >= since and (out[u] is None or t < out[u]):  # type: ignore[operator]
                out[u] = t
    return out


def watch_open_at(events: Iterable[Event], users: Iterable[str], at: float,
                  res: str = "network-attachment-definitions") -> dict[str, bool]:
    """Whether each of `users` had a WATCH of `res` established (ResponseStarted 200)
    before `at` and not ended (no ResponseComplete of the same auditID) before `at`:
    the API server then sends it every change made at `at`."""
    started: dict[str, tuple[str, float]] = {}
    ended: dict[str, float] = {}
    for e in events:
        if e.get("verb") != "watch" or resource(e) != res:
            continue
        if e.get("stage") == "ResponseStarted" and code(e) == 200:
            started[e["auditID"]] = (user(e), received(e))
        elif e.get("stage") == "ResponseComplete":
            ended[e["auditID"]] = timestamp(e.get("stageTimestamp")
                                            or e["requestReceivedTimestamp"])
    out = dict.fromkeys(users, False)
    for audit_id, (u, t) in started.items():
        if u in out and t < at and ended.get(audit_id, float("inf")) >= at:
            out[u] = True
    return out


def spread(times: Iterable[float | None], origin: float) -> dict[str, float | None]:
    """Of per-daemon times after `origin`: first, last (seconds after `origin`),
    spread (last - first), and how many are missing; None where nothing is known."""
    values = list(times)
    known = sorted(t - origin for t in values if t is not None)
    missing = sum(1 for t in values if t is None)
    if not known:
        return {"first": None, "last": None, "spread": None, "missing": missing}
    return {"first": known[0], "last": known[-1], "spread": known[-1] - known[0],
            "missing": missing}


# ---------------------------------------------------------------- the table

SUBJECTS = ("netattach", "multus")
LABELS = {"netattach": "netattach thick", "multus": "Multus thick"}


def _get(d: dict[str, Any], path: str) -> Any:
    for key in path.split("."):
        if not isinstance(d, dict) or key not in d:
            return None
        d = d[key]
    return d


def _num(fmt: str) -> Callable[[Any], str]:
    return lambda v: fmt.format(v)


# (column header, path in a subject's results, format, ratio?)
COLUMNS: tuple[tuple[str, str, Callable[[Any], str], bool], ...] = (
    ("daemons", "daemons", str, False),
    ("API CPU s/daemon idle", "idle.api_cpu_per_daemon", _num("{:.4f}"), True),
    ("API CPU s/daemon churn", "churn.api_cpu_per_daemon", _num("{:.4f}"), True),
    ("API CPU s/daemon idle, one API server", "shared.idle", _num("{:.4f}"), True),
    ("API CPU s/daemon churn, one API server", "shared.churn", _num("{:.4f}"), True),
    ("API CPU s/added daemon idle", "idle.api_cpu_slope_per_daemon", _num("{:.4f}"), True),
    ("API CPU s/added daemon churn", "churn.api_cpu_slope_per_daemon", _num("{:.4f}"), True),
    ("req/s/daemon idle", "idle.requests_per_s_per_daemon", _num("{:.3f}"), True),
    ("req/s/daemon churn", "churn.requests_per_s_per_daemon", _num("{:.3f}"), True),
    ("watches/daemon", "watches_per_daemon", _num("{:.2f}"), True),
    ("NAD propagation p50 s", "propagation.p50", _num("{:.3f}"), True),
    ("NAD propagation p99 s", "propagation.p99", _num("{:.3f}"), True),
    ("reconnect spread s", "restart.spread", _num("{:.2f}"), False),
    ("reconnect finished s", "restart.last", _num("{:.2f}"), True),
    ("herd API CPU s", "restart.api_cpu", _num("{:.2f}"), True),
    ("RSS MiB (pods/NADs)", "rss.mib", _num("{:.1f}"), True),
)


def over_rounds(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One subject's results over interleaved rounds: the first round's, with each
    table column's value replaced by its median over the rounds that have one, and every
    round kept under "rounds" (the JSON's raw numbers)."""
    out = copy.deepcopy(rounds[0])
    for _, path, _, _ in COLUMNS:
        values = [v for r in rounds if isinstance(v := _get(r, path), (int, float))]
        if values:
            *parents, last = path.split(".")
            d = out
            for key in parents:
                d = d.setdefault(key, {})
            d[last] = statistics.median(values)
    out["rounds"] = rounds
    return out


def cell(results: dict[str, Any], path: str, fmt: Callable[[Any], str]) -> str:
    """A cell: the formatted value, "n/a (<why>)" when the subject says why it has
    none (`<path>_na`), else empty."""
    value = _get(results, path)
    if value is not None:
        return fmt(value)
    why = _get(results, path + "_na")
    return f"n/a ({why})" if why else ""


def table(results: dict[str, Any]) -> str:
    """The markdown table of one run: a row per subject, then the ratio netattach /
    Multus of each column that has one (empty when either side has no value)."""
    subjects = [k for k in SUBJECTS if k in results["subjects"]]
    head = ["subject", *(c[0] for c in COLUMNS)]
    rows = [head, ["---"] * len(head)]
    for k in subjects:
        r = results["subjects"][k]
        rows.append([LABELS[k], *(cell(r, path, fmt) for _, path, fmt, _ in COLUMNS)])
    if {"netattach", "multus"} <= set(subjects):
        a, b = results["subjects"]["netattach"], results["subjects"]["multus"]
        ratio = ["netattach / Multus"]
        for _, path, _, has in COLUMNS:
            va, vb = _get(a, path), _get(b, path)
            # no ratio of a value at or below 0 (a per-daemon CPU lost in the noise)
            ratio.append(f"{va / vb:.2f}x" if has and isinstance(va, (int, float))
                         and isinstance(vb, (int, float)) and vb > 0 and va >= 0 else "")
        rows.append(ratio)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    body = "\n".join("| " + " | ".join(c.ljust(w) if c != "---" else "-" * w
                                       for c, w in zip(r, widths, strict=True)) + " |"
                     for r in rows)
    m = results.get("machine", {})
    p = results.get("params", {})
    rounds = p.get("rounds", 1)
    lines = [f"netattach bench-cluster, {m.get('date', '?')}: {p.get('daemons', '?')} daemons "
             f"per subject, median of {rounds} interleaved round{'s' * (rounds != 1)}, each "
             f"subject on a fresh API server; then {p.get('shared_rounds', 0)} rounds of "
             f"both and none on one API server; idle {p.get('idle', '?')} s, "
             f"churn {p.get('churn', '?')} s at {p.get('churn_rate', 1)}/s, "
             f"{p.get('propagation', '?')} NADs timed, API "
             f"server down {p.get('down', '?')} s, RSS at {p.get('pods', '?')} pods and "
             f"{p.get('nads', '?')} NADs; {m.get('nproc', '?')} CPUs ({m.get('cpu', '?')}), "
             f"{m.get('kernel', '?')}; Multus {results.get('multus_version', '?')}", "", body]
    return "\n".join(lines)
