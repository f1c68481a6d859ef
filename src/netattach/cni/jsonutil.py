"""Strict JSON decoding and type naming for messages, shared by every parser of input.

Stdlib only: imported on the exec'd CNI path.
"""
from __future__ import annotations

import sys

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
        value = _scan(text)
    except Exception:  # anything but a plain success: json.loads itself, for its words
        import json
        try:
            value = json.loads(text, parse_constant=_reject_constant)
        except RecursionError:
            raise ValueError(too_deep) from None
    openers = (text.count("[") + text.count("{") if isinstance(text, str)
               else text.count(b"[") + text.count(b"{"))
    if openers > MAX_DEPTH and isinstance(value, (dict, list)) and _deeper_than_max(value):
        raise ValueError(too_deep)
    return value


class _Strict:
    """The settings json.loads(text, parse_constant=_reject_constant) gives its scanner."""
    strict = True
    object_hook = object_pairs_hook = None
    parse_float, parse_int = float, int
    parse_constant = staticmethod(_reject_constant)


_WHITESPACE = " \t\n\r"  # json.decoder.WHITESPACE
_SCANNER: Any = None


def _scan(text: str | bytes) -> Any:
    """json.loads(text, parse_constant=_reject_constant) for the common case, through
    the same C scanner but without importing the `json` package (with `re`, `enum` and
    more: most of a VERSION call's imports, issue 11). Raises (anything) when the text
    is not that case or not valid JSON: loads_strict then asks json.loads, which gives
    the same value or the error in its own words.

    The case: UTF-8 bytes (or a str) that json.detect_encoding reads as UTF-8 (no BOM,
    no NUL in the first two bytes), one value with only JSON white space around it."""
    global _SCANNER
    if isinstance(text, bytes):
        if not text or text[0] not in b'{[ \t\n\r"-0123456789tfn' or \
                (len(text) > 1 and not text[1]):
            raise ValueError("not the common case")
        text = text.decode("utf-8", "surrogatepass")
    elif not isinstance(text, str) or not text or text[0] not in '{[ \t\n\r"-0123456789tfn':
        raise ValueError("not the common case")
    if _SCANNER is None:
        import _json
        _SCANNER = _json.make_scanner(_Strict())  # type: ignore[arg-type]
    start = len(text) - len(text.lstrip(_WHITESPACE))
    value, end = _SCANNER(text, start)
    if text[end:].strip(_WHITESPACE):
        raise ValueError("extra data")
    return value


def dumps(doc: Any) -> str:
    """json.dumps(doc), without importing `json` when `doc` holds only dicts with string
    keys, lists, strings, integers, booleans and None (what the CNI answers hold): the
    same C string encoder, separators ", " and ": ", keys in order."""
    if "json" not in sys.modules:
        try:
            return _dumps(doc)
        except TypeError:
            pass
    import json
    return json.dumps(doc)


def _dumps(value: Any) -> str:
    import _json
    if isinstance(value, str):
        return str(_json.encode_basestring_ascii(value))
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if type(value) is int:
        return int.__repr__(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_dumps(v) for v in value) + "]"
    if isinstance(value, dict) and all(type(k) is str for k in value):
        return "{" + ", ".join(f"{_dumps(k)}: {_dumps(v)}" for k, v in value.items()) + "}"
    raise TypeError(type(value).__name__)


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
