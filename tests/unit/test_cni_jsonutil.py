"""jsonutil's paths around the `json` package (VERSION's imports, issue 11) give what
json gives: loads_strict the same value or the same error as json.loads with its
strict settings, dumps the same text as json.dumps."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netattach.cni import jsonutil

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text() |
    st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20)


def reference(text):
    """loads_strict as it was: json.loads with NaN/Infinity refused."""
    try:
        return ("ok", json.loads(text, parse_constant=jsonutil._reject_constant))
    except ValueError as e:
        return ("error", type(e).__name__, str(e))


def fast(text):
    try:
        return ("ok", jsonutil.loads_strict(text))
    except ValueError as e:
        return ("error", type(e).__name__, str(e))


@settings(max_examples=500, deadline=None)
@given(values, st.sampled_from(["", " ", "\n\t", " x", ",", "\ufeff"]),
       st.sampled_from(["", " ", "\r\n", "}", "]", " 1"]), st.booleans())
def test_loads_strict_is_json_loads(value, before, after, as_bytes):
    text = before + json.dumps(value, ensure_ascii=False) + after
    data = text.encode("utf-8", "surrogatepass") if as_bytes else text
    assert fast(data) == reference(data)


@pytest.mark.parametrize("data", [
    b"", b"  ", b"{", b'{"a": NaN}', b'{"a": -Infinity}', b'\xef\xbb\xbf{"a": 1}',
    b'\xff\xfe{\x00}\x00', b'{"a": "\x01"}', b'{"a": 1,}', b'{"a": 1} {}', b"\x00{}",
    b'{"a": "\xff"}', b"[" * 150 + b"]" * 150, b"[" * 5000 + b"]" * 5000, "\ufeff{}",
    b'{"a": 1e400}', b"tru", b"nul", b"-", b'"\\ud800"'])
def test_edge_cases_are_json_loads(data):
    got = fast(data)
    if data.count(b"[") > 100 if isinstance(data, bytes) else False:
        assert got[0] == "error" and "nested too deeply" in got[2]
    else:
        assert got == reference(data)


@settings(max_examples=500, deadline=None)
@given(values)
def test_dumps_is_json_dumps(value):
    """_dumps, which dumps uses while `json` is not imported (always here, it is)."""
    try:
        text = jsonutil._dumps(value)
    except TypeError:  # a float somewhere: dumps leaves it to json.dumps
        return
    assert text == json.dumps(value)
    assert jsonutil.dumps(value) == json.dumps(value)


def test_dumps_of_non_json_types_is_json_dumps():
    for doc in ({1: 2}, {"a": 1.5}, {"a": float("nan")}):
        with pytest.raises(TypeError):
            jsonutil._dumps(doc)
        assert jsonutil.dumps(doc) == json.dumps(doc)
    assert jsonutil._dumps((1, "x")) == json.dumps((1, "x"))
    with pytest.raises(TypeError):
        jsonutil.dumps({"a": object()})
