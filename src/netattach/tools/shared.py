"""What both modes of `netattach validate` share: the file linter (tools/validate.py)
and the cluster pre-flight (tools/preflight.py, `--cluster`), which validate's command
line runs: the findings' severities and their summary, and the parsing of the flags
both take. Standard library only."""
from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Protocol

ERROR, WARNING, NOTE = "error", "warning", "note"
"""A finding's severity: an error (an ADD would fail, exit 1), a warning, a note."""


class _Graded(Protocol):
    @property
    def severity(self) -> str: ...


def summary(findings: Sequence[_Graded]) -> dict[str, int]:
    """{"errors": n, "warnings": n, "notes": n} of findings (validate.Finding or
    preflight.Finding: anything with a `severity`)."""
    return {f"{s}s": sum(f.severity == s for f in findings) for s in (ERROR, WARNING, NOTE)}


def plugin_types(text: str | None) -> frozenset[str] | None:
    """--allowed-plugin-types' value ("macvlan, host-local") as a set of types, None when
    the flag was not given."""
    return None if text is None else frozenset(t.strip() for t in text.split(",") if t.strip())


CHUNK_SIZE = 500
"""Objects per page of each LIST of `--cluster` without --chunk-size."""


def positive(text: str) -> int:
    """--chunk-size's type: a whole number of at least 1 (argparse's usage error else)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value
