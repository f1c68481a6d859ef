"""The bench's table: one column per subject, the ratios netattach / Multus (thin to
thin, thick to thick), as markdown (printed, and written beside the JSON results)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .measure import line_fit, median, p90

COLUMNS = ("netattach_thin", "netattach_thick", "multus_thin", "multus_thick", "floor")
RATIOS = (("netattach_thin", "multus_thin"), ("netattach_thick", "multus_thick"))
# which executable's VERSION exec goes in which column
VERSION_EXE = {"netattach_thin": "netattach", "netattach_thick": "netattach-shim",
               "multus_thin": "multus", "multus_thick": "multus-shim", "floor": "bridge"}


def ms(values: list[float]) -> str:
    return f"{median(values) * 1000:.0f} ms (p90 {p90(values) * 1000:.0f})"


def secs(values: list[float]) -> str:
    return f"{median(values):.2f} s (p90 {p90(values):.2f})"


def cpu(values: list[float]) -> str:
    return f"{median(values) * 1000:.0f} ms"


def mib(kib: float) -> str:
    return f"{kib / 1024:.0f} MiB"


def fit(sweep: dict[Any, list[float]]) -> tuple[float, float]:
    """(fixed cost, cost per network) in s: the least-squares line through the medians."""
    return line_fit([(float(n), median(v)) for n, v in sweep.items()])


def table(results: dict[str, Any]) -> str:
    """The markdown table of one run's results, with a line on the machine and date."""
    subjects = results["subjects"]
    # the sizes of the parallel and loaded phases (bench.py --parallel-pods, --load); the
    # defaults for results written before they were recorded
    sizes = {"parallel_pods": 20, "load_pods": 110, "load_nads": 500, **results.get("sizes", {})}
    par_n = sizes["parallel_pods"]
    cols = [k for k in COLUMNS if k in subjects]
    ratios = [(a, b) for a, b in RATIOS if a in cols and b in cols]
    rows: list[list[str]] = []

    def row(name: str, get: Callable[[str], Any], fmt: Callable[[Any], str],
            ratio: bool = True) -> None:
        """One row: `get(subject)` (None or KeyError: empty cell), formatted by `fmt`;
        the ratios from the same values (their medians when lists)."""
        vals: dict[str, Any] = {}
        for k in cols:
            try:
                vals[k] = None if subjects[k]["skipped"] else get(k)
            except KeyError:
                vals[k] = None
        cells = [fmt(vals[k]) if vals[k] is not None else "" for k in cols]
        for a, b in ratios:
            va, vb = (median(v) if isinstance(v, list) else v for v in (vals[a], vals[b]))
            numbers = isinstance(va, (int, float)) and isinstance(vb, (int, float))
            cells.append(f"{va / vb:.2f}x" if ratio and numbers and vb else "")
        rows.append([name, *cells])

    s1, sw, par = (results.get(k, {}) for k in ("scenario_1", "sweep", "parallel"))
    for command in ("ADD", "DEL"):
        row(f"scenario 1 {command} wall", lambda k, c=command: s1[k][c]["wall"], ms)
    for command in ("ADD", "DEL"):
        row(f"scenario 1 CPU per {command} (process tree + daemon)",
            lambda k, c=command: s1[k][c]["cpu"], cpu)
    for n in sorted({int(n) for k in sw for n in sw[k]}):
        row(f"ADD wall, {n} NAD{'s' if n > 1 else ''} selected",
            lambda k, n=n: sw[k].get(n) or sw[k][str(n)], ms)
    row("ADD fixed cost (fit over N)", lambda k: fit(sw[k])[0], lambda v: f"{v * 1000:.0f} ms")
    row("ADD cost per network (fit)", lambda k: fit(sw[k])[1], lambda v: f"{v * 1000:.1f} ms")
    for command in ("ADD", "DEL"):
        row(f"{par_n} pods {command} in parallel, total",
            lambda k, c=command: par[k][c]["wall"], secs)
        row(f"CPU per pod, parallel {command}", lambda k, c=command: par[k][c]["cpu_per_pod"], cpu)
    version = results.get("version", {}).get("wall", {})
    row("VERSION exec (children: Go bridge)", lambda k: version[VERSION_EXE[k]], ms)
    status = results.get("status", {})
    status_failed = results.get("status_failed", {})
    row("STATUS exec (default network below 1.1.0)",
        lambda k: status_failed.get(k) or status[k],
        lambda v: "fails" if isinstance(v, str) else ms(v))
    api = results.get("api_requests", {})
    for command in ("ADD", "DEL"):
        row(f"API requests per {command} (audit log)", lambda k, c=command: api[k][c],
            lambda v: f"{median(v):g}")
    # thick mode sends an ADD's writes after its answer, so some land in the DEL's window:
    # the pod's whole lifecycle is what compares
    row("API requests per pod lifecycle, ADD + DEL", lambda k: [
        a + d for a, d in zip(api[k]["ADD"], api[k]["DEL"], strict=True)],
        lambda v: f"{median(v):g}")
    peak = results.get("peak_rss_kib", {})
    row("peak RSS of an exec'd ADD (largest process)", lambda k: peak[k],
        lambda v: f"{median(v) / 1024:.1f} MiB")
    rss = results.get("daemon_rss_kib", {})
    # (the key after_20_pods is the results' name, whatever --parallel-pods was)
    for when, what in (("idle", "idle"), ("after_20_pods", f"after {par_n} pods"),
                       ("loaded", f"{sizes['load_pods']} pods + {sizes['load_nads']} NADs")):
        row(f"daemon RSS, {what}", lambda k, w=when: rss[k][w], mib)

    head = ["", *(subjects[k]["label"] + (" (skipped)" if subjects[k]["skipped"] else "")
                  for k in cols), *(f"{b.split('_')[1]}: netattach / Multus" for _, b in ratios)]
    m = results["machine"]
    lines = [f"netattach bench, {m['date']}: median (p90) of {results['runs']} interleaved "
             f"rounds; Multus {results['multus_version']}; {m['nproc']} CPUs ({m['cpu']}), "
             f"{m['kernel']}, Python {m['python']}", "",
             _md([head, ["---"] * len(head), *rows])]
    for k in cols:
        if subjects[k]["skipped"]:
            lines.append(f"\n{subjects[k]['label']} skipped: {subjects[k]['skipped']}")
    for k, per in api.items():
        kinds = ", ".join(f"{what} {n:g}" for what, n in per["ADD_kinds"].items())
        lines.append(f"\n{subjects[k]['label']}, API requests per ADD: {kinds or 'none'}")
        if per["cache"]:
            lines.append(f"  its caches over the whole run: {per['cache']}")
    for k, failures in results.get("repeated", {}).items():
        lines.append(f"\n{subjects[k]['label']}: {len(failures)} round(s) of {par_n} pods in "
                     "parallel measured again after calls failed: " + "; ".join(failures))
    if "import_cost_ms" in results:
        lines.append("\nimport cost, virtualenv console script (cumulative, -X importtime): "
                     + ", ".join(f"{m} {v:.0f} ms" for m, v in results["import_cost_ms"].items()))
    return "\n".join(lines)


def _md(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("| " + " | ".join(c.ljust(w) if c != "---" else "-" * w
                                       for c, w in zip(r, widths)) + " |" for r in rows)
