"""Watch-backed caches of the node daemon: the pods of this node and every
NetworkAttachmentDefinition, kept current by LIST + WATCH as client-go's reflector does
(k8s.io/client-go/tools/cache/reflector.go: list, then watch from the list's
resourceVersion; bookmarks advance it; a watch that ends is resumed from the last
resourceVersion seen; 410 Gone, "too old resource version", relists).

The HTTP client is the one kube/ chooses for the kubeconfig (`connector`: the standard
library's socket + ssl, kube/transport.py, for the kubeconfigs and the in-cluster
configuration it reads whole, else lightkube's httpx2 client) used for raw REST:
objects stay JSON dicts, and only the fields the orchestrator reads are kept (`trim`,
`nad_trimmer`), so a node's cache stays small. Each LIST and WATCH re-reads the
kubeconfig, so a rotated token is picked up by the next reconnect (a watch ends at
least every 2 x WATCH_SECONDS).

Bounded memory (issue 21): NetworkAttachmentDefinitions are tenants' objects, of any
namespace, up to the API server's object size (etcd's 1.5 MiB by default). The cache
keeps of each only what netattach reads, and of a NAD whose spec.config is over the
daemon's bound (`--max-nad-config-bytes`, DEFAULT_MAX_NAD_CONFIG) not the config but
a note that it was refused (REFUSED): a pod selecting it fails with code 7 naming the
NAD and the bound (podapi.CachedPodApi.get_nad), and the NAD gets a Warning event
(server.Daemon). A LIST is parsed as it streams in (ijson, `parse_list`), one object
at a time, so reading 100 NADs of 1 MiB holds about one of them, never the whole
answer; a WATCH event is one object per line.
"""
from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..kube.kubeconfig import lightkube_client
from ..kube.reads import NAD_GROUP, NAD_PLURAL, NAD_VERSION
from ..node.devices import RESOURCE_NAME_ANNOTATION

log = logging.getLogger("netattach.daemon")

WATCH_SECONDS = 300
"""The shortest timeoutSeconds of a WATCH (the API server ends it then; it is resumed at
once); each draws its own from [WATCH_SECONDS, 2 x WATCH_SECONDS) (`watch_seconds`)."""


def watch_seconds(rand: Callable[[], float] = random.random) -> int:
    """timeoutSeconds (s, an int) of one WATCH: WATCH_SECONDS x (1 + `rand()`), `rand`
    in [0, 1), as client-go's reflector draws its own (minWatchTimeout 5 min x (1 +
    rand), k8s.io/client-go/tools/cache/reflector.go). The daemons of every node start
    together after an API server restart or a rollout; with one fixed timeout they would
    all re-open their WATCHes in the same second every 5 minutes from then on."""
    return int(WATCH_SECONDS * (1.0 + rand()))
LIST_LIMIT = 500
"""Objects per LIST page (`limit`, followed by `continue`)."""
BACKOFF = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 120.0)
"""Seconds before reconnecting after the n-th failure in a row (the last repeats): an
API server that keeps refusing (overloaded, shutting down) hears from each node's
daemon at most every two minutes, not every few seconds (client-go's reflector backs
off to 30 s; every node runs a daemon). An answer's Retry-After, when longer, wins
(`Refused.retry_after`). Each pause is drawn with full jitter (`reconnect_pause`)."""
MIN_PAUSE = 0.05
"""Seconds, the shortest reconnect pause (`reconnect_pause`): never a busy loop."""


def reconnect_pause(failures: int, retry_after: float | None = None,
                    rand: Callable[[], float] = random.random,
                    elapsed: float | None = None) -> float:
    """Seconds to wait before reconnecting after the `failures`-th failure in a row
    (0: the first): full jitter, uniform in [MIN_PAUSE, step], the step BACKOFF[failures]
    (the last one repeats), so the daemons of every node, whose watches all broke at the
    same moment when the API server restarted, come back spread over the whole step
    instead of together (no thundering herd of LISTs). `elapsed`: seconds since the
    first failure in a row; the step is then at most that (but at least BACKOFF[0]):
    full jitter draws short pauses, so failures come fast and the count alone would
    reach the 64 s step in a 15 s outage; capped by the time, a daemon is back within
    about the outage's length after the API server is. Bounded: never more than the
    step, nor less than MIN_PAUSE. A `retry_after` (the answer's Retry-After) longer than
    the pause wins, itself capped at 600 s. `rand`: [0, 1) (random.random; tests pass
    their own)."""
    step = BACKOFF[min(max(failures, 0), len(BACKOFF) - 1)]
    if elapsed is not None:
        step = min(step, max(BACKOFF[0], elapsed))
    pause = max(MIN_PAUSE, step * rand())
    if retry_after is not None:
        pause = max(pause, min(retry_after, 600.0))
    return pause


class Refused(RuntimeError):
    """The API server answered a LIST or WATCH with an error status; `retry_after`: the
    seconds its Retry-After header asks to wait (kube.session.retry_after), None without one."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


def _refused(what: str, resp: Any) -> Refused:
    """The Refused of a non-200 answer (its body read)."""
    from ..kube.session import retry_after
    resp.read()
    return Refused(f"{what}: HTTP {resp.status_code}: {resp.text[:200]}",
                   retry_after(resp.headers.get("Retry-After"), time.time()))

PODS = "Pod"
NADS = "NetworkAttachmentDefinition"

DEFAULT_MAX_NAD_CONFIG = 256 * 1024
"""Bytes (UTF-8) of a NAD's spec.config the daemon keeps at most (`--max-nad-config-bytes`):
a CNI config is a few hundred bytes to a few KiB; the bound is the API server's own for
all of an object's annotations (256 KiB, TotalAnnotationSizeLimitB)."""
NAD_ANNOTATIONS = (RESOURCE_NAME_ANNOTATION,)
"""The NAD annotations netattach reads (devices.nad_resource_name); no other is kept
(kubectl's last-applied-configuration would hold the whole config a second time)."""
REFUSED = "netattach.io/refused"
"""Key of a cached NAD whose config was not kept: {"bytes": its size, "limit": the
bound} (`nad_trimmer`)."""


def trim(obj: dict[str, Any]) -> dict[str, Any]:
    """The part of a Pod the orchestrator reads (the pod cache's trim; the NAD cache's is
    `nad_trimmer`, stricter; this one still keeps a NAD's spec.config)
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


def config_size(config: Any) -> int:
    """Bytes of a NAD's spec.config: a string's UTF-8 length (the CNI config as JSON
    text, what the spec says it is), else the length of the JSON of whatever it is."""
    if isinstance(config, str):
        return len(config.encode("utf-8", "surrogatepass"))
    return len(json.dumps(config))


def nad_trimmer(max_config: int) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The trim of the NAD cache: a NetworkAttachmentDefinition as
    {"metadata": {name, namespace, uid, resourceVersion, annotations: only
    NAD_ANNOTATIONS}, "spec": {"config"}}; with a spec.config of more than `max_config`
    bytes (config_size), {"metadata": ..., REFUSED: {"bytes": n, "limit": max_config}}
    instead of the spec (module doc)."""
    def trim_nad(obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.get("metadata") or {}
        out_meta = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion")
                    if k in meta}
        annotations = meta.get("annotations")
        if isinstance(annotations, dict):
            kept = {k: annotations[k] for k in NAD_ANNOTATIONS if k in annotations}
            if kept:
                out_meta["annotations"] = kept
        out: dict[str, Any] = {"metadata": out_meta}
        spec = obj.get("spec")
        if isinstance(spec, dict) and "config" in spec:
            size = config_size(spec["config"])
            if size > max_config:
                out[REFUSED] = {"bytes": size, "limit": max_config}
            else:
                out["spec"] = {"config": spec["config"]}
        return out
    return trim_nad


def parse_list(chunks: Iterable[bytes], keep: Callable[[dict[str, Any]], None]
               ) -> dict[str, Any]:
    """Parse the body of a LIST answer as it arrives in `chunks` (bytes), handing each
    object of `items` to `keep` as soon as it is complete; returns the list's metadata
    (resourceVersion, continue). One object is held at a time (ijson's incremental
    parser, C backend), whatever the size of the answer. Raises ValueError
    (ijson.JSONError) for a body that is not JSON, or not one object."""
    import ijson
    items: list[dict[str, Any]] = ijson.sendable_list()
    meta: list[tuple[str, Any]] = ijson.sendable_list()
    item_parser = ijson.items_coro(items, "items.item", use_float=True)
    meta_parser = ijson.kvitems_coro(meta, "metadata", use_float=True)
    try:
        for chunk in chunks:
            item_parser.send(chunk)
            meta_parser.send(chunk)
            for item in items:
                keep(item)
            del items[:]
        item_parser.close()
        meta_parser.close()
    except ijson.JSONError as e:
        raise ValueError(f"the LIST answer is not JSON: {e}") from None
    for item in items:
        keep(item)
    return dict(meta)


class Gone(Exception):
    """The API server no longer has the resourceVersion asked for (HTTP 410): relist."""


class WatchCache:
    """One kind's cache: `get(namespace, name)` answers from memory once `synced`.

    kind: PODS or NADS (for logs and metrics); path: the collection's API path;
    selector: a fieldSelector ("spec.nodeName=<node>") or None; connect: returns a new
    client (`connector`) and is called for each LIST and WATCH; trimmer: what of each
    object is kept (`trim`; the NADs': `nad_trimmer`).

    `synced` is set once the first LIST is stored and stays set; `watching` is true
    while a WATCH is established (false while reconnecting: the cache may be behind).
    `events` counts the watch events applied, `requests` the LIST and WATCH requests.
    `changed` is (resourceVersion, time.time()) of the last change stored (a LIST, or
    an ADDED, MODIFIED or DELETED event; bookmarks do not count), ("", 0.0) before the
    first: the metrics show it, so a bench can tell when an object reached the cache.
    `listeners`: functions called as `listener(old, new)` (trimmed objects; old None
    when it was not cached, new None when it was deleted) after each change is stored,
    from the watch thread, for every object of a LIST too (hot-plug); they must be
    quick and must not raise.
    """

    def __init__(self, kind: str, path: str, selector: str | None,
                 connect: Callable[[], Any],
                 trimmer: Callable[[dict[str, Any]], dict[str, Any]] = trim):
        self.kind = kind
        self.trim = trimmer
        self.path = path
        self.selector = selector
        self.connect = connect
        self.synced = threading.Event()
        self.watching = False
        self.requests = 0
        self.events = 0
        self.changed: tuple[str, float] = ("", 0.0)
        self._seen = ""  # the last resourceVersion the current WATCH delivered
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
        first_failure = 0.0  # time.monotonic() of the first of `failures`
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
                if version is not None and self._seen:
                    if self._seen != version:
                        # the WATCH worked until it broke (a connection cut in the middle
                        # of its answer): a first failure again, not one more of a row,
                        # so the pause stays short (jittered) however many cuts came
                        failures = 0
                    # resume from the last resourceVersion the broken WATCH delivered, as
                    # client-go's reflector does: from the LIST's, every event since would
                    # come again, and once that version is compacted (or the API server
                    # restarted) the answer is 410 and every node's daemon lists again
                    version = self._seen
                now = time.monotonic()
                if failures == 0:
                    first_failure = now
                pause = reconnect_pause(
                    failures, e.retry_after if isinstance(e, Refused) else None,
                    elapsed=now - first_failure)
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
        def keep(item: dict[str, Any]) -> None:
            meta = item.get("metadata") or {}
            objects[(meta.get("namespace", ""), meta.get("name", ""))] = self.trim(item)

        try:
            while True:
                self.requests += 1
                with http.stream("GET", self.path, params=params) as resp:
                    if resp.status_code == 410:
                        raise Gone()
                    if resp.status_code != 200:
                        raise _refused(f"LIST {self.path}", resp)
                    meta = parse_list(resp.iter_bytes(), keep)
                if not meta.get("continue"):
                    version = str(meta.get("resourceVersion", ""))
                    break
                params["continue"] = meta["continue"]
        finally:
            http.close()
        with self._lock:
            before, self._objects = self._objects, objects
        self.changed = (version, time.time())
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
        seconds = watch_seconds()
        params = {**self._params(), "watch": "1", "resourceVersion": version,
                  "allowWatchBookmarks": "true", "timeoutSeconds": str(seconds)}
        self._seen = version
        try:
            self.requests += 1
            with http.stream("GET", self.path, params=params,
                             read_timeout=seconds + 30.0) as resp:
                if resp.status_code == 410:
                    raise Gone()
                if resp.status_code != 200:
                    raise _refused(f"WATCH {self.path}", resp)
                self.watching = True
                log.debug("watch %s: from resourceVersion %s", self.kind, version)
                for event in _events(resp.iter_lines()):
                    if self._stop.is_set():
                        break
                    version = self._seen = self._apply(event, version)
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
        new = None if kind == "DELETED" else self.trim(obj)
        with self._lock:
            old = self._objects.pop(key, None) if new is None else self._objects.get(key)
            if new is not None:
                self._objects[key] = new
        self.changed = (rv, time.time())
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


def _events(lines: Iterator[str | bytes]) -> Iterator[dict[str, Any]]:
    """The watch stream's events: one JSON object per line (empty lines skipped)."""
    for line in lines:
        if line.strip():
            yield json.loads(line)


class _Httpx:
    """lightkube's httpx2 client with the streaming call of transport.StdlibTransport:
    `stream(method, path, params, read_timeout)` (10 s to connect and for the headers,
    `read_timeout` s for each read of the body), `close()`."""

    def __init__(self, client: Any):
        self._client = client

    def stream(self, method: str, path: str, params: dict[str, str] | None = None,
               read_timeout: float | None = None) -> Any:
        import httpx2
        return self._client.stream(method, path, params=params,
                                   timeout=httpx2.Timeout(10.0, read=read_timeout or 10.0))

    def close(self) -> None:
        self._client.close()


def connector(kubeconfig: str | None) -> Callable[[], Any]:
    """A function returning a new client for `kubeconfig` (None: the in-cluster
    configuration, then lightkube's default lookup), the kubeconfig loaded anew on each
    call (token rotation): the standard library's (transport.StdlibTransport) for the
    kubeconfigs it reads whole, as the daemon's writes use it, else lightkube's httpx2
    client (`_Httpx`). The pod WATCH streams every change of every pod of the node
    through it: the standard library's transport reads an event for less CPU than
    httpx2 (docs/architecture.md, Decisions). Raises transport.KubeconfigError for a
    kubeconfig naming a file that cannot be used (the cache retries: a failed
    connection)."""
    def connect() -> Any:
        from ..kube import transport
        loaded = transport.load(kubeconfig)
        if loaded is not None:
            return loaded[0]
        return _Httpx(lightkube_client(kubeconfig, 10.0)[0])
    return connect


def node_caches(kubeconfig: str | None, node_name: str,
                max_nad_config: int = DEFAULT_MAX_NAD_CONFIG) -> tuple[WatchCache, WatchCache]:
    """(pods of `node_name`, NetworkAttachmentDefinitions of every namespace, each
    config kept up to `max_nad_config` bytes: nad_trimmer), not started."""
    connect = connector(kubeconfig)
    pods = WatchCache(PODS, "/api/v1/pods", f"spec.nodeName={node_name}", connect)
    nads = WatchCache(NADS, f"/apis/{NAD_GROUP}/{NAD_VERSION}/{NAD_PLURAL}", None, connect,
                      nad_trimmer(max_nad_config))
    return pods, nads


def wait_until(predicate: Callable[[], bool], timeout: float) -> bool:
    """Poll `predicate` every 50 ms for up to `timeout` s; its last value."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True
