"""The daemon's HTTP endpoints on a local port: `/healthz` (200 while the socket's accept
loop runs), `/readyz` (200 once listening and both caches are listed, else 503) and
Prometheus `/metrics` (prometheus_client's text format), served by the standard
library's ThreadingHTTPServer.

Metrics (all prefixed `netattach_`):
* requests_total{command,code}: CNI calls served, by CNI_COMMAND and result ("0", or
  the CNI error code);
* request_duration_seconds{command}: histogram of the time from the call's arrival to
  its answer;
* attachments_total: attachments made by successful ADDs;
* in_flight_requests: calls being served now;
* child_seconds_total: seconds spent waiting for child plugins (cni.invoke);
* api_requests_total{source}: requests to the API server: "operation" (live reads and
  queued writes, kube.requests_made), "watch" (LIST and WATCH);
* cache_objects{kind}, cache_synced{kind} (1 once listed), cache_watching{kind} (1 while
  a WATCH is established), cache_misses_total{kind} (live reads: not in the cache);
* publish_{sent,failed,dropped}_total, publish_pending: the queued writes
  (network-status PATCH, Events): sent, tries that failed, given up or cancelled by a
  DEL, waiting now;
* hotplug_changes_total{result}: hot-plug (daemon/hotplug.py): attachments "added" and
  "removed", "failed" (a child or the delegate failed), "refused" changes and
  "deferred" steps (a failed one skipped while its backoff runs);
* hotplug_queued: pods waiting in the hot-plug queue (one entry per pod at most);
* with --dra (daemon/dra.py): dra_registered (1 registered, 0 refused by the kubelet,
  -1 before its verdict), dra_prepared_claims_total{result} (NodePrepareResources, per
  claim: "ok" or "error"), dra_slice_generation (the pool generation last published, 0
  none yet), dra_slice_failures_total (reconciles that failed);
and prometheus_client's process_* metrics (RSS, CPU, open fds).
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.process_collector import ProcessCollector

from ..cni.invoke import child_seconds
from ..kube import requests_made
from .server import Daemon

log = logging.getLogger("netattach.daemon")

BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Seconds: a cached ADD of a few networks takes 0.05-0.5 s; children and apiTimeout
bound the tail."""


class _Collector:
    """Reads the daemon's counters at each scrape."""

    def __init__(self, daemon: Daemon):
        self.d = daemon

    def collect(self) -> Iterator[Any]:
        d = self.d
        with d.stats.lock:
            requests = dict(d.stats.requests)
            attachments = d.stats.attachments
            misses = dict(d.stats.misses)
            in_flight = d.in_flight
        c = CounterMetricFamily("netattach_requests", "CNI calls served, by command and "
                                "result code (0: success)", labels=["command", "code"])
        for (command, code), n in sorted(requests.items()):
            c.add_metric([command, code], n)
        yield c
        yield CounterMetricFamily("netattach_attachments", "attachments made by successful "
                                  "ADDs", value=attachments)
        yield GaugeMetricFamily("netattach_in_flight_requests", "CNI calls being served",
                                value=in_flight)
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
        for cache in (d.pods, d.nads):
            objects.add_metric([cache.kind], len(cache))
            synced.add_metric([cache.kind], int(cache.synced.is_set()))
            watching.add_metric([cache.kind], int(cache.watching))
            miss.add_metric([cache.kind], misses.get(cache.kind, 0))
        yield from (objects, synced, watching, miss)
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
    histogram into its Stats."""
    registry = CollectorRegistry()
    registry.register(_Collector(daemon))
    ProcessCollector(registry=registry)
    durations = Histogram("netattach_request_duration_seconds", "time to answer a CNI call",
                          ["command"], buckets=BUCKETS, registry=registry)
    daemon.stats.observers.append(
        lambda command, code, seconds: durations.labels(command).observe(seconds))
    return registry


def serve(daemon: Daemon, address: str, port: int) -> ThreadingHTTPServer:
    """Start the endpoints on `address`:`port` (0: any free port; see server_port) in a
    thread; returns the server. Raises OSError when the port cannot be bound."""
    registry = registry_for(daemon)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._answer(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                ok = daemon.alive()
                self._answer(200 if ok else 503, b"ok\n" if ok else b"accept loop stopped\n")
            elif path == "/readyz":
                ok = daemon.ready()
                self._answer(200 if ok else 503, b"ok\n" if ok else
                             b"not ready: socket not listening or caches not listed yet\n")
            else:
                self._answer(404, b"not found\n")

        def _answer(self, status: int, body: bytes, ctype: str = "text/plain") -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("metrics endpoint: " + format, *args)

    server = ThreadingHTTPServer((address, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
