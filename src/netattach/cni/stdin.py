"""The runtime's stdin: one JSON object, bounded in size and depth (CNI SPEC.md
"Parameters": the network configuration on stdin).

Its own module so that VERSION, which reads nothing but stdin, answers without
importing the request machinery (cli.py; issue 11): only the standard library,
jsonutil and the error kinds.
"""
from __future__ import annotations

from .errors import DecodeFailure
from .jsonutil import loads_strict

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)
if TYPE_CHECKING:
    from typing import Any

MAX_STDIN = 1 << 20  # 1 MiB: far above any real network configuration


def decode_json_object(data: bytes, what: str = "stdin") -> dict[str, Any]:
    """Decode `data` as one JSON object; anything else raises DecodeFailure (6).

    Guards: more than MAX_STDIN bytes, invalid UTF-8, NaN/Infinity, nesting that
    exhausts the recursion limit.
    """
    if len(data) > MAX_STDIN:
        raise DecodeFailure(f"{what} is too large: {len(data)} bytes",
                       f"the limit is {MAX_STDIN} bytes")
    try:
        obj = loads_strict(data)
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
        raise DecodeFailure(f"{what} is not valid JSON: {e}") from None
    if not isinstance(obj, dict):
        raise DecodeFailure(f"{what} is not a JSON object",
                       f"got a JSON {type(obj).__name__}")
    return obj
