"""HTTP/1.1 message framing (RFC 9112) over one socket, for the API transport
(transport.py): a request written, its answer's status line, header fields and body read.

Why not `http.client`: importing it imports the `email` package (its header parser,
with `email.utils`, `datetime`, `random`, `urllib.parse` and `ipaddress` behind it),
about 23 ms of every exec'd thin ADD on this project's machine, an eighth of it
(docs/architecture.md, Decisions; thin ADD's target is 2.0x Multus thin's). What an API
client needs of HTTP/1.1 is small and is all here: a request line and header fields
(names and values checked, so nothing in them can split the request), and an answer
framed by Content-Length, by chunked transfer coding (with trailers), or by the end of
the connection (RFC 9112 section 6.3), interim 1xx answers skipped. No compression is
asked for (`Accept-Encoding: identity`), no proxy is used, no request is pipelined.

Everything here is the standard library's `socket` (and `ssl` through the socket it is
given). Failures: OSError and TimeoutError from the socket; ProtocolError for an answer
that is no HTTP/1.x answer or a request that cannot be written; ServerClosed (a
ConnectionResetError) when the server closed the connection before answering.
"""
from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)

if TYPE_CHECKING:
    from collections.abc import Iterator
    from io import BufferedReader

MAX_LINE = 65536
"""Bytes of a status line, a header field line or a chunk-size line at most (as
http.client's _MAXLINE)."""
MAX_HEADERS = 100
"""Header field lines of an answer at most (as http.client's _MAXHEADERS)."""
MAX_LENGTH = 1 << 40
"""A Content-Length or chunk size above this (1 TiB) is refused as garbage, before
anything is read or allocated for it."""
READ_PIECE = 1 << 20
"""Bytes `Answer.read` asks for at most at a time: memory grows with what arrives, not
with what the answer announces."""

_TOKEN = frozenset(b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz"
                   b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")
"""RFC 9110 section 5.6.2 `tchar`: what a field name and a method are made of."""


def _is_token(text: str) -> bool:
    return bool(text) and all(b in _TOKEN for b in text.encode("latin-1", "replace"))


class ProtocolError(Exception):
    """An answer that does not follow HTTP/1.1 (RFC 9112), cut short, or too large for
    the limits above; or a request that cannot be written (a method, target or header
    field that would break its framing)."""


class ServerClosed(ConnectionResetError):
    """The server closed the connection before the status line (a kept-alive connection
    it closed while idle, or a server that dropped the request)."""


class Headers:
    """An answer's header fields: `get(name, default=None)` in any case of `name`, the
    first value of a field given more than once, as http.client's `get` (the fields
    read here, Retry-After and Content-Type, are singletons: RFC 9110 section 5.3)."""

    def __init__(self, fields: list[tuple[str, str]]):
        first: dict[str, str] = {}
        for name, value in fields:
            first.setdefault(name.lower(), value)
        self._fields = first

    def get(self, name: str, default: str | None = None) -> str | None:
        return self._fields.get(name.lower(), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._fields

    def __repr__(self) -> str:
        return f"Headers({self._fields!r})"


def request_bytes(method: str, target: str, host: str, headers: dict[str, str],
                  body: bytes | None) -> bytes:
    """The request message: request line, Host, `headers`, Content-Length when there is
    a body (or the method is POST, PUT or PATCH: 0), the blank line, the body.

    `target`: the origin-form path and query, `host` the Host field's value. Raises
    ProtocolError for a method that is no token, a target with a space, a control
    character or a non-ASCII character, or a header field whose name is no token or
    whose value has CR, LF or NUL (the value is never quoted: it can be the bearer
    token)."""
    if not _is_token(method):
        raise ProtocolError(f"invalid method {method!r}")
    if not target.startswith("/") or not target.isascii() or \
            any(c <= " " or c == "\x7f" for c in target):
        raise ProtocolError("invalid request target (a space, a control or a non-ASCII "
                            f"character, or not a path): {target[:200]!r}")
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}", "Accept-Encoding: identity"]
    for name, value in headers.items():
        if not _is_token(name):
            raise ProtocolError(f"Invalid header name {name[:100]!r}")
        if "\r" in value or "\n" in value or "\0" in value:
            raise ProtocolError(f"Invalid header value for {name} (not shown)")
        lines.append(f"{name}: {value}")
    if body is not None or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body or b'')}")
    try:
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    except UnicodeEncodeError:
        raise ProtocolError("a header field value is not Latin-1 text") from None
    return head + body if body else head


class Answer:
    """One answer: `status` (int), `headers` (Headers), `will_close` (the server ends
    the connection after it: HTTP/1.0 without keep-alive, `Connection: close`, or a body
    that runs to the end of the connection), and its body, read by `read()` (the rest,
    whole), `read1(n)` (what one read of the socket gives, at most n bytes; b"" at the
    end) or `readline()` (up to and including the next LF; b"" at the end). `complete`
    once the whole body was read: only then can the connection carry another request.
    Raises ProtocolError for a body cut short or badly chunked."""

    def __init__(self, rfile: BufferedReader, status: int, headers: Headers,
                 will_close: bool, length: int | None, chunked: bool):
        self._rfile = rfile
        self.status = status
        self.headers = headers
        self.will_close = will_close
        self._length = length  # bytes left of a Content-Length body (None: not that)
        self._chunked = chunked
        self._chunk_left = 0  # bytes left of the current chunk
        self.complete = length == 0 and not chunked

    def _readline(self, limit: int = MAX_LINE) -> bytes:
        line: bytes = self._rfile.readline(limit + 1)
        if len(line) > limit:
            raise ProtocolError(f"a line of the answer is longer than {limit} bytes")
        return line

    def _next_chunk(self) -> bool:
        """Read the next chunk-size line (or, after the last chunk, the trailer
        fields); False at the end of the body."""
        line = self._readline()
        if not line:
            raise ProtocolError("the answer ended inside its chunked body")
        size_text = line.split(b";", 1)[0].strip()
        if not line.endswith(b"\n") or not size_text or \
                any(b not in b"0123456789abcdefABCDEF" for b in size_text):
            raise ProtocolError(f"invalid chunk size line {line[:40]!r}")
        size = int(size_text, 16)
        if size > MAX_LENGTH:
            raise ProtocolError(f"a chunk size over {MAX_LENGTH} bytes: {line[:40]!r}")
        if size:
            self._chunk_left = size
            return True
        for _ in range(MAX_HEADERS + 1):  # trailer fields, up to the blank line
            trailer = self._readline()
            if trailer in (b"\r\n", b"\n"):
                self.complete = True
                return False
            if not trailer:
                raise ProtocolError("the answer ended inside the chunked body's trailer")
        raise ProtocolError(f"more than {MAX_HEADERS} trailer fields")

    def _end_of_chunk(self) -> None:
        if self._rfile.readline(3) not in (b"\r\n", b"\n"):
            raise ProtocolError("a chunk does not end with CRLF")

    def _of_length(self, data: bytes) -> bytes:
        """`data`, just read of a Content-Length body, counted off it."""
        if not data:
            raise ProtocolError(f"the answer ended {self._length} bytes before its "
                                "Content-Length")
        self._length -= len(data)  # type: ignore[operator]
        self.complete = not self._length
        return data

    def _of_chunk(self, data: bytes) -> bytes:
        """`data`, just read of the current chunk, counted off it (its CRLF read at its
        end)."""
        if not data:
            raise ProtocolError("the answer ended inside a chunk")
        self._chunk_left -= len(data)
        if not self._chunk_left:
            self._end_of_chunk()
        return data

    def read1(self, n: int = 65536) -> bytes:
        if self.complete:
            return b""
        rfile = self._rfile
        if self._chunked:
            if not self._chunk_left and not self._next_chunk():
                return b""
            return self._of_chunk(rfile.read1(min(n, self._chunk_left)))
        if self._length is None:  # to the end of the connection
            data = rfile.read1(n)
            self.complete = not data
            return data
        return self._of_length(rfile.read1(min(n, self._length)))

    def readline(self) -> bytes:
        if self.complete:
            return b""
        rfile = self._rfile
        if self._length is not None:
            return self._of_length(rfile.readline(self._length))
        if not self._chunked:
            line = rfile.readline()
            self.complete = not line
            return line
        parts = []
        while self._chunk_left or self._next_chunk():
            part = self._of_chunk(rfile.readline(self._chunk_left))
            parts.append(part)
            if part.endswith(b"\n"):
                break
        return b"".join(parts)

    def read(self) -> bytes:
        parts = []
        if self._length is not None:  # in pieces: the length is the server's word
            while not self.complete:
                parts.append(self._of_length(self._rfile.read(min(self._length, READ_PIECE))))
            return b"".join(parts)
        while chunk := self.read1(READ_PIECE):
            parts.append(chunk)
        return b"".join(parts)

    def lines(self) -> Iterator[bytes]:
        while line := self.readline():
            yield line


def read_answer(rfile: BufferedReader, method: str) -> Answer:
    """The answer to a `method` request from `rfile` (a buffered binary reader of the
    connection: socket.makefile("rb")), its status line and header fields read, its body
    not yet; interim 1xx answers skipped. Raises ServerClosed when the connection ends
    before the status line, ProtocolError when what comes is not an HTTP/1.x answer."""
    while True:
        line: bytes = rfile.readline(MAX_LINE + 1)
        if not line:
            raise ServerClosed("the server closed the connection without an answer")
        if len(line) > MAX_LINE:
            raise ProtocolError("the answer's status line is too long")
        version, _, rest = line.decode("latin-1").rstrip("\r\n").partition(" ")
        code = rest[:3]
        if version not in ("HTTP/1.1", "HTTP/1.0") or len(code) != 3 or \
                not code.isdigit() or rest[3:4] not in ("", " "):
            raise ProtocolError(f"not an HTTP/1.x status line: {line[:80]!r}")
        status = int(code)
        fields = _read_fields(rfile)
        if 100 <= status < 200 and status != 101:
            continue  # interim: the final answer follows
        break
    headers = Headers(fields)
    connection = {t.strip().lower() for t in _joined(fields, "connection").split(",")}
    will_close = "close" in connection or (version == "HTTP/1.0"
                                           and "keep-alive" not in connection)
    coding = _joined(fields, "transfer-encoding").lower()
    length_text = _joined(fields, "content-length")
    lengths = {v.strip() for v in length_text.split(",") if v.strip()}
    if method == "HEAD" or status in (204, 304):
        return Answer(rfile, status, headers, will_close, 0, False)
    if status == 101:  # what follows is no HTTP any more (never asked for here)
        return Answer(rfile, status, headers, True, 0, False)
    if coding:
        # RFC 9112 6.3: a body not chunked last runs to the end of the connection; one
        # with a Content-Length too, or chunked in HTTP/1.0, may be smuggling: the
        # connection is not used again after it
        if coding.rsplit(",", 1)[-1].strip() != "chunked":
            return Answer(rfile, status, headers, True, None, False)
        return Answer(rfile, status, headers,
                      will_close or bool(lengths) or version == "HTTP/1.0", None, True)
    if not lengths and not any(name.lower() == "content-length" for name, _ in fields):
        return Answer(rfile, status, headers, True, None, False)
    length = lengths.pop() if len(lengths) == 1 else ""
    if not length.isdigit() or not length.isascii() or len(length) > 15 \
            or int(length) > MAX_LENGTH:  # 15 digits: int() never meets its digit limit
        raise ProtocolError(f"invalid Content-Length {length_text[:40]!r}")
    return Answer(rfile, status, headers, will_close, int(length), False)


def _joined(fields: list[tuple[str, str]], name: str) -> str:
    """Every value of the (lower-case) field `name`, joined by ", " (RFC 9110 section
    5.3): how the framing fields are read, whatever Headers.get gives."""
    return ", ".join(value for field, value in fields if field.lower() == name)


def _read_fields(rfile: BufferedReader) -> list[tuple[str, str]]:
    """Header field lines up to the blank line: (name, value) in order, a line that
    begins with a space or tab (obsolete line folding) appended to the one before."""
    fields: list[tuple[str, str]] = []
    for _ in range(MAX_HEADERS + 1):
        line: bytes = rfile.readline(MAX_LINE + 1)
        if len(line) > MAX_LINE:
            raise ProtocolError("a header field line of the answer is too long")
        if line in (b"\r\n", b"\n"):
            return fields
        if not line:
            raise ProtocolError("the answer ended inside its header fields")
        text = line.decode("latin-1").rstrip("\r\n")
        if text[:1] in (" ", "\t") and fields:
            name, value = fields[-1]
            fields[-1] = (name, f"{value} {text.strip()}")
            continue
        name, colon, value = text.partition(":")
        if not colon or not name or name != name.strip():
            raise ProtocolError(f"invalid header field line {line[:80]!r}")
        fields.append((name, value.strip(" \t")))
    raise ProtocolError(f"more than {MAX_HEADERS} header fields in the answer")


def host_field(host: str, port: int, default_port: int) -> str:
    """The Host field's value for `host` (a name or an IP address, IPv6 without
    brackets) and `port`: the port left out when it is the scheme's default, an IPv6
    address in brackets (RFC 9110 section 7.2), a non-ASCII name IDNA-encoded."""
    name = host if host.isascii() else host.encode("idna").decode("ascii")
    if ":" in name:
        name = f"[{name}]"
    return name if port == default_port else f"{name}:{port}"


def split_server(server: str) -> tuple[str, str, int | None, str]:
    """(scheme, host, port or None, path prefix without its trailing "/") of an API
    server's URL "http[s]://host[:port][/path]", host lower-cased, an IPv6 address
    without its brackets. Raises ValueError for anything else: another scheme, no
    host, user information, a query or fragment, a port that is not 0-65535."""
    scheme, sep, rest = server.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in ("http", "https") or "?" in rest or "#" in rest:
        raise ValueError(f"not an http(s) URL without query or fragment: {server!r}")
    authority, slash, path = rest.partition("/")
    if "@" in authority or not authority.isascii():
        raise ValueError(f"user information or a non-ASCII host in {server!r}")
    if authority.startswith("["):
        host, bracket, after = authority[1:].partition("]")
        if not bracket or (after and not after.startswith(":")):
            raise ValueError(f"invalid IPv6 host in {server!r}")
        port_text = after[1:]
    else:
        host, _, port_text = authority.partition(":")
    if not host or any(c <= " " or c == "\x7f" or c in "/\\[]" for c in host):
        raise ValueError(f"no host, or an invalid one, in {server!r}")
    port = None
    if port_text:
        if not port_text.isdigit() or not port_text.isascii() or int(port_text) > 65535:
            raise ValueError(f"invalid port in {server!r}")
        port = int(port_text)
    prefix = f"/{path}".rstrip("/") if slash else ""
    if any(c <= " " or c == "\x7f" for c in prefix) or not prefix.isascii():
        raise ValueError(f"invalid path in {server!r}")
    return scheme, host.lower(), port, prefix
