"""HTTP/1.1 framing of the exec'd API transport (kube/http11.py): every way an answer's
body is delimited (RFC 9112 section 6.3), read whole, by lines and by pieces, against
bytes given here; what a request may not carry; the server URL's parts. The transport
over real sockets: test_kube_transport.py (loopback) and the e2e tests (the real API
server)."""
from __future__ import annotations

import io
from urllib.parse import urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from netattach.kube import http11
from netattach.kube.http11 import ProtocolError


def answer(raw: bytes, method: str = "GET") -> http11.Answer:
    return http11.read_answer(io.BufferedReader(io.BytesIO(raw)), method)


def chunked(pieces: list[bytes], trailer: bytes = b"") -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces if p) + b"0\r\n" + \
        trailer + b"\r\n"


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"


def test_a_content_length_body_and_the_connection_kept():
    a = answer(HEAD + b"Content-Length: 2\r\n\r\n{}NEXT")
    assert (a.status, a.headers.get("content-type"), a.will_close) == (200, "application/json",
                                                                       False)
    assert a.read() == b"{}" and a.complete and a.read() == b""


def test_a_chunked_body_with_extensions_and_trailers():
    raw = HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + \
        b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-Trailer: t\r\n\r\n"
    a = answer(raw)
    assert a.read() == b"abcde" and a.complete and not a.will_close


def test_a_body_to_the_end_of_the_connection_closes_it():
    a = answer(b"HTTP/1.1 200 OK\r\n\r\nall of it")
    assert a.will_close and a.read() == b"all of it" and a.complete


@pytest.mark.parametrize("raw, close", [
    (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", True),
    (b"HTTP/1.1 200 OK\r\nconnection: Keep-Alive, Close\r\nContent-Length: 0\r\n\r\n", True),
    (b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", True),
    (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", False),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nxx", True),  # RFC 9112 6.3 (4)
    # RFC 9112 6.1, 6.3 (3): may be request smuggling, so not used again
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n",
     True),
    (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"0\r\n\r\n", True),
    (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n", True),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", False),
])
def test_when_the_server_ends_the_connection(raw, close):
    assert answer(raw).will_close is close


@pytest.mark.parametrize("raw, method", [
    (b"HTTP/1.1 204 No Content\r\n\r\n", "GET"),
    (b"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n", "GET"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", "HEAD"),
])
def test_answers_without_a_body(raw, method):
    a = answer(raw, method)
    assert a.complete and a.read() == b"" and not a.will_close


def test_interim_answers_are_skipped():
    a = answer(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: x\r\n\r\n"
               b"HTTP/1.1 201 Created\r\nContent-Length: 1\r\n\r\nk")
    assert a.status == 201 and a.headers.get("Link") is None and a.read() == b"k"


def test_repeated_and_folded_fields():
    """get: the first value, as http.client's (Retry-After twice is still read)."""
    a = answer(b"HTTP/1.1 429 Too Many\r\nRetry-After: 1\r\nretry-after: 2\r\n"
               b"X-Long: one\r\n  two\r\nContent-Length: 0\r\n\r\n")
    assert a.headers.get("RETRY-AFTER") == "1" and a.headers.get("x-long") == "one two"
    assert "retry-after" in a.headers and a.headers.get("missing", "d") == "d"


def test_the_status_line_without_a_reason_and_with_lf_only():
    a = answer(b"HTTP/1.1 404\nContent-Length: 0\n\n")
    assert a.status == 404 and a.complete


def test_a_connection_closed_before_the_status_line_is_server_closed():
    with pytest.raises(http11.ServerClosed) as e:
        answer(b"")
    assert isinstance(e.value, ConnectionResetError)


@pytest.mark.parametrize("raw, words", [
    (b"ICY 200 OK\r\n\r\n", "not an HTTP/1.x status line"),
    (b"HTTP/1.1 2000 OK\r\n\r\n", "not an HTTP/1.x status line"),
    (b"HTTP/1.1 20x OK\r\n\r\n", "not an HTTP/1.x status line"),
    (b"HTTP/2 200\r\n\r\n", "not an HTTP/1.x status line"),
    (b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n", "invalid header field line"),
    (b"HTTP/1.1 200 OK\r\n : empty name\r\n\r\n", "invalid header field line"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n", "ended inside its header fields"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "invalid Content-Length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\n", "invalid Content-Length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
     "invalid Content-Length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n", "invalid Content-Length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 1099511627777\r\n\r\n", "invalid Content-Length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
     "invalid Content-Length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n",
     "invalid Content-Length"),
    (b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 101 + b"\r\n", "more than 100 header fields"),
    (b"HTTP/1.1 200 OK\r\nX: " + b"y" * 70000 + b"\r\n\r\n", "too long"),
    (b"HTTP/1.1 200 " + b"O" * 70000 + b"\r\n\r\n", "too long"),
])
def test_what_is_no_http_answer_is_refused(raw, words):
    with pytest.raises(ProtocolError, match=words):
        answer(raw)


def test_a_body_is_read_in_pieces_of_what_arrived():
    """A Content-Length larger than what comes is not allocated up front: the body is
    read in pieces of READ_PIECE, and one cut short says how much was missing."""
    body = b"x" * (3 * http11.READ_PIECE + 5)
    assert answer(HEAD + b"Content-Length: %d\r\n\r\n" % len(body) + body).read() == body
    with pytest.raises(ProtocolError, match="ended 1000000000 bytes before"):
        answer(HEAD + b"Content-Length: %d\r\n\r\n" % (len(body) + 10**9) + body).read()


def test_the_same_content_length_twice_is_one():
    assert answer(HEAD + b"Content-Length: 2, 2\r\n\r\nok").read() == b"ok"


@pytest.mark.parametrize("body, words", [
    (b"Content-Length: 5\r\n\r\nabc", "ended 2 bytes before its Content-Length"),
    (b"Transfer-Encoding: chunked\r\n\r\n5\r\nabc", "ended inside a chunk"),
    (b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n", "ended inside its chunked body"),
    (b"Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n", "invalid chunk size line"),
    (b"Transfer-Encoding: chunked\r\n\r\n3\r\nabcXY0\r\n\r\n", "chunk does not end with CRLF"),
    (b"Transfer-Encoding: chunked\r\n\r\n0\r\nX: 1\r\n", "ended inside the chunked body's"),
    (b"Transfer-Encoding: chunked\r\n\r\n" + b"f" * 20 + b"\r\nabc", "chunk size over"),
    (b"Transfer-Encoding: chunked\r\n\r\n10000000001\r\nabc", "chunk size over"),
])
def test_a_body_cut_short_or_badly_chunked_is_an_error(body, words):
    with pytest.raises(ProtocolError, match=words):
        answer(HEAD + body).read()
    with pytest.raises(ProtocolError, match=words):
        list(answer(HEAD + body).lines())


LINES = st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"") + b"\n"),
                 max_size=8)


@given(lines=LINES, last=st.binary(max_size=20).map(lambda b: b.replace(b"\n", b"")),
       cuts=st.lists(st.integers(0, 400), max_size=6),
       framing=st.sampled_from(["chunked", "length", "close"]))
def test_any_body_reads_the_same_whole_by_lines_and_by_pieces(lines, last, cuts, framing):
    """However the body is delimited and, chunked, however cut into chunks, read()
    gives it whole, lines() gives its lines (the last without LF too), read1() gives it
    piece by piece; then the answer is complete."""
    body = b"".join(lines) + last
    if framing == "chunked":
        bounds = sorted({0, len(body), *(c for c in cuts if c < len(body))})
        raw = HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + \
            chunked([body[a:b] for a, b in zip(bounds, bounds[1:])])
    elif framing == "length":
        raw = HEAD + b"Content-Length: %d\r\n\r\n" % len(body) + body
    else:
        raw = HEAD + b"\r\n" + body
    assert answer(raw).read() == body
    a = answer(raw)
    assert list(a.lines()) == lines + ([last] if last else []) and a.complete
    a, pieces = answer(raw), []
    while piece := a.read1(7):
        assert len(piece) <= 7
        pieces.append(piece)
    assert b"".join(pieces) == body and a.complete


def test_a_request_with_a_body_and_without():
    msg = http11.request_bytes("PATCH", "/api/v1/x?y=1", "h:6443",
                               {"Content-Type": "application/json"}, b"{}")
    assert msg == (b"PATCH /api/v1/x?y=1 HTTP/1.1\r\nHost: h:6443\r\nAccept-Encoding: identity"
                   b"\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
    assert http11.request_bytes("GET", "/", "h", {}, None).endswith(b"identity\r\n\r\n")
    assert b"Content-Length: 0\r\n" in http11.request_bytes("POST", "/", "h", {}, None)


@pytest.mark.parametrize("method, target, headers, words", [
    ("GET", "/a b", {}, "invalid request target"),
    ("GET", "/a\r\nX: y", {}, "invalid request target"),
    ("GET", "/\x7f", {}, "invalid request target"),
    ("GET", "/é", {}, "invalid request target"),
    ("GET", "http://other/", {}, "invalid request target"),
    ("GE T", "/", {}, "invalid method"),
    ("GET", "/", {"X Y": "v"}, "Invalid header name"),
    ("GET", "/", {"X:": "v"}, "Invalid header name"),
    ("GET", "/", {"Authorization": "Bearer s3cret\r\nX: y"}, "Invalid header value"),
    ("GET", "/", {"Authorization": "Bearer s3cret\n"}, "Invalid header value"),
    ("GET", "/", {"Authorization": "Bearer s3cret\0"}, "Invalid header value"),
    ("GET", "/", {"X": "\u20ac"}, "not Latin-1"),
])
def test_a_request_that_would_break_its_framing_is_refused(method, target, headers, words):
    with pytest.raises(ProtocolError, match=words) as e:
        http11.request_bytes(method, target, "h", headers, None)
    assert "s3cret" not in str(e.value)


@pytest.mark.parametrize("server", [
    "https://10.0.0.1:6443", "https://API.example:443/", "http://h", "https://h/prefix/",
    "https://[fd00::1]:6443/p/q", "HTTPS://h:1", "https://h:", "https://[::1]",
])
def test_server_urls_split_as_urlsplit_does(server):
    parts = urlsplit(server)
    assert http11.split_server(server) == (parts.scheme, parts.hostname, parts.port,
                                           parts.path.rstrip("/"))


@pytest.mark.parametrize("server", [
    "ftp://h", "h:6443", "https://", "https://:6443", "https://u:p@h", "https://h?x=1",
    "https://h#f", "https://h:65536", "https://h:-1", "https://h:6443x", "https://[::1",
    "https://[::1]x", "https://h/a b", "https://hé", "https://h\n", "https://a:1:2",
])
def test_server_urls_it_does_not_take(server):
    with pytest.raises(ValueError):
        http11.split_server(server)


@pytest.mark.parametrize("host, port, default, field", [
    ("10.0.0.1", 6443, 443, "10.0.0.1:6443"), ("h", 443, 443, "h"), ("h", 80, 80, "h"),
    ("fd00::1", 6443, 443, "[fd00::1]:6443"), ("bücher.example", 443, 443,
                                               "xn--bcher-kva.example"),
])
def test_the_host_field(host, port, default, field):
    assert http11.host_field(host, port, default) == field
