"""Where an exec'd netattach spends its time: py-spy's raw (collapsed) stacks of many
runs, summed and summarised (`make bench PROFILE=1`, hack/bench.py --profile).

py-spy samples the interpreter from outside (`py-spy record --idle --format raw`),
so a sample is a wall-clock moment: running, importing, or waiting for a child or
the API server. PyInstaller's bootloader, before the interpreter runs, is not seen
(VERSION's wall time is that floor). Frames carry a file's base name only.
"""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

FRAME = re.compile(r"^(?P<func>.+) \((?P<file>[^():]+)(?::\d+)?\)$")


def parse(text: str) -> Counter[tuple[str, ...]]:
    """{stack (outermost first, "func (file)" without line numbers): samples} of py-spy's
    raw output: one `frame;frame;... count` per line."""
    out: Counter[tuple[str, ...]] = Counter()
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = []
        for f in stack.split(";"):
            m = FRAME.match(f)
            frames.append(f"{m['func']} ({m['file']})" if m else f)
        out[tuple(frames)] += int(count)
    return out


def _imported(stack: tuple[str, ...]) -> str | None:
    """The module a sample is importing, by its outermost import: the first `<module>`
    frame after the first `_find_and_load`; None when not importing."""
    try:
        i = next(n for n, f in enumerate(stack) if f.startswith("_find_and_load "))
    except StopIteration:
        return None
    mod = next((f for f in stack[i:] if f.startswith("<module> ")), "<module> (?)")
    return mod.removeprefix("<module> ").strip("()")


def summary(stacks: Counter[tuple[str, ...]], top: int = 10) -> dict[str, object]:
    """{"samples": n, "importing": share, "imports": [(module file, share)],
    "frames": [(innermost frame outside imports, share)]}, shares of all samples."""
    total = sum(stacks.values()) or 1
    imports: Counter[str] = Counter()
    frames: Counter[str] = Counter()
    for stack, n in stacks.items():
        mod = _imported(stack)
        if mod is not None:
            imports[mod] += n
        elif stack:
            frames[stack[-1]] += n
    return {"samples": sum(stacks.values()),
            "importing": sum(imports.values()) / total,
            "imports": [(m, n / total) for m, n in imports.most_common(top)],
            "frames": [(f, n / total) for f, n in frames.most_common(top)]}


def load(paths: list[Path]) -> Counter[tuple[str, ...]]:
    out: Counter[tuple[str, ...]] = Counter()
    for p in paths:
        out.update(parse(p.read_text()))
    return out


def text(title: str, s: dict[str, object]) -> str:
    """The summary as a few markdown lines."""
    pct = lambda v: f"{v * 100:.0f} %"  # noqa: E731
    imports = s["imports"]
    frames = s["frames"]
    assert isinstance(imports, list) and isinstance(frames, list)
    return "\n".join([
        f"**{title}**: {s['samples']} samples, {pct(float(s['importing']))} importing "  # type: ignore[arg-type]
        "(by the outermost module imported): "
        + ", ".join(f"{m} {pct(v)}" for m, v in imports),
        "", "outside imports, innermost frames: "
        + ", ".join(f"{f} {pct(v)}" for f, v in frames)])
