"""A TLS-terminating proxy on 127.0.0.1 in front of the test kube-apiserver, whose
behaviour a test switches while netattach runs through it: the API server made slow,
silent or gone, for every request or only for some HTTP methods.

The proxy serves TLS with the API server's own certificate and key (the test bed's
PKI: the certificate names 127.0.0.1), so a kubeconfig that names the proxy's URL
and the cluster's CA is trusted exactly as one naming the API server. It then sees
each HTTP/1.1 request in clear text (netattach's transport speaks HTTP/1.1 only) and
can hold back one method, e.g. only the network-status PATCH, which a plain TCP
forwarder could not tell apart inside TLS.

Modes (`set`):
  pass     forward everything;
  delay    hold each matching request `seconds` before forwarding it;
  trickle  forward the answers to matching requests one byte every `seconds`: every
           read gets data in time, so only a deadline on the whole request ends it;
  hang     never answer: without `methods`, new connections are accepted and never
           get a TLS handshake; with `methods`, matching requests are read and
           never forwarded;
  refuse   the port is closed (connection refused) and open connections are reset;
  status   answer matching requests itself, never forwarding them, with `status`
           (429, 503...) and a Kubernetes Status body, plus `Retry-After:
           <retry_after>` when given: an API server throttling (priority and
           fairness) or shutting down, or a load balancer with no server behind it;
  html     answer matching requests itself with 200 and an HTML page, as a captive
           portal or a proxy's login page in front of the API server would.
`count` (status and html only): the mode answers the next `count` matching
requests, then the proxy forwards everything again (mode pass). Every answer the
proxy gave itself is in `answered` ("429 GET /path").
`before(method, callback)` runs `callback()` (in a worker thread) when a request
with that method arrives, before it is forwarded: the test's admin client can then
change the world between netattach's requests. What a callback raises is kept in
`errors` (and that request is not forwarded).

    with ApiProxy.for_cluster(cluster) as proxy:
        proxy.set("hang", methods={"PATCH"})
        ... a kubeconfig with server=proxy.url ...
        proxy.set("status", status=429, retry_after=1, methods={"GET"}, count=1)

Nothing here imports pytest.
"""
from __future__ import annotations

import asyncio
import json
import socket
import ssl
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from urllib.parse import urlsplit

MODES = ("pass", "delay", "trickle", "hang", "refuse", "status", "html")
ANSWERING = ("status", "html")
"""The modes in which the proxy answers requests itself."""

HTML_PAGE = (b"<!DOCTYPE html>\n<html>\n<head><title>Network login</title></head>\n"
             b"<body>\n<h1>Sign in to continue</h1>\n<form method=\"post\"><input name=\"user\">"
             b"</form>\n</body>\n</html>\n")


@dataclass(frozen=True)
class _Rule:
    mode: str = "pass"
    seconds: float = 0.0
    methods: frozenset[str] | None = None
    status: int = 503
    retry_after: str | None = None

    def applies(self, method: str | None) -> bool:
        return self.methods is None or method in self.methods


class ApiProxy:
    """The proxy; a context manager (start on enter, stop on exit).

    upstream: the API server URL (https://127.0.0.1:<port>).
    cert, key: the certificate (and its key) the proxy serves; ca: the CA it
      verifies the upstream with.
    Attributes: url; requests ("METHOD /path" of every request seen, in order);
    answered ("STATUS METHOD /path" of the requests the proxy answered itself, modes
    status and html); connections (TCP connections accepted); errors (what `before`
    callbacks raised).
    """

    def __init__(self, upstream: str, cert: Path, key: Path, ca: Path):
        parts = urlsplit(upstream)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 443)
        self._server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._server_ctx.load_cert_chain(str(cert), str(key))
        self._server_ctx.set_alpn_protocols(["http/1.1"])
        self._client_ctx = ssl.create_default_context(cafile=str(ca))
        self._client_ctx.set_alpn_protocols(["http/1.1"])
        self._rule = _Rule()
        self._hooks: dict[str, Callable[[], None]] = {}
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task] = set()
        self.port = 0
        self.requests: list[str] = []
        self.connections = 0
        self.errors: list[BaseException] = []
        self.answered: list[str] = []
        self._count: int | None = None

    @classmethod
    def for_cluster(cls, cluster) -> ApiProxy:
        """A proxy in front of a netattach_testbed.cluster.Cluster, with its serving cert."""
        return cls(cluster.server, cluster.pki["apiserver.crt"], cluster.pki["apiserver.key"],
                   cluster.ca_file)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    # ------------------------------------------------------------ control (any thread)

    def start(self) -> ApiProxy:
        with socket.socket() as s:  # the kernel picks a free port; the proxy keeps it
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self._thread = threading.Thread(target=self._loop.run_forever, name="apiproxy",
                                        daemon=True)
        self._thread.start()
        self._call(self._listen())
        return self

    def stop(self) -> None:
        """Close the listener and every connection, end the proxy's thread. Idempotent."""
        if self._thread is None:
            return
        self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._thread = None
        self._loop.close()

    def __enter__(self) -> ApiProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def set(self, mode: str, seconds: float = 0.0, methods: set[str] | None = None, *,
            status: int = 503, retry_after: float | str | None = None,
            count: int | None = None) -> None:
        """Switch mode (see the module doc) for requests and connections from now on.
        `methods`: only requests with these HTTP methods (None: all). `status` and
        `retry_after` (the header's value, seconds or an HTTP-date; None: no header):
        mode status. `count`: modes status and html answer only that many matching
        requests, then the proxy passes (None: all)."""
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {MODES}")
        if count is not None and (mode not in ANSWERING or count < 1):
            raise ValueError(f"count={count!r}: only modes {ANSWERING}, at least 1")
        self._count = count
        self._rule = _Rule(mode, seconds, frozenset(methods) if methods is not None else None,
                           status, None if retry_after is None else str(retry_after))
        if mode == "refuse":
            self._call(self._close_all())
        elif self._server is None:
            self._call(self._listen())

    def before(self, method: str, callback: Callable[[], None] | None) -> None:
        """Run `callback()` when a `method` request arrives, before forwarding it
        (None removes the hook)."""
        if callback is None:
            self._hooks.pop(method, None)
        else:
            self._hooks[method] = callback

    def _call(self, coro) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    # ------------------------------------------------------------ the loop's side

    async def _listen(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port,
                                                      reuse_address=True)

    async def _close_all(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for w in list(self._writers):
            _reset(w)
        self._writers.clear()

    async def _shutdown(self) -> None:
        await self._close_all()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._loop.shutdown_default_executor()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        self._tasks.add(task)
        self._writers.add(writer)
        upstream_writer = None
        try:
            rule = self._rule
            if rule.mode == "hang" and rule.methods is None:
                await _drain_until_eof(reader)  # accepted, never a byte back
                return
            await writer.start_tls(self._server_ctx)
            up_reader, upstream_writer = await asyncio.open_connection(
                *self._upstream, ssl=self._client_ctx, server_hostname=self._upstream[0])
            self._writers.add(upstream_writer)
            answers = asyncio.ensure_future(self._answers(up_reader, writer))
            try:
                await self._forward_requests(reader, upstream_writer, writer)
            finally:
                answers.cancel()
        except (OSError, ssl.SSLError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ConnectionError):
            pass
        finally:
            self._tasks.discard(task)
            for w in (writer, upstream_writer):
                if w is not None:
                    self._writers.discard(w)
                    w.close()

    async def _forward_requests(self, reader: asyncio.StreamReader,
                                upstream: asyncio.StreamWriter,
                                client: asyncio.StreamWriter) -> None:
        """Read each HTTP/1.1 request (head + Content-Length body) and apply the rule:
        forward it to `upstream`, or answer it on `client` (modes status and html; the
        client sends its next request only after this answer, so no upstream answer
        is interleaved with it)."""
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return  # the client closed the connection
            lines = head.decode("latin-1").split("\r\n")
            method, path = (lines[0].split(" ") + ["", ""])[:2]
            headers = {k.strip().lower(): v.strip() for k, _, v in
                       (line.partition(":") for line in lines[1:] if line)}
            if "chunked" in headers.get("transfer-encoding", ""):
                raise ConnectionError("apiproxy: chunked request bodies are not supported")
            body = await reader.readexactly(int(headers.get("content-length") or 0))
            self.requests.append(f"{method} {path}")
            rule = self._rule
            if rule.applies(method):
                if rule.mode == "hang":
                    await _drain_until_eof(reader)
                    return
                if rule.mode == "delay":
                    await asyncio.sleep(rule.seconds)
                if rule.mode in ANSWERING:
                    self._answer(rule, method, path, client)
                    await client.drain()
                    continue
            hook = self._hooks.get(method)
            if hook is not None:
                try:
                    await asyncio.get_running_loop().run_in_executor(None, hook)
                except Exception as e:
                    self.errors.append(e)
                    return
            upstream.write(head + body)
            await upstream.drain()

    async def _answers(self, upstream: asyncio.StreamReader, client: asyncio.StreamWriter) -> None:
        """Copy the API server's answers back; one byte at a time in trickle mode."""
        try:
            while data := await upstream.read(65536):
                rule = self._rule
                if rule.mode == "trickle" and rule.applies(self._last_method()):
                    for i in range(len(data)):
                        client.write(data[i:i + 1])
                        await client.drain()
                        await asyncio.sleep(rule.seconds)
                else:
                    client.write(data)
                    await client.drain()
        except (OSError, ssl.SSLError, ConnectionError):
            pass
        finally:
            client.close()

    def _answer(self, rule: _Rule, method: str, path: str, client: asyncio.StreamWriter) -> None:
        """Write the proxy's own answer to one request (modes status and html) and count
        it against `count`; after the last one, the rule is pass."""
        if rule.mode == "html":
            status, body, headers = 200, HTML_PAGE, {"Content-Type": "text/html; charset=utf-8"}
        else:
            status, headers = rule.status, {"Content-Type": "application/json"}
            body = json.dumps({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": f"apiproxy: {HTTPStatus(status).phrase.lower()}, please try again later",
                "reason": HTTPStatus(status).phrase.replace(" ", ""), "code": status}).encode()
            if rule.retry_after is not None:
                headers["Retry-After"] = rule.retry_after
        head = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}",
                *(f"{k}: {v}" for k, v in headers.items()), f"Content-Length: {len(body)}"]
        client.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
        self.answered.append(f"{status} {method} {path}")
        if self._count is not None:
            self._count -= 1
            if self._count <= 0:
                self._count, self._rule = None, _Rule()

    def _last_method(self) -> str | None:
        return self.requests[-1].split(" ")[0] if self.requests else None


async def _drain_until_eof(reader: asyncio.StreamReader) -> None:
    while await reader.read(65536):
        pass


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with an RST (SO_LINGER 0), as a server that went away would."""
    sock = writer.get_extra_info("socket")
    try:
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    writer.transport.abort()

