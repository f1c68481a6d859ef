"""The daemon's HTTP endpoints: `/healthz` (200 while the socket's accept loop runs),
`/readyz` (200 once listening and both caches are listed, unless the pool has been
saturated longer than --saturation-timeout; else 503 saying why:
server.Daemon.readiness) and Prometheus
`/metrics` (prometheus_client's text format), on the address the admin gives
(`--metrics-address`: the node's IP in deploy/thick, IPv4 or IPv6) and port.

The server (`EndpointServer`) is one thread running an asyncio loop, whatever the
number of connections: the port is reachable from the node's network, so a tenant's
pod can open connections to it and leave them idle (issue 21). prometheus_client's
own server (start_http_server) and the standard library's ThreadingHTTPServer spend a
thread on each connection until it closes, so 200 idle sockets cost 200 threads. Here:
* a connection has `idle_timeout` seconds (--metrics-idle-timeout, 10) to send its
  request head (at most MAX_HEAD bytes) and to take its answer, else it is closed
  (Go's http.Server ReadHeaderTimeout/WriteTimeout);
* at most `max_connections` (--metrics-max-connections, 64) are open; one more closes
  the oldest still waiting for its request (the first to have been left idle), so a
  probe or a scrape is always answered;
* one request per connection (`Connection: close`), GET or HEAD.

Metrics (all prefixed `netattach_`):
* requests_total{command,code}: CNI calls served, by CNI_COMMAND and result ("0", or
  the CNI error code);
* request_duration_seconds{command}: histogram of the time from the call's arrival to
  its answer;
* delegate_duration_seconds{plugin_type,command,result}: histogram of each child
  plugin's execution, for the runtime's calls and hot-plug alike (delegates.py: what
  each label holds and how it is bounded);
* build_info{version,commit,python}: 1; the release, the git commit the daemon was built
  from (buildinfo.py) and the Python it runs on;
* attachments_total: attachments made by successful ADDs;
* in_flight_requests: calls being served now;
* waiting_requests: calls waiting in the queue, for a worker or for their sandbox's
  call running (daemon/admission.py);
* pool_saturated_seconds: how long every worker has been busy with a call waiting for
  one (0 when not saturated);
* requests_refused_total{bound}: calls refused with code 11 at arrival, by the bound
  they passed: "sandbox" (too many of one sandbox wait), "queue" (--max-queued);
* adds_abandoned_total: ADDs stopped and rolled back because their shim's connection
  closed (add.py, "Abandoned");
* child_seconds_total: seconds spent waiting for child plugins (cni.invoke);
* api_requests_total{source}: requests to the API server: "operation" (live reads and
  queued writes, kube.requests_made), "watch" (LIST and WATCH);
* cache_objects{kind}, cache_synced{kind} (1 once listed), cache_watching{kind} (1 while
  a WATCH is established), cache_misses_total{kind} (live reads: not in the cache),
  cache_changed_resource_version{kind} and cache_changed_timestamp_seconds{kind} (the
  resourceVersion of the last change stored, LIST or watch event, and when: how fast a
  NAD reaches every node's cache, hack/bench_cluster.py);
* publish_{sent,failed,dropped}_total, publish_pending: the queued writes
  (network-status PATCH, Events): sent, tries that failed, given up or cancelled by a
  DEL, waiting now;
* hotplug_changes_total{result}: hot-plug (daemon/hotplug.py): attachments "added" and
  "removed", "failed" (a child or the delegate failed), "refused" changes and
  "deferred" steps (a failed one skipped while its backoff runs);
* hotplug_queued: pods waiting in the hot-plug queue (one entry per pod at most);
* metrics_connections (open now), metrics_connections_closed_total{reason}: the
  endpoints' connections closed unanswered, "idle" (idle_timeout passed), "evicted"
  (the oldest idle one, at max_connections), "bad" (not an HTTP request head);
* with --dra (daemon/dra.py): dra_registered (1 registered, 0 refused by the kubelet,
  -1 before its verdict), dra_prepared_claims_total{result} (NodePrepareResources, per
  claim: "ok" or "error"), dra_slice_generation (the pool generation last published, 0
  none yet), dra_slice_failures_total (reconciles that failed);
and prometheus_client's process_* metrics (RSS, CPU, open fds).
docs/metrics.md is the reference table of all of them (name, type, labels, unit).
"""
from __future__ import annotations

import asyncio
import logging
import platform
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.process_collector import ProcessCollector

from .. import __version__
from ..buildinfo import commit
from ..cni.invoke import child_seconds
from ..kube.session import requests_made
from .server import Daemon

log = logging.getLogger("netattach.daemon")

BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Seconds: a cached ADD of a few networks takes 0.05-0.5 s; children and apiTimeout
bound the tail."""
DELEGATE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Seconds: a reference plugin's ADD or DEL takes 5-50 ms (its exec included); DHCP or a
slow IPAM takes seconds; a child's timeout ends it."""


class _Collector:
    """Reads the daemon's counters at each scrape."""

    def __init__(self, daemon: Daemon):
        self.d = daemon
        self.build = (__version__, commit(), platform.python_version())

    def collect(self) -> Iterator[Any]:
        d = self.d
        info = GaugeMetricFamily("netattach_build_info", "1; the release, the git commit it "
                                 "was built from and the Python it runs on",
                                 labels=["version", "commit", "python"])
        info.add_metric(list(self.build), 1)
        yield info
        with d.stats.lock:
            requests = dict(d.stats.requests)
            attachments = d.stats.attachments
            misses = dict(d.stats.misses)
            in_flight = d.in_flight
            refused = dict(d.stats.refused)
            abandoned = d.stats.abandoned
        c = CounterMetricFamily("netattach_requests", "CNI calls served, by command and "
                                "result code (0: success)", labels=["command", "code"])
        for (command, code), n in sorted(requests.items()):
            c.add_metric([command, code], n)
        yield c
        yield CounterMetricFamily("netattach_attachments", "attachments made by successful "
                                  "ADDs", value=attachments)
        yield GaugeMetricFamily("netattach_in_flight_requests", "CNI calls being served",
                                value=in_flight)
        yield GaugeMetricFamily("netattach_waiting_requests", "CNI calls waiting for a "
                                "worker or for their sandbox's call", value=d.calls.waiting())
        yield GaugeMetricFamily("netattach_pool_saturated_seconds", "seconds every worker "
                                "has been busy with a call waiting for one (0: not saturated)",
                                value=d.calls.saturated_for())
        c = CounterMetricFamily("netattach_requests_refused", "CNI calls refused with code 11 "
                                "at arrival, by the bound passed", labels=["bound"])
        for bound in ("sandbox", "queue"):
            c.add_metric([bound], refused.get(bound, 0))
        yield c
        yield CounterMetricFamily("netattach_adds_abandoned", "ADDs abandoned and rolled back "
                                  "because their shim's connection closed", value=abandoned)
        yield CounterMetricFamily("netattach_child_seconds", "seconds spent in child "
                                  "plugins", value=child_seconds())
        c = CounterMetricFamily("netattach_api_requests", "requests to the API server",
                                labels=["source"])
        c.add_metric(["operation"], requests_made())
        c.add_metric(["watch"], d.pods.requests + d.nads.requests)
        yield c
        objects = GaugeMetricFamily("netattach_cache_objects", "objects in the watch cache",
                                    labels=["kind"])
        synced = GaugeMetricFamily("netattach_cache_synced", "1 once the cache is listed",
                                   labels=["kind"])
        watching = GaugeMetricFamily("netattach_cache_watching", "1 while the cache's WATCH "
                                     "is established", labels=["kind"])
        miss = CounterMetricFamily("netattach_cache_misses", "reads the cache could not "
                                   "answer (asked live)", labels=["kind"])
        changed_rv = GaugeMetricFamily(
            "netattach_cache_changed_resource_version", "resourceVersion of the last change "
            "stored in the cache (LIST or watch event, not bookmarks), as a number; NaN "
            "before the first or when not a number", labels=["kind"])
        changed_at = GaugeMetricFamily(
            "netattach_cache_changed_timestamp_seconds", "when that change was stored "
            "(seconds since the epoch; 0 before the first)", labels=["kind"])
        for cache in (d.pods, d.nads):
            rv, at = cache.changed
            changed_rv.add_metric([cache.kind], float(rv) if rv.isdigit() else float("nan"))
            changed_at.add_metric([cache.kind], at)
            objects.add_metric([cache.kind], len(cache))
            synced.add_metric([cache.kind], int(cache.synced.is_set()))
            watching.add_metric([cache.kind], int(cache.watching))
            miss.add_metric([cache.kind], misses.get(cache.kind, 0))
        yield from (objects, synced, watching, miss, changed_rv, changed_at)
        p = d.publisher
        for name, value in (("sent", p.sent), ("failed", p.failed), ("dropped", p.dropped)):
            yield CounterMetricFamily(f"netattach_publish_{name}", f"queued network-status "
                                      f"and event writes {name}", value=value)
        yield GaugeMetricFamily("netattach_publish_pending", "queued writes not sent yet",
                                value=p.pending())
        with d.hotplug.lock:
            changes = dict(d.hotplug.changes)
        c = CounterMetricFamily("netattach_hotplug_changes", "hot-plug changes of running "
                                "pods' attachments, by result", labels=["result"])
        for result, n in sorted(changes.items()):
            c.add_metric([result], n)
        yield c
        yield GaugeMetricFamily("netattach_hotplug_queued", "pods waiting in the hot-plug "
                                "queue (one entry per pod at most)", value=d.hotplug.queued())
        if d.dra is not None:
            yield from _dra_metrics(d.dra)


def _dra_metrics(plugin: Any) -> Iterator[Any]:
    """The DRA kubelet plugin's metrics (module doc)."""
    with plugin.registration.lock:
        registered = plugin.registration.registered
    yield GaugeMetricFamily("netattach_dra_registered", "1: the kubelet registered the DRA "
                            "driver, 0: it refused, -1: no verdict yet",
                            value=-1 if registered is None else int(registered))
    with plugin.prepares.lock:
        ok, failed = plugin.prepares.ok, plugin.prepares.failed
    c = CounterMetricFamily("netattach_dra_prepared_claims", "claims answered by "
                            "NodePrepareResources", labels=["result"])
    c.add_metric(["ok"], ok)
    c.add_metric(["error"], failed)
    yield c
    yield GaugeMetricFamily("netattach_dra_slice_generation", "pool generation of the "
                            "ResourceSlice last published", value=plugin.publisher.generation)
    yield CounterMetricFamily("netattach_dra_slice_failures", "ResourceSlice reconciles that "
                              "failed", value=plugin.publisher.failures)


def registry_for(daemon: Daemon) -> CollectorRegistry:
    """A registry of the daemon's metrics (module doc); also hooks the duration
    histograms into its Stats and its executor (delegates.TimedExecutor)."""
    # no `<histogram>_created` series beside each label set's buckets: the text format
    # would carry them as gauges of their own (one more series per label set), and
    # nothing here reads them (prometheus_client's setting is the process's)
    disable_created_metrics()
    registry = CollectorRegistry()
    registry.register(_Collector(daemon))
    ProcessCollector(registry=registry)
    durations = Histogram("netattach_request_duration_seconds", "time to answer a CNI call",
                          ["command"], buckets=BUCKETS, registry=registry)
    daemon.stats.observers.append(
        lambda command, code, seconds: durations.labels(command).observe(seconds))
    delegates = Histogram("netattach_delegate_duration_seconds", "time one execution of a "
                          "child plugin took, by its type, its CNI command and how it ended",
                          ["plugin_type", "command", "result"], buckets=DELEGATE_BUCKETS,
                          registry=registry)
    daemon.executor.observers.append(
        lambda plugin_type, command, result, seconds:
        delegates.labels(plugin_type, command, result).observe(seconds))
    return registry


MAX_CONNECTIONS = 64
"""Connections open at once at most (--metrics-max-connections): a kubelet probing two
endpoints and a few scrapers need a handful."""
IDLE_TIMEOUT = 10.0
"""Seconds a connection has to send its request head, and again to take its answer
(--metrics-idle-timeout)."""
MAX_HEAD = 8192
"""Bytes of a request head at most (request line and headers)."""

Handler = Callable[[str], tuple[int, bytes, str]]
"""path -> (HTTP status, body, Content-Type)."""

REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
           503: "Service Unavailable"}


def bind(address: str, port: int) -> socket.socket:
    """A listening TCP socket on `address` (an IPv4 or IPv6 address, "[v6]" accepted, or a
    name resolved by getaddrinfo: its first address) and `port` (0: any free one).
    Raises OSError."""
    host = address[1:-1] if address.startswith("[") and address.endswith("]") else address
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise OSError(f"--metrics-address {address!r}: {e.strerror}") from None
    family, kind, proto, _, sockaddr = infos[0]
    sock = socket.socket(family, kind | socket.SOCK_CLOEXEC, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
        sock.listen(128)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class EndpointServer:
    """HTTP/1.x endpoints served by one asyncio thread (module doc).

    handle: path -> (status, body, content type), called in the server's thread;
    sock: a listening socket (`bind`); max_connections, idle_timeout: the bounds.
    `start` runs it, `shutdown` stops it and closes every connection. Counters (read
    by the metrics): `closed` by reason ("idle", "evicted", "bad"), `open_connections`.
    """

    def __init__(self, handle: Handler, sock: socket.socket,
                 max_connections: int = MAX_CONNECTIONS, idle_timeout: float = IDLE_TIMEOUT):
        self.handle = handle
        self.sock = sock
        self.max_connections, self.idle_timeout = max_connections, idle_timeout
        self.closed = {"idle": 0, "evicted": 0, "bad": 0}
        self._open: dict[asyncio.WriteTransport, bool] = {}  # oldest first -> answering
        self._loop = asyncio.new_event_loop()
        self._stopping: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="metrics", daemon=True)
        self._started = threading.Event()

    @property
    def server_port(self) -> int:
        return int(self.sock.getsockname()[1])

    @property
    def open_connections(self) -> int:
        return len(self._open)

    def start(self) -> None:
        self._thread.start()
        self._started.wait()

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop serving, close every connection and the socket (waits up to `timeout` s
        for the thread)."""
        if self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(timeout)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
        except Exception:  # a bug: logged; /healthz no longer answers, the kubelet restarts us
            log.exception("metrics endpoint: the server stopped")
        finally:
            self._started.set()
            self._loop.close()
            self.sock.close()

    async def _main(self) -> None:
        self._stopping = asyncio.Event()
        server = await asyncio.start_server(self._client, sock=self.sock, limit=MAX_HEAD)
        self._started.set()
        await self._stopping.wait()
        server.close()
        for transport in list(self._open):
            transport.abort()
        await server.wait_closed()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        transport = writer.transport
        if len(self._open) >= self.max_connections:
            idle = [t for t, answering in self._open.items() if not answering]
            oldest = idle[0] if idle else next(iter(self._open))
            del self._open[oldest]
            oldest.abort()
            self.closed["evicted"] += 1
        self._open[transport] = False
        try:
            await self._serve_one(reader, writer, transport)
        except (ConnectionError, OSError):
            pass  # the peer went away (or was evicted) while we wrote
        except Exception:  # a bug in a handler: logged, the connection closed
            log.exception("metrics endpoint: serving a request failed")
        finally:
            self._open.pop(transport, None)
            transport.abort()

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         transport: asyncio.WriteTransport) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.idle_timeout)
        except TimeoutError:
            self.closed["idle"] += 1
            return
        except asyncio.LimitOverrunError:
            self.closed["bad"] += 1
            return
        except asyncio.IncompleteReadError:
            return  # closed by the peer (or evicted) before a whole request head
        if transport not in self._open:
            return  # evicted while its head arrived
        self._open[transport] = True
        parts = head.split(b"\r\n", 1)[0].decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            self.closed["bad"] += 1
            status, body, ctype = 400, b"bad request\n", "text/plain"
        elif parts[0] not in ("GET", "HEAD"):
            status, body, ctype = 405, b"GET only\n", "text/plain"
        else:
            status, body, ctype = self.handle(parts[1].split("?", 1)[0])
        writer.write(b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
                     b"Connection: close\r\n\r\n" % (status, REASONS.get(status, "").encode(),
                                                     ctype.encode(), len(body)))
        if parts[0] != "HEAD":
            writer.write(body)
        try:
            await asyncio.wait_for(writer.drain(), self.idle_timeout)
        except TimeoutError:
            self.closed["idle"] += 1


class _ServerCollector:
    """The endpoints' own connections (module doc)."""

    def __init__(self, server: EndpointServer):
        self.server = server

    def collect(self) -> Iterator[Any]:
        yield GaugeMetricFamily("netattach_metrics_connections", "connections open to the "
                                "metrics and health endpoints",
                                value=self.server.open_connections)
        c = CounterMetricFamily("netattach_metrics_connections_closed", "connections to the "
                                "endpoints closed unanswered, by reason", labels=["reason"])
        for reason, n in sorted(self.server.closed.items()):
            c.add_metric([reason], n)
        yield c


def serve(daemon: Daemon, address: str, port: int, max_connections: int = MAX_CONNECTIONS,
          idle_timeout: float = IDLE_TIMEOUT) -> EndpointServer:
    """Start the endpoints on `address`:`port` (0: any free port; see server_port) in
    one thread; returns the server. max_connections, idle_timeout: the bounds (module
    doc). Raises OSError when the address cannot be bound."""
    registry = registry_for(daemon)

    def handle(path: str) -> tuple[int, bytes, str]:
        if path == "/metrics":
            return 200, generate_latest(registry), CONTENT_TYPE_LATEST
        if path == "/healthz":
            ok = daemon.alive()
            return (200, b"ok\n", "text/plain") if ok else \
                (503, b"accept loop stopped\n", "text/plain")
        if path == "/readyz":
            ok, why = daemon.readiness()
            return (200, b"ok\n", "text/plain") if ok else \
                (503, f"not ready: {why}\n".encode(), "text/plain")
        return 404, b"not found\n", "text/plain"

    server = EndpointServer(handle, bind(address, port), max_connections, idle_timeout)
    registry.register(_ServerCollector(server))
    server.start()
    return server
