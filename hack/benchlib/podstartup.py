"""Pod startup on the real node (`make bench-node`, hack/bench_node.py): what one burst
of pods measured, the statistics over rounds and the table. No node here: the harness
feeds these with what it observed, so they are tested on their own (tests/unit).

Two clocks, both kept:
  * the watch clock: the harness's wall time when it sent each pod's create (delete)
    and when its pod watch first saw the pod Ready (gone): millisecond resolution,
    what the table's latencies are;
  * the API's own times: the pod's creationTimestamp and its PodReadyToStartContainers
    and Ready conditions' lastTransitionTime, at the API's resolution (1 s), a cross
    check that the watch clock measured the node and not the harness.
"""
from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field
from typing import Any

# the subjects, in the order of a round and of the table's columns
SUBJECTS = ("floor", "netattach_thin", "netattach_thick", "multus_thin", "multus_thick")
# (netattach, Multus) pairs the ratios compare
RATIOS = (("netattach_thin", "multus_thin"), ("netattach_thick", "multus_thick"))


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0 < q <= 100), nearest rank: a value that was measured."""
    if not values:
        raise ValueError("no values")
    s = sorted(values)
    return s[max(0, math.ceil(q / 100 * len(s)) - 1)]


def api_time(stamp: str | None) -> float | None:
    """An API timestamp ("2026-11-28T06:45:44Z") as epoch seconds."""
    if not stamp:
        return None
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def condition_time(pod: dict[str, Any], kind: str) -> float | None:
    """lastTransitionTime of the pod's condition `kind` when it is True (epoch s)."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind and c.get("status") == "True":
            return api_time(c.get("lastTransitionTime"))
    return None


@dataclass
class PodTimes:
    """One pod's timeline (epoch seconds; None: not seen)."""
    name: str
    create_sent: float
    ready_seen: float | None = None
    delete_sent: float | None = None
    gone_seen: float | None = None
    api_created: float | None = None
    api_sandbox_ready: float | None = None   # PodReadyToStartContainers
    api_ready: float | None = None

    @property
    def startup(self) -> float:
        """creation -> Ready (watch clock), s."""
        assert self.ready_seen is not None, self.name
        return self.ready_seen - self.create_sent

    @property
    def deletion(self) -> float:
        """deletion -> gone from the API (the kubelet stopped its sandbox: CNI DEL done), s."""
        assert self.gone_seen is not None and self.delete_sent is not None, self.name
        return self.gone_seen - self.delete_sent

    @property
    def api_startup(self) -> float | None:
        """creationTimestamp -> Ready's lastTransitionTime (API clock, 1 s resolution)."""
        if self.api_created is None or self.api_ready is None:
            return None
        return self.api_ready - self.api_created

    @property
    def api_sandbox(self) -> float | None:
        """creationTimestamp -> PodReadyToStartContainers (sandbox and network up)."""
        if self.api_created is None or self.api_sandbox_ready is None:
            return None
        return self.api_sandbox_ready - self.api_created


@dataclass
class Burst:
    """One burst of `size` pods by one subject in one round: the pods' timelines, the
    CPU (s) the node's CNI execs (containerd's reaped children) and the subject's
    daemon spent over the whole burst (ADD and DEL), the part of the daemon's spent by
    the delegates it ran (its reaped children), and the runtime's CNI calls over
    it as containerd timed them: {"set_up_pod": (calls, total s), "tear_down_pod":
    ...} (RealNode.cni_operations, the difference over the burst)."""
    subject: str
    size: int
    round: int
    pods: list[PodTimes] = field(default_factory=list)
    cni_exec_cpu: float = 0.0
    daemon_cpu: float = 0.0
    daemon_child_cpu: float = 0.0
    runtime_cni: dict[str, tuple[int, float]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"subject": self.subject, "size": self.size, "round": self.round,
                "cni_exec_cpu": self.cni_exec_cpu, "daemon_cpu": self.daemon_cpu,
                "daemon_child_cpu": self.daemon_child_cpu,
                "runtime_cni": {op: list(v) for op, v in self.runtime_cni.items()},
                "pods": [{**vars(p), "startup": p.startup, "deletion": p.deletion,
                          "api_startup": p.api_startup, "api_sandbox": p.api_sandbox}
                         for p in self.pods]}


def pool(bursts: list[Burst], subject: str, size: int) -> list[Burst]:
    return [b for b in bursts if b.subject == subject and b.size == size]


def stats(bursts: list[Burst], subject: str, size: int) -> dict[str, float] | None:
    """p50/p90/p99 of startup and deletion over every pod of every round of
    (subject, size), and CPU per pod; None when nothing was measured."""
    bs = pool(bursts, subject, size)
    pods = [p for b in bs for p in b.pods]
    if not pods:
        return None
    up = [p.startup for p in pods]
    down = [p.deletion for p in pods]
    api = [v for p in pods if (v := p.api_startup) is not None]
    return {"pods": len(pods),
            "p50": percentile(up, 50), "p90": percentile(up, 90), "p99": percentile(up, 99),
            "del_p50": percentile(down, 50), "del_p99": percentile(down, 99),
            "api_p50": percentile(api, 50) if api else math.nan,
            "cni_cpu_per_pod": sum(b.cni_exec_cpu for b in bs) / len(pods),
            "daemon_cpu_per_pod": sum(b.daemon_cpu for b in bs) / len(pods),
            "delegate_cpu_per_pod": sum(b.daemon_child_cpu for b in bs) / len(pods),
            "runtime_add": _mean_call(bs, "set_up_pod"),
            "runtime_del": _mean_call(bs, "tear_down_pod")}


def _mean_call(bursts: list[Burst], op: str) -> float:
    """The mean seconds of the runtime's CNI operation `op` over `bursts`; NaN when
    none was timed."""
    n = sum(b.runtime_cni.get(op, (0, 0.0))[0] for b in bursts)
    total = sum(b.runtime_cni.get(op, (0, 0.0))[1] for b in bursts)
    return total / n if n else math.nan


def _ms(v: float) -> str:
    return "" if math.isnan(v) else f"{v * 1000:.0f}"


def ratio_columns(per: dict[str, dict[str, float] | None], subject: str) -> tuple[str, str]:
    """The row of netattach subject `subject`'s startup p50 and p99 over its Multus
    pair's (RATIOS) as "0.75x"; empty for a Multus subject, the floor, or when the pair
    did not run."""
    pair = dict(RATIOS).get(subject)
    a, b = per.get(subject), per.get(pair) if pair else None
    if not a or not b:
        return "", ""
    return f"{a['p50'] / b['p50']:.2f}x", f"{a['p99'] / b['p99']:.2f}x"


def table(bursts: list[Burst]) -> str:
    """The markdown table: per burst size, one row per subject (latencies in ms), its
    overhead over the floor, and in netattach's rows its startup ratios to the same
    mode of Multus; below, each ratio with the overhead's."""
    sizes = sorted({b.size for b in bursts})
    subjects = [s for s in SUBJECTS if any(b.subject == s for b in bursts)]
    lines = ["| burst | subject | pods | startup p50 | p90 | p99 | over floor p50 | "
             "/ Multus p50 | / Multus p99 | "
             "delete p50 | p99 | API startup p50 (1 s res.) | runtime ADD mean | "
             "runtime DEL mean | CNI exec CPU/pod | daemon CPU/pod | of which delegates |",
             "|" + "---|" * 17]
    ratio_lines: list[str] = []
    for size in sizes:
        floor = stats(bursts, "floor", size)
        per = {s: stats(bursts, s, size) for s in subjects}
        for s in subjects:
            st = per[s]
            if st is None:
                continue
            over = _ms(st["p50"] - floor["p50"]) if floor and s != "floor" else ""
            r50, r99 = ratio_columns(per, s)
            lines.append(
                f"| {size} | {s} | {st['pods']:.0f} | {_ms(st['p50'])} | {_ms(st['p90'])} | "
                f"{_ms(st['p99'])} | {over} | {r50} | {r99} | "
                f"{_ms(st['del_p50'])} | {_ms(st['del_p99'])} | "
                f"{_ms(st['api_p50'])} | {_ms(st['runtime_add'])} | "
                f"{_ms(st['runtime_del'])} | {_ms(st['cni_cpu_per_pod'])} | "
                f"{_ms(st['daemon_cpu_per_pod'])} | "
                f"{_ms(st['delegate_cpu_per_pod']) if st['daemon_cpu_per_pod'] else ''} |")
        for a, b in RATIOS:
            sa, sb = per.get(a), per.get(b)
            if sa and sb:
                text = (f"burst {size}: {a} / {b}: p50 {sa['p50'] / sb['p50']:.2f}x, "
                        f"p99 {sa['p99'] / sb['p99']:.2f}x")
                if floor:
                    oa, ob = sa["p50"] - floor["p50"], sb["p50"] - floor["p50"]
                    text += f", overhead over floor {oa / ob:.2f}x" if ob > 0 else ""
                ratio_lines.append(f"- {text}")
    out = "\n".join(lines) + ("\n\nLatencies and CPU in ms (CPU: per pod, ADD and DEL). "
                               "runtime ADD (DEL) mean: containerd's own time of its CNI "
                               "set-up (tear-down) calls.\n")
    if ratio_lines:
        out += "\n" + "\n".join(ratio_lines) + "\n"
    else:
        out += "\nNo ratio: no netattach subject ran with Multus in the same mode.\n"
    return out


def plot(bursts: list[Burst], path: Any, title: str) -> None:
    """A PNG at `path`: one panel per burst size, the startup latency (creation -> Ready,
    s) of every pod of every round as a box per subject (whiskers at p1 and p99, the
    points beyond drawn), the floor first. matplotlib is a bench-only dependency
    (`make bench-node` installs it); imported here only."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted({b.size for b in bursts})
    subjects = [s for s in SUBJECTS if any(b.subject == s for b in bursts)]
    fig, axes = plt.subplots(1, len(sizes), figsize=(4.2 * len(sizes), 4.6), squeeze=False)
    for ax, size in zip(axes[0], sizes, strict=True):
        data = [[p.startup for b in pool(bursts, s, size) for p in b.pods] for s in subjects]
        shown = [(s, d) for s, d in zip(subjects, data, strict=True) if d]
        ax.boxplot([d for _, d in shown], whis=(1, 99), showfliers=True)
        ax.set_xticks(range(1, len(shown) + 1),
                      [s.replace("_", "\n") for s, _ in shown], fontsize=8)
        ax.set_title(f"burst of {size} pod{'s' * (size > 1)}")
        ax.set_ylabel("creation -> Ready (s)")
        ax.set_ylim(bottom=0)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
