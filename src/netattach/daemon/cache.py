"""Watch-backed caches of the node daemon: the pods of this node and every
NetworkAttachmentDefinition, kept current by LIST + WATCH as client-go's reflector does
(k8s.io/client-go/tools/cache/reflector.go: list, then watch from the list's
resourceVersion; bookmarks advance it; a watch that ends is resumed from the last
resourceVersion seen; 410 Gone, "too old resource version", relists).

The HTTP client is lightkube's (config.kubeconfig.KubeConfig + config.client_adapter:
an httpx2 client with the kubeconfig's server, CA, client certificate and bearer token
or token file) used for raw REST, as kube.py uses it: objects stay JSON dicts, and only
the fields the orchestrator reads are kept (`trim`), so a node's cache stays small.
Each LIST and WATCH re-reads the kubeconfig, so a rotated token is picked up by the
next reconnect (a watch ends at least every WATCH_SECONDS).
"""
from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..kube import NAD_GROUP, NAD_PLURAL, NAD_VERSION, lightkube_client

log = logging.getLogger("netattach.daemon")

WATCH_SECONDS = 300
"""timeoutSeconds of each WATCH (the API server ends it then; it is resumed at once)."""
LIST_LIMIT = 500
"""Objects per LIST page (`limit`, followed by `continue`)."""
BACKOFF = (0.5, 1.0, 2.0, 4.0, 8.0)
"""Seconds before reconnecting after the n-th failure in a row (the last repeats)."""

PODS = "Pod"
NADS = "NetworkAttachmentDefinition"


def trim(obj: dict[str, Any]) -> dict[str, Any]:
    """The part of a Pod or NetworkAttachmentDefinition the orchestrator reads
    (networks.build_plan: metadata.uid, .annotations; delegates: spec.config;
    devices.nad_resource_name: metadata.annotations; podapi.republish:
    metadata.deletionTimestamp; claims.pod_claims: spec.resourceClaims,
    status.resourceClaimStatuses): {"metadata": {name, namespace, uid, resourceVersion,
    annotations, deletionTimestamp}, "spec": {"config"} for a NAD, "spec":
    {"resourceClaims"} and "status": {"resourceClaimStatuses"} for a pod with claims}."""
    meta = obj.get("metadata") or {}
    out: dict[str, Any] = {"metadata": {k: meta[k] for k in (
        "name", "namespace", "uid", "resourceVersion", "annotations", "deletionTimestamp")
        if k in meta}}
    spec = obj.get("spec")
    if isinstance(spec, dict) and "config" in spec:
        out["spec"] = {"config": spec["config"]}
    # a pod's DRA ResourceClaims (claims.pod_claims): the references and the names of
    # the claims generated from templates
    if isinstance(spec, dict) and spec.get("resourceClaims"):
        out["spec"] = {"resourceClaims": spec["resourceClaims"]}
    status = obj.get("status")
    if isinstance(status, dict) and status.get("resourceClaimStatuses"):
        out["status"] = {"resourceClaimStatuses": status["resourceClaimStatuses"]}
    return out


class Gone(Exception):
    """The API server no longer has the resourceVersion asked for (HTTP 410): relist."""


class WatchCache:
    """One kind's cache: `get(namespace, name)` answers from memory once `synced`.

    kind: PODS or NADS (for logs and metrics); path: the collection's API path;
    selector: a fieldSelector ("spec.nodeName=<node>") or None; connect: returns a new
    httpx2 client (kube.py's way of loading the kubeconfig) and is called for each
    LIST and WATCH.

    `synced` is set once the first LIST is stored and stays set; `watching` is true
    while a WATCH is established (false while reconnecting: the cache may be behind).
    `events` counts the watch events applied, `requests` the LIST and WATCH requests.
    `listeners`: functions called as `listener(old, new)` (trimmed objects; old None
    when it was not cached, new None when it was deleted) after each change is stored,
    from the watch thread, for every object of a LIST too (hot-plug); they must be
    quick and must not raise.
    """

    def __init__(self, kind: str, path: str, selector: str | None,
                 connect: Callable[[], Any]):
        self.kind = kind
        self.path = path
        self.selector = selector
        self.connect = connect
        self.synced = threading.Event()
        self.watching = False
        self.requests = 0
        self.events = 0
        self._objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.listeners: list[Callable[[dict[str, Any] | None, dict[str, Any] | None], None]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch-{kind}", daemon=True)

    # -- reading

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The cached object (trimmed, see `trim`; do not modify it), or None."""
        with self._lock:
            return self._objects.get((namespace, name))

    def __len__(self) -> int:
        with self._lock:
            return len(self._objects)

    # -- lifecycle

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        failures = 0
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._list()
                    failures = 0
                version = self._watch(version)
                failures = 0
            except Gone:
                log.info("watch %s: resourceVersion %s is too old (410 Gone): listing again",
                         self.kind, version)
                version = None
            except Exception as e:  # the API server went away, a bad answer, TLS...
                self.watching = False
                pause = BACKOFF[min(failures, len(BACKOFF) - 1)] * (1 + 0.1 * random.random())
                failures += 1
                log.warning("watch %s: %s: %s; the cache keeps its %d objects and reconnects "
                            "in %.1f s", self.kind, type(e).__name__, str(e)[:300], len(self),
                            pause)
                self._stop.wait(pause)

    def _params(self) -> dict[str, str]:
        return {"fieldSelector": self.selector} if self.selector else {}

    def _list(self) -> str:
        """LIST every page; replace the cache. Returns the list's resourceVersion."""
        http = self.connect()
        objects: dict[tuple[str, str], dict[str, Any]] = {}
        params = {**self._params(), "limit": str(LIST_LIMIT)}
        try:
            while True:
                self.requests += 1
                resp = http.get(self.path, params=params)
                if resp.status_code == 410:
                    raise Gone()
                if resp.status_code != 200:
                    raise RuntimeError(f"LIST {self.path}: HTTP {resp.status_code}: "
                                       f"{resp.text[:200]}")
                doc = resp.json()
                for item in doc.get("items") or []:
                    meta = item.get("metadata") or {}
                    objects[(meta.get("namespace", ""), meta.get("name", ""))] = trim(item)
                meta = doc.get("metadata") or {}
                if not meta.get("continue"):
                    version = str(meta.get("resourceVersion", ""))
                    break
                params["continue"] = meta["continue"]
        finally:
            http.close()
        with self._lock:
            before, self._objects = self._objects, objects
        for key, obj in objects.items():
            self._tell(before.get(key), obj)
        for key in before.keys() - objects.keys():
            self._tell(before[key], None)
        self.synced.set()
        log.info("cache %s: listed %d objects (resourceVersion %s)", self.kind, len(objects),
                 version)
        return version

    def _watch(self, version: str) -> str:
        """One WATCH from `version` until the server ends it; returns the last
        resourceVersion seen. Raises Gone on 410, anything else on failures."""
        http = self.connect()
        params = {**self._params(), "watch": "1", "resourceVersion": version,
                  "allowWatchBookmarks": "true", "timeoutSeconds": str(WATCH_SECONDS)}
        import httpx2
        timeout = httpx2.Timeout(10.0, read=WATCH_SECONDS + 30.0)
        try:
            self.requests += 1
            with http.stream("GET", self.path, params=params, timeout=timeout) as resp:
                if resp.status_code == 410:
                    raise Gone()
                if resp.status_code != 200:
                    resp.read()
                    raise RuntimeError(f"WATCH {self.path}: HTTP {resp.status_code}: "
                                       f"{resp.text[:200]}")
                self.watching = True
                log.debug("watch %s: from resourceVersion %s", self.kind, version)
                for event in _events(resp.iter_lines()):
                    if self._stop.is_set():
                        break
                    version = self._apply(event, version)
        finally:
            self.watching = False
            http.close()
        return version

    def _apply(self, event: dict[str, Any], version: str) -> str:
        """Apply one watch event; returns the resourceVersion it carries."""
        kind, obj = event.get("type"), event.get("object") or {}
        meta = obj.get("metadata") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone()
            raise RuntimeError(f"WATCH {self.path}: error event: {obj.get('message', obj)}")
        rv = str(meta.get("resourceVersion") or version)
        if kind == "BOOKMARK":
            return rv
        key = (meta.get("namespace", ""), meta.get("name", ""))
        new = None if kind == "DELETED" else trim(obj)
        with self._lock:
            old = self._objects.pop(key, None) if new is None else self._objects.get(key)
            if new is not None:
                self._objects[key] = new
        self._tell(old, new)
        self.events += 1
        log.debug("cache %s %s/%s %s (resourceVersion %s)", self.kind, key[0], key[1], kind, rv)
        return rv

    def _tell(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        for listener in self.listeners:
            try:
                listener(old, new)
            except Exception:  # a bug in a listener never stops the watch
                log.exception("cache %s: a listener failed", self.kind)


def _events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """The watch stream's events: one JSON object per line (empty lines skipped)."""
    for line in lines:
        if line.strip():
            yield json.loads(line)


def connector(kubeconfig: str | None) -> Callable[[], Any]:
    """A function returning a new httpx2 client for `kubeconfig` (None: lightkube's
    default lookup, in-cluster first), loaded anew on each call (token rotation)."""
    return lambda: lightkube_client(kubeconfig, 10.0)[0]


def node_caches(kubeconfig: str | None, node_name: str) -> tuple[WatchCache, WatchCache]:
    """(pods of `node_name`, NetworkAttachmentDefinitions of every namespace), not
    started."""
    connect = connector(kubeconfig)
    pods = WatchCache(PODS, "/api/v1/pods", f"spec.nodeName={node_name}", connect)
    nads = WatchCache(NADS, f"/apis/{NAD_GROUP}/{NAD_VERSION}/{NAD_PLURAL}", None, connect)
    return pods, nads


def wait_until(predicate: Callable[[], bool], timeout: float) -> bool:
    """Poll `predicate` every 50 ms for up to `timeout` s; its last value."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True
