"""Strict JSON decoding and type naming for messages, shared by every parser of input.

Stdlib only: imported on the exec'd CNI path.
"""
from __future__ import annotations

import json
from typing import Any


def _reject_constant(name: str) -> Any:
    raise ValueError(f"invalid JSON constant {name}")


def loads_strict(text: str | bytes) -> Any:
    """json.loads that refuses NaN/Infinity (not JSON, RFC 8259 §6) and turns nesting deep
    enough to exhaust the recursion limit into ValueError("JSON nested too deeply").

    Raises ValueError (JSONDecodeError and UnicodeDecodeError are ValueErrors).
    """
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def json_type(value: object) -> str:
    """The JSON kind of a decoded value, as an error message says it ("a string", "null")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
