"""The exec'd path's HTTP transport to the API server: a minimal HTTP/1.1 client
over the standard library's `socket` and `ssl`, for the kubeconfigs it fully
understands.

Why: an exec'd ADD paid about 200 ms to import lightkube and httpx2 before its first
request (issue 11); `ssl` costs a small part of that, and the plugin's four kinds of
call (GET pod, GET NAD, merge-PATCH pods/status, POST event) need no more than one
keep-alive HTTP/1.1 connection. `http.client` is not used: it imports the `email`
package (parser, message, header, utils, with datetime, random, calendar) to read
headers, about 10 ms more per ADD on a slow machine; the client here reads what an
HTTP/1.1 server may answer (Content-Length, chunked, or until close; a 1xx before
the answer) with the same limits and error kinds as http.client. Measured in
docs/architecture.md (Decisions).

Which kubeconfigs (`load`): JSON (what `netattach install` writes) or YAML, whose
current context names a cluster with `server` (http or https, an optional path
prefix), `certificate-authority` (a file, relative to the kubeconfig's directory as
client-go resolves it) or `certificate-authority-data`, optional
`insecure-skip-tls-verify`; and a user with nothing, a
`token`, a `tokenFile`, or `client-certificate` + `client-key` files. Anything
else (exec and auth-provider credentials, embedded client certificates, both a
token and a token file, a proxy, tls-server-name, impersonation, basic auth, an unreadable or
malformed file, no file at all) returns None, and kube.Kube uses lightkube, which
reads every kubeconfig client-go does; so no kubeconfig that worked stops working.

The transport is the duck type kube.Kube drives: `base_url`, and
`request(method, path, content, headers, timeout)` returning a `Response` with
`status_code`, `headers.get(name)` and `content`; its failures are ERRORS
(timed out, could not reach or speak to the server). No proxy from the
environment is used, as with lightkube's `trust_env=False`.
"""
from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from . import __version__


class HTTPException(Exception):
    """The server's answer is not HTTP/1.x as this client reads it (http.client's
    exception of the same name; the kinds below keep its names and messages)."""


class BadStatusLine(HTTPException):
    def __init__(self, line: object):
        super().__init__(repr(line) if not line else line)
        self.line = line


class RemoteDisconnected(ConnectionResetError, BadStatusLine):
    """The connection closed before any answer (a kept-alive one the server dropped)."""

    def __init__(self, message: str):
        ConnectionResetError.__init__(self, message)
        self.line = ""


class LineTooLong(HTTPException):
    def __init__(self, what: str):
        super().__init__(f"got more than {_MAX_LINE} bytes when reading {what}")


class IncompleteRead(HTTPException):
    def __init__(self, partial: bytes, expected: int | None = None):
        super().__init__(partial)
        self.partial, self.expected = partial, expected

    def __str__(self) -> str:
        more = f", {self.expected} more expected" if self.expected is not None else ""
        return f"IncompleteRead({len(self.partial)} bytes read{more})"


class InvalidURL(HTTPException):
    pass


ERRORS = (TimeoutError, (OSError, HTTPException))
"""(what a request that took too long raises, what an unreachable or garbled
server raises): socket timeouts; refused or reset connections, DNS and TLS
failures (ssl.SSLError is an OSError), malformed HTTP answers."""

_MAX_LINE = 65536  # http.client's limits: a status or header line, headers per answer
_MAX_HEADERS = 100

_CLUSTER_KEYS = {"server", "certificate-authority", "certificate-authority-data",
                 "insecure-skip-tls-verify", "extensions"}
_USER_KEYS = {"token", "tokenFile", "client-certificate", "client-key", "extensions"}


class KubeconfigError(ValueError):
    """The kubeconfig is one this transport reads, but a file it names cannot be used
    (the CA, the client certificate or key, the token file)."""


@dataclass
class Response:
    """One answer: status, headers (`get(name)`, any case) and the whole body."""

    status_code: int
    headers: Headers
    content: bytes


class Headers(dict[str, str]):
    """An answer's header fields by lower-case name (the first of a repeated one)."""

    def get(self, name: str, default: Any = None) -> Any:
        return super().get(name.lower(), default)


class _Connection:
    """One connected (TLS) socket and the buffered reader of its answers."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.reader = sock.makefile("rb")

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


class StdlibTransport:
    """One API server over one keep-alive connection (a second, one-off connection
    when a request is made while an abandoned one still holds the first)."""

    def __init__(self, server: str, context: ssl.SSLContext | None, token: str | None):
        parts = urlsplit(server)
        self.base_url = server.rstrip("/")
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._context = context
        self._headers = {"User-Agent": f"netattach/{__version__}"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._conn: _Connection | None = None
        self._lock = threading.Lock()
        default_port = 443 if self._https else 80
        host = f"[{self._host}]" if ":" in self._host else self._host
        port = self._port if self._port is not None else default_port
        self._host_header = host if port == default_port else f"{host}:{port}"
        self._address = (
            # bytes: getaddrinfo and ssl encode a str host with the idna codec, whose
            # import (stringprep, unicodedata) an ASCII name does not need
            self._host.encode("ascii") if self._host.isascii() else self._host, port)

    def _connect(self, timeout: float) -> _Connection:
        sock = socket.create_connection(self._address, timeout)  # type: ignore[arg-type]
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._https:
                assert self._context is not None
                sock = self._context.wrap_socket(sock, server_hostname=self._address[0])
        except BaseException:
            sock.close()
            raise
        return _Connection(sock)

    def request(self, method: str, path: str, content: bytes | str | None = None,
                headers: dict[str, str] | None = None, timeout: float = 10.0) -> Response:
        """One HTTP request; `timeout` s for connecting and for each read. A request on
        a kept-alive connection the server closed meanwhile is sent again once on a
        new one (every call of the plugin is idempotent: kube.py, "Retries")."""
        body = content.encode() if isinstance(content, str) else content
        all_headers = {**self._headers, **(headers or {})}
        if not self._lock.acquire(blocking=False):
            conn = self._connect(timeout)  # the kept one is held by an abandoned request
            try:
                return self._exchange(conn, method, path, body, all_headers, timeout)
            finally:
                conn.close()
        try:
            reused = self._conn is not None
            try:
                if self._conn is None:
                    self._conn = self._connect(timeout)
                try:
                    return self._exchange(self._conn, method, path, body, all_headers, timeout)
                except (RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                    if not reused:
                        raise
                    self._drop()  # closed by the server while idle: once more, afresh
                    self._conn = self._connect(timeout)
                    return self._exchange(self._conn, method, path, body, all_headers, timeout)
            except BaseException:
                self._drop()  # whatever state it is in, the next request starts afresh
                raise
        finally:
            self._lock.release()

    def _exchange(self, conn: _Connection, method: str, path: str,
                  body: bytes | None, headers: dict[str, str], timeout: float) -> Response:
        conn.sock.settimeout(timeout)
        conn.sock.sendall(self._head(method, self._prefix + path, body, headers)
                          + (body or b""))
        status, fields, will_close = _read_head(conn.reader)
        data = _read_body(conn.reader, method, status, fields)
        if will_close:
            self._drop()
        return Response(status, fields, data)

    def _head(self, method: str, url: str, body: bytes | None,
              headers: dict[str, str]) -> bytes:
        """The request line and header fields, as http.client writes them."""
        bad = next((c for c in url if c <= " " or c == "\x7f"), None)
        if bad is not None:
            raise InvalidURL(f"URL can't contain control characters. {url!r} "
                             f"(found at least {bad!r})")
        lines = [f"{method} {url} HTTP/1.1", f"Host: {self._host_header}",
                 "Accept-Encoding: identity"]
        for name, value in headers.items():
            if "\r" in value or "\n" in value:
                raise ValueError(f"Invalid header value for {name!r}")
            lines.append(f"{name}: {value}")
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body or b'')}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _read_line(reader: Any, what: str) -> bytes:
    line: bytes = reader.readline(_MAX_LINE + 1)
    if len(line) > _MAX_LINE:
        raise LineTooLong(what)
    return line


def _read_fields(reader: Any) -> Headers:
    """Header fields up to the empty line (a line starting with white space continues
    the one before)."""
    fields = Headers()
    last = None
    count = 0
    while True:
        line = _read_line(reader, "header line")
        if line in (b"\r\n", b"\n", b""):
            return fields
        count += 1
        if count > _MAX_HEADERS:
            raise HTTPException(f"got more than {_MAX_HEADERS} headers")
        text = line.decode("iso-8859-1")
        if text[0] in " \t" and last is not None:
            fields[last] = f"{fields[last]} {text.strip()}"
            continue
        name, sep, value = text.partition(":")
        if not sep:
            continue  # not a field (http.client's parser skips it too)
        key = name.strip().lower()
        if key not in fields:
            fields[key] = value.strip()
            last = key
        else:
            last = None


def _read_head(reader: Any) -> tuple[int, Headers, bool]:
    """(status, header fields, whether the server closes the connection after this
    answer) of the next final answer; a 1xx before it is read and skipped."""
    while True:
        line = _read_line(reader, "status line")
        if not line:
            raise RemoteDisconnected("Remote end closed connection without response")
        text = line.decode("iso-8859-1")
        parts = text.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/"):
            raise BadStatusLine(text)
        version, code = parts[0], parts[1]
        if len(code) != 3 or not code.isdigit() or not 100 <= int(code) <= 999:
            raise BadStatusLine(text)
        status = int(code)
        fields = _read_fields(reader)
        if 100 <= status < 200 and status != 101:
            continue
        tokens = {t.strip().lower() for t in fields.get("connection", "").split(",")}
        if version == "HTTP/1.0":
            will_close = "keep-alive" not in tokens
        else:
            will_close = "close" in tokens
        if "content-length" not in fields and \
                fields.get("transfer-encoding", "").lower() != "chunked" and \
                status not in (204, 304):
            will_close = True  # the body ends when the connection does
        return status, fields, will_close


def _read_exact(reader: Any, n: int) -> bytes:
    data: bytes = reader.read(n)
    if len(data) < n:
        raise IncompleteRead(data, n - len(data))
    return data


def _read_body(reader: Any, method: str, status: int, fields: Headers) -> bytes:
    """The body of an answer whose head was read: chunked, Content-Length bytes, or
    everything until the server closes (none for HEAD, 204, 304)."""
    if method == "HEAD" or status in (204, 304):
        return b""
    if fields.get("transfer-encoding", "").lower() == "chunked":
        chunks: list[bytes] = []
        while True:
            line = _read_line(reader, "chunk size")
            try:
                size = int(line.split(b";", 1)[0], 16)
            except ValueError:
                raise IncompleteRead(b"".join(chunks)) from None
            if size == 0:
                while _read_line(reader, "trailer line") not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(chunks)
            chunks.append(_read_exact(reader, size))
            _read_exact(reader, 2)  # the CRLF after the chunk
    length = fields.get("content-length")
    if length is not None:
        try:
            n = int(length)
        except ValueError:
            n = -1
        if n >= 0:
            return _read_exact(reader, n)
    data: bytes = reader.read()
    return data


def _read_document(path: str) -> Any:
    with open(path, "rb") as f:
        text = f.read()
    try:
        return json.loads(text)
    except ValueError:
        pass
    import yaml  # only for kubeconfigs written by hand or by other tools
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(text, Loader=loader)  # noqa: S506 (a safe loader)


def _named(doc: dict[str, Any], section: str, name: Any, key: str) -> dict[str, Any] | None:
    for entry in doc.get(section) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            value = entry.get(key)
            return value if isinstance(value, dict) else None
    return None


def load(kubeconfig: str | None) -> tuple[StdlibTransport, str] | None:
    """(transport, the current context's namespace or "default") for `kubeconfig`, or
    None when this transport does not handle it (module doc: lightkube does).

    Raises KubeconfigError when the kubeconfig is one it handles but a file it names
    cannot be read or used (the message names the file and why)."""
    if not kubeconfig:
        return None
    try:
        doc = _read_document(kubeconfig)
    except Exception:  # OS, UTF-8, JSON and YAML errors alike: lightkube words them
        return None
    if not isinstance(doc, dict):
        return None
    current = doc.get("current-context")
    context = _named(doc, "contexts", current, "context") if current else None
    if context is None:
        return None
    cluster = _named(doc, "clusters", context.get("cluster"), "cluster")
    user = _named(doc, "users", context.get("user"), "user") if context.get("user") else {}
    if cluster is None or user is None:
        return None
    if set(cluster) - _CLUSTER_KEYS or set(user) - _USER_KEYS:
        return None
    server = cluster.get("server")
    if not isinstance(server, str) or urlsplit(server).scheme not in ("http", "https") \
            or not urlsplit(server).hostname:
        return None
    if ("token" in user and "tokenFile" in user) or \
            ("client-certificate" in user) != ("client-key" in user):
        return None
    if not all(isinstance(v, str) for k, v in {**cluster, **user}.items()
               if k not in ("insecure-skip-tls-verify", "extensions")):
        return None
    insecure = cluster.get("insecure-skip-tls-verify", False)
    if not isinstance(insecure, bool) or (insecure and (
            "certificate-authority" in cluster or "certificate-authority-data" in cluster)):
        return None  # client-go refuses a CA together with insecure; lightkube words it
    namespace = context.get("namespace") or "default"
    if not isinstance(namespace, str):
        return None

    base = os.path.dirname(os.path.abspath(kubeconfig))

    def resolve(path: str) -> str:  # client-go: relative to the kubeconfig's directory
        return path if os.path.isabs(path) else os.path.join(base, path)

    token = user.get("token")
    if "tokenFile" in user:
        try:
            with open(resolve(user["tokenFile"]), encoding="utf-8") as f:
                token = f.read().strip()
        except (OSError, UnicodeDecodeError) as e:
            raise KubeconfigError(f"token file {user['tokenFile']}: {e}") from None
    if token is not None and (token != token.strip()
                              or any(ord(c) < 0x20 or ord(c) == 0x7f for c in token)):
        # never sent, and never quoted: it would be the value of an HTTP header
        raise KubeconfigError("Illegal header value: the user's token (not shown) has a "
                              "newline, a control character or leading or trailing space")
    context_ssl = None
    if urlsplit(server).scheme == "https":
        context_ssl = _ssl_context(cluster, user, insecure, resolve)
    return StdlibTransport(server, context_ssl, token), namespace


def _ssl_context(cluster: dict[str, Any], user: dict[str, Any], insecure: bool,
                 resolve: Any) -> ssl.SSLContext:
    """TLS as client-go sets it: the kubeconfig's CA only (the system's when it names
    none), or no verification with insecure-skip-tls-verify; the client
    certificate when given."""
    try:
        if "certificate-authority-data" in cluster:
            context = ssl.create_default_context(cadata=base64.b64decode(
                cluster["certificate-authority-data"], validate=True).decode("ascii"))
        elif "certificate-authority" in cluster:
            context = ssl.create_default_context(cafile=resolve(cluster["certificate-authority"]))
        else:
            context = ssl.create_default_context()
    except (OSError, ValueError, ssl.SSLError) as e:
        raise KubeconfigError(f"certificate authority: {type(e).__name__}: {e}") from None
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if "client-certificate" in user:
        try:
            context.load_cert_chain(resolve(user["client-certificate"]),
                                    resolve(user["client-key"]))
        except (OSError, ssl.SSLError) as e:
            raise KubeconfigError(f"client certificate: {type(e).__name__}: {e}") from None
    return context
