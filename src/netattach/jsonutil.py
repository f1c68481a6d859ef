"""Strict JSON decoding and type naming for messages, shared by every parser of input.

Stdlib only: imported on the exec'd CNI path.
"""
from __future__ import annotations

import json

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)
if TYPE_CHECKING:
    from typing import Any

MAX_DEPTH = 100
"""Deepest nesting of arrays and objects accepted. CNI configs, results and annotations
nest fewer than 10 levels. Whatever reads a decoded value (copy.deepcopy, json.dumps,
the schema validator) recurses once or twice per level, from wherever it is called, so
the bound must sit far below the interpreter's recursion limit (1000): a NAD config
nested 500 deep parsed, then broke NetworkConfig's deepcopy with a RecursionError."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"invalid JSON constant {name}")


def _deeper_than_max(value: Any) -> bool:
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False


def loads_strict(text: str | bytes) -> Any:
    """json.loads that refuses NaN/Infinity (not JSON, RFC 8259 §6) and arrays and
    objects nested deeper than MAX_DEPTH: ValueError("JSON nested too deeply ...").

    Raises ValueError (JSONDecodeError and UnicodeDecodeError are ValueErrors).
    """
    too_deep = f"JSON nested too deeply: more than {MAX_DEPTH} levels of arrays and objects"
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise ValueError(too_deep) from None
    openers = (text.count("[") + text.count("{") if isinstance(text, str)
               else text.count(b"[") + text.count(b"{"))
    if openers > MAX_DEPTH and isinstance(value, (dict, list)) and _deeper_than_max(value):
        raise ValueError(too_deep)
    return value


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
