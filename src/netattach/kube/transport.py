"""The exec'd path's HTTP transport to the API server: the standard library's
`socket` and `ssl`, HTTP/1.1 framed by http11.py, for the kubeconfigs it fully
understands.

Why: an exec'd ADD paid about 200 ms to import lightkube and httpx2 before its first
request (issue 11), and later 23 ms to import `http.client` (with the `email` package);
the plugin's four kinds of call (GET pod, GET NAD, merge-PATCH pods/status, POST event)
need no more than one keep-alive HTTP/1.1 connection. Measured in docs/architecture.md
(Decisions).

Which kubeconfigs (`load`): JSON (what `netattach install` writes) or YAML, whose
current context names a cluster with `server` (http or https, an optional path
prefix), `certificate-authority` (a file, relative to the kubeconfig's directory as
client-go resolves it) or `certificate-authority-data`, optional
`insecure-skip-tls-verify`; and a user with nothing, a
`token`, a `tokenFile`, or `client-certificate` + `client-key` files. Anything
else (exec and auth-provider credentials, embedded client certificates, both a
token and a token file, a proxy, tls-server-name, impersonation, basic auth, an unreadable or
malformed file) returns None, and kube.Kube uses lightkube, which reads every
kubeconfig client-go does; so no kubeconfig that worked stops working.

No kubeconfig at all (None: the node daemon's, as deploy/thick runs it) is the
in-cluster configuration (`in_cluster`, what lightkube's default lookup tries first):
the ServiceAccount's token, namespace and CA files and KUBERNETES_SERVICE_HOST and
_PORT. When one is missing, None: lightkube's lookup goes on ($KUBECONFIG,
~/.kube/config). The daemon sends every network-status PATCH and Event through it:
http.client cost about half of httpx2's CPU per request (docs/bench-node.md), and
http11.py took its place (issue 23).

The node daemon's watch caches read their LISTs and WATCHes through `stream` (a
`Stream` on a connection of its own) when this transport reads their kubeconfig.

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

from .. import __version__
from .http11 import Answer, ProtocolError, host_field, read_answer, request_bytes, split_server

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)
if TYPE_CHECKING:
    from typing import Any

ERRORS = (TimeoutError, (OSError, ProtocolError))
"""(what a request that took too long raises, what an unreachable or garbled
server raises): socket timeouts; refused or reset connections, DNS and TLS
failures (ssl.SSLError is an OSError), malformed HTTP answers."""

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
    headers: Any  # http11.Headers: get(name) is case-insensitive
    content: bytes


MAX_IDLE = 4
"""Kept-alive connections a transport keeps at most between requests. The exec'd plugin
makes one request at a time and so uses one; the node daemon's threads (its calls, its
two publisher threads) each take one of their own, where the second of two requests at
once used to open a connection, make a TLS handshake and close it again (py-spy on the
real node, 2026-11-29)."""


class StdlibTransport:
    """One API server over keep-alive connections: a request takes an idle one, or
    opens one when none is idle (another request holds each, even one abandoned by
    its caller), and gives it back once answered (MAX_IDLE kept at most)."""

    def __init__(self, server: str, context: ssl.SSLContext | None, token: str | None):
        """Raises ValueError for a `server` that is no "http[s]://host[:port][/path]"
        (http11.split_server)."""
        scheme, self._host, port, self._prefix = split_server(server)
        self.base_url = server.rstrip("/")
        self._https = scheme == "https"
        default_port = 443 if self._https else 80
        self._port = port or default_port
        self._host_field = host_field(self._host, self._port, default_port)
        self._context = context
        self._headers = {"User-Agent": f"netattach/{__version__}"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._idle: list[_Connection] = []
        self._lock = threading.Lock()

    def _connect(self, timeout: float) -> _Connection:
        return _Connection(self._host, self._port, timeout,
                           self._context if self._https else None)

    def request(self, method: str, path: str, content: bytes | str | None = None,
                headers: dict[str, str] | None = None, timeout: float = 10.0) -> Response:
        """One HTTP request; `timeout` s for connecting and for each read. A request on
        a kept-alive connection the server closed meanwhile is sent again once on a
        new one (every call of the plugin is idempotent: kube/session.py, "Retries")."""
        body = content.encode() if isinstance(content, str) else content
        message = request_bytes(method, self._prefix + path, self._host_field,
                                {**self._headers, **(headers or {})}, body)
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        reused = conn is not None
        if conn is None:
            conn = self._connect(timeout)
        try:
            try:
                resp, will_close = self._exchange(conn, method, message, timeout)
            except (ConnectionResetError, BrokenPipeError):  # http11.ServerClosed too
                if not reused:
                    raise
                conn.close()  # closed by the server while idle: once more, afresh
                conn = self._connect(timeout)
                resp, will_close = self._exchange(conn, method, message, timeout)
        except BaseException:
            conn.close()  # whatever state it is in, it is not used again
            raise
        if will_close:
            conn.close()
        else:
            with self._lock:
                keep = len(self._idle) < MAX_IDLE
                if keep:
                    self._idle.append(conn)
            if not keep:
                conn.close()
        return resp

    def stream(self, method: str, path: str, params: dict[str, str] | None = None,
               read_timeout: float | None = None, timeout: float = 10.0) -> Stream:
        """Send one request on a connection of its own (not kept: a WATCH holds it for
        minutes) and return its answer once the status line and headers are in, the body
        still to read from the Stream; `timeout` s for connecting and the headers,
        `read_timeout` s (None: `timeout`) for each read of the body. `params`: the
        query, URL-encoded. Raises ERRORS as `request` does."""
        query = ""
        if params:
            from urllib.parse import urlencode  # the node daemon's watches only
            query = f"?{urlencode(params)}"
        message = request_bytes(method, self._prefix + path + query, self._host_field,
                                self._headers, None)
        conn = self._connect(timeout)
        try:
            answer = conn.exchange(method, message)
            if read_timeout is not None:
                conn.sock.settimeout(read_timeout)
        except BaseException:
            conn.close()
            raise
        return Stream(conn, answer)

    def close(self) -> None:
        """Close the idle kept-alive connections (a request afterwards opens a new one)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    @staticmethod
    def _exchange(conn: _Connection, method: str, message: bytes, timeout: float
                  ) -> tuple[Response, bool]:
        """(the answer, whether the connection cannot carry another request after it)."""
        conn.sock.settimeout(timeout)
        answer = conn.exchange(method, message)
        data = answer.read()
        return Response(answer.status, answer.headers, data), answer.will_close


STREAM_CHUNK = 64 * 1024
"""Bytes `Stream.iter_bytes` asks the socket for at most per chunk."""


class Stream:
    """One answer whose body is read as it arrives (a LIST parsed as it streams in, a
    WATCH): `status_code`, `headers.get(name)`; the body by `iter_bytes()` (chunks as
    they come, at most STREAM_CHUNK bytes each), `iter_lines()` (bytes, one line each,
    its line end kept: a WATCH's events) or `read()` (the rest, whole; then `text`).
    Chunked transfer coding is undone (http11.Answer). Its connection is closed on
    leaving its `with` (or by `close()`)."""

    def __init__(self, conn: _Connection, answer: Answer):
        self._conn, self._answer = conn, answer
        self.status_code = answer.status
        self.headers = answer.headers
        self.content = b""

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def iter_bytes(self) -> Any:
        while chunk := self._answer.read1(STREAM_CHUNK):
            yield chunk

    def iter_lines(self) -> Any:
        return self._answer.lines()

    def read(self) -> bytes:
        self.content += self._answer.read()
        return self.content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def close(self) -> None:
        self._conn.close()


class _Connection:
    """One TCP connection (TLS with `context`, else plain) to `host`:`port`, opened at
    once with `timeout` s to connect, Nagle off. The host goes to getaddrinfo and ssl
    as ASCII bytes, which they take as they are, where a str goes through the "idna"
    codec, whose import (encodings.idna and stringprep, about 3 ms) each exec'd ADD
    paid for a host that is an IP address or an ASCII name; a non-ASCII name stays a
    str (IDNA-encoded by them). Raises OSError (ssl.SSLError too) and TimeoutError."""

    def __init__(self, host: str, port: int, timeout: float, context: ssl.SSLContext | None):
        name: str | bytes = host.encode() if host.isascii() else host
        sock = socket.create_connection(  # getaddrinfo takes bytes (typeshed says str)
            (name, port), timeout)  # type: ignore[arg-type]
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if context is not None:
                sock = context.wrap_socket(sock, server_hostname=name)
        except BaseException:
            sock.close()
            raise
        self.sock = sock
        self._rfile = sock.makefile("rb")

    def exchange(self, method: str, message: bytes) -> Answer:
        """Send the request `message` (http11.request_bytes) and read its answer's status
        line and header fields (http11.read_answer); the body is the Answer's to read."""
        self.sock.sendall(message)
        return read_answer(self._rfile, method)

    def close(self) -> None:
        self._rfile.close()
        self.sock.close()


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


SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
"""Where the kubelet mounts a pod's ServiceAccount token, namespace and CA (client-go's
rest.InClusterConfig, lightkube's KubeConfig.from_service_account)."""


def in_cluster(service_account: str = SERVICE_ACCOUNT,
               environ: Any = os.environ) -> tuple[StdlibTransport, str] | None:
    """(transport, namespace) of the in-cluster configuration, as lightkube builds it
    (KubeConfig.from_service_account): https://KUBERNETES_SERVICE_HOST:_PORT (an IPv6
    address in brackets), verified against `service_account`/ca.crt, the bearer token
    and the namespace read from its `token` and `namespace` files (whitespace around
    them dropped). None when not in a pod (a file or a variable missing), or when the CA
    cannot be used, the token is empty or has a space or control character inside, or
    the port is not one: lightkube then takes it (and words what is wrong), as a
    kubeconfig this transport does not read. The token is read once (lightkube reads
    it again after a 401): whoever keeps the transport loads it again to take a rotated
    token (the node daemon: every CLIENT_REUSE_SECONDS)."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        return None
    if ":" in host:
        host = f"[{host}]"
    try:
        with open(os.path.join(service_account, "token"), encoding="utf-8") as f:
            token = f.read().strip()
        with open(os.path.join(service_account, "namespace"), encoding="utf-8") as f:
            namespace = f.read().strip()
        context = ssl.create_default_context(cafile=os.path.join(service_account, "ca.crt"))
        if not token or not namespace or not token.isascii() or \
                any(ord(c) < 0x21 or ord(c) == 0x7f for c in token):
            return None
        # a port that is not one (split_server raises) is lightkube's to word
        return StdlibTransport(f"https://{host}:{port}", context, token), namespace
    except (OSError, UnicodeDecodeError, ValueError, ssl.SSLError):
        return None


def load(kubeconfig: str | None) -> tuple[StdlibTransport, str] | None:
    """(transport, the current context's namespace or "default") for `kubeconfig`
    (None or "": the in-cluster configuration, `in_cluster`), or None when this transport
    does not handle it (module doc: lightkube does).

    Raises KubeconfigError when the kubeconfig is one it handles but a file it names
    cannot be read or used (the message names the file and why)."""
    if not kubeconfig:  # "" too: lightkube's default lookup, in-cluster first
        return in_cluster()
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
    if not isinstance(server, str):
        return None
    try:
        scheme = split_server(server)[0]
    except ValueError:  # a query, user information, a bad port...: lightkube's to word
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
    if token is not None and (token != token.strip() or not token.isascii()
                              or any(ord(c) < 0x20 or ord(c) == 0x7f for c in token)):
        # never sent, and never quoted: it would be the value of an HTTP header
        raise KubeconfigError("Illegal header value: the user's token (not shown) has a "
                              "newline, a control character, a non-ASCII character or "
                              "leading or trailing space")
    context_ssl = None
    if scheme == "https":
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
