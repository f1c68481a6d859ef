"""The only module that talks to the Kubernetes API server.

Objects travel as plain JSON dicts: the plugin reads a handful of fields of a Pod
and a NetworkAttachmentDefinition, so no client's typed models (nor their
validation cost on every ADD) are used. Requests are raw REST calls (method +
path) on one of two transports, chosen by the kubeconfig:
* `transport.StdlibTransport` (http.client + ssl) for the kubeconfigs it reads
  whole: a server, a CA file or data, and a token, a token file or client
  certificate files; `netattach install` writes one of those. Importing it costs a
  small part of what lightkube + httpx2 cost on every exec'd ADD (issue 11).
* otherwise the HTTP client that `lightkube` builds from the kubeconfig:
  `lightkube.config.kubeconfig.KubeConfig` loads it, and
  `lightkube.config.client_adapter.Client` turns its current context into an
  `httpx2.Client` with the server as base URL, TLS verified against the
  kubeconfig's CA (file or data), the client certificate if any, and the bearer
  token (or token file / exec credential); lightkube's token-file and exec
  credentials re-read themselves once on a 401, as client-go does.
Neither makes retries of its own, nor uses a proxy from the environment.

Both are imported lazily, on the first API call, so DEL from saved state and CHECK
never pay for them. The official `kubernetes` client is never imported: its
import was most of an ADD's time (docs/architecture.md, Decisions).

`timeout` is a budget for the whole client, not per request: the time spent in
requests (connecting, TLS, sending, waiting for the answer) and in retry pauses
(`Kube.pause`) is added up, each request gets what is left as a wall-clock
deadline, and none is sent once it is spent. A per-read timeout alone would not
bound a request: an answer that trickles in a byte at a time never lets a read time
out, so the request runs in a worker thread that is abandoned at the deadline
(it is a daemon; the process exits after the operation without waiting for it).
Every request is counted in `requests_made()` (the timing log line `make bench`
reads), each retry included. The bearer token is never logged.

Retries. An answer 429 (Too Many Requests) or 5xx is retried, inside the same
budget, by every typed call (`get_pod`, `get_nad`, `patch_pod_annotations`,
`create_event`; the bare `request` never retries); any other status, 401 and 403
included, is final at once. The statuses are client-go's (rest/with_retry.go
`checkWait`: 429 and >= 500), and so is the cap, MAX_RETRIES (10). The pause
before the next try is the answer's Retry-After when it has one: kube-apiserver
sends it with its own 429s (max-in-flight and priority-and-fairness rejections:
1 s, up to 32 s under sustained overload) and 429/503 while shutting down (5 s and
1 s); both forms are read (delay-seconds; HTTP-date, which client-go ignores).
Unlike client-go, which retries only answers carrying a Retry-After, a 429/5xx
without one is retried too, after RETRY_BACKOFF (0.25, 0.5, then 1 s, plus up to
10 % jitter): what answers so is typically a load balancer in front of the API
servers (502/503/504 while one of them restarts) or a passing storage error (a
500), both usually gone within a second; 1 s is the pause client-go gives itself
(`retryAfterResponse`) after a connection error, and with the default 5 s budget
these pauses allow five or six tries. Every pause goes through `pause`, so it is
counted in `spent` like a request. A Retry-After of more than what is left fails
the call at once, without sleeping, saying how long the server asked for and how
much was left; so does a backoff that no longer fits. The last error is the
KubeError of the last answer (its status and the server's message), saying how
many tries there were and why they stopped. Only idempotent calls are retried,
and all of the plugin's are: GETs; the merge-PATCH of annotations (the same
patch applied twice leaves the same pod; its UID precondition still holds); the
Event POST, whose name is chosen once, before the first try, so a try repeated
after an answer that was lost or a 5xx whose write went through anyway gets 409
AlreadyExists, taken as success (a 429 means the server did not process it).

An answer 200 whose body is not a JSON object (a proxy's or captive portal's
HTML page, a truncated body, a JSON array) is a KubeError too, naming the
server, the request and what was wrong, with a short sanitized start of the body.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from ..cni.errors import TryAgain

log = logging.getLogger("netattach.kube")

NAD_GROUP = "k8s.cni.cncf.io"
NAD_VERSION = "v1"
NAD_PLURAL = "network-attachment-definitions"
RESOURCE_GROUP = "resource.k8s.io"
RESOURCE_VERSION = "v1"
"""Dynamic Resource Allocation's API (GA in Kubernetes 1.34): ResourceClaims, ResourceSlices."""
CLAIM_FIELD_MANAGER = "netattach"
"""The field manager of netattach's server-side apply of a claim's status.devices."""

MAX_RETRIES = 10
"""Retries of one call at most (client-go's default, rest/request.go `maxRetries`); the
budget ends them first unless the server asks for short pauses (Retry-After: 0)."""
RETRY_BACKOFF = (0.25, 0.5, 1.0)
"""Seconds before the 1st, 2nd, 3rd and later retry of a 429/5xx that had no
Retry-After (module doc, "Retries")."""

_requests_made = 0


def requests_made() -> int:
    """API requests sent by this process so far (every Kube instance), for the timing log."""
    return _requests_made


_LIGHTKUBE_LOAD = threading.Lock()
"""Held while lightkube loads a kubeconfig: its KubeConfig.from_file converts with
msgspec, and two first conversions at once in two threads crashed the process
(SIGSEGV in msgspec.convert, lightkube 1.0.1 / msgspec 0.19; seen in 1 of 20 starts
of the node daemon, whose watch threads connect together)."""


def lightkube_client(kubeconfig: str | None, timeout: float) -> tuple[Any, str]:
    """(lightkube's httpx2 client for the current context of `kubeconfig`, that
    context's namespace); None: lightkube's default lookup (in-cluster, $KUBECONFIG,
    ~/.kube/config). `timeout`: the client's per-request timeout, s. trust_env=False:
    no proxy, CA bundle or netrc from the environment; the kubeconfig alone says where
    and how to connect. Raises whatever loading raises (ValueError without a
    current-context)."""
    import httpx2
    from lightkube.config.client_adapter import Client, ConnectionParams
    from lightkube.config.kubeconfig import KubeConfig
    with _LIGHTKUBE_LOAD:
        config = (KubeConfig.from_file(kubeconfig) if kubeconfig
                  else KubeConfig.from_env()).get()
    if config is None:
        raise ValueError(f"kubeconfig {kubeconfig or '(default)'} has no current-context")
    return (Client(config, ConnectionParams(timeout=httpx2.Timeout(timeout), trust_env=False)),
            config.namespace)


class KubeError(TryAgain):
    """The API server could not be asked, or refused (code 11: a later try may succeed).

    `status` is the HTTP status (0 when the server could not be reached or the
    request timed out; 200 when a successful answer's body was not a JSON
    object); the message says what to fix.
    """

    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status

    @property
    def unreachable(self) -> bool:
        return self.status == 0


def _explain(status: int, what: str, body: bytes, kubeconfig: str | None,
             permission: str, note: str = "", rbac: str = "deploy/base/rbac.yaml") -> str:
    """The message of a failed request: `what`, the HTTP status, `note` (why the
    retries stopped) in parentheses, what to fix for 401 and 403, and the API
    server's own message (the Status' `message`; else a short, sanitized start of
    the body). `permission`: the RBAC verb and resource the request needs ("get pods");
    `rbac`: the manifest whose ClusterRole grants it (the plugin's, or the daemon's)."""
    try:
        detail = str(json.loads(body).get("message", ""))
    except (ValueError, AttributeError, RecursionError):
        detail = _excerpt(body, 200)
    hint = f" ({note})" if note else ""
    if status == 401:
        hint += (f" (the credentials in kubeconfig {kubeconfig or '(default)'} were rejected: "
                 "the ServiceAccount token is expired or revoked; rewrite the kubeconfig with a "
                 "fresh token. `netattach install`, the DaemonSet of deploy/base/daemonset.yaml, "
                 "rewrites it whenever kubelet rotates the token: check that its pod runs on "
                 "this node)")
    elif status == 403:
        hint += (f" (RBAC forbids it: the kubeconfig's user may not {permission}; bind the "
                 f"ClusterRole from {rbac}, which grants it, to the ServiceAccount in the "
                 "kubeconfig)")
    elif status == 422 and "resourceclaims/driver" in detail:
        # Kubernetes >= 1.36 (DRAResourceClaimGranularStatusAuthorization): a write of
        # status.devices is refused as invalid, not 403, when the per-driver check fails
        hint += (" (Kubernetes authorizes each driver's status.devices entries: bind the "
                 f"ClusterRole from {rbac}, whose resourceclaims/driver rule grants "
                 "associated-node:patch of this driver, and use a ServiceAccount token bound "
                 "to a pod on the claim's node, as the DaemonSet's pods have)")
    return f"{what}: HTTP {status}{hint}: {detail}".rstrip(": ")


class Kube:
    """A minimal API client for the plugin.

    kubeconfig: path to a kubeconfig file (None: lightkube's default lookup: the
      in-cluster service account, else $KUBECONFIG, else ~/.kube/config); its
      current context is used.
    timeout: seconds, the budget of all requests and retry pauses of this client
      together (see the module doc); loading the kubeconfig is not counted.
    setting: the configuration key that sets `timeout`, named in the message when
      a request runs out of it (e.g. "apiTimeout").
    shared: the loaded client of another Kube of the same kubeconfig (`loaded_client`),
      used instead of loading one: the daemon's calls share its connection. The budget
      stays this Kube's own.
    rbac: the manifest whose ClusterRole grants this client's requests, named in a 403's
      message (the node daemon's: deploy/thick/rbac.yaml).
    """

    def __init__(self, kubeconfig: str | None, timeout: float = 10.0, setting: str | None = None,
                 shared: tuple[Any, Any, str] | None = None, rbac: str = "deploy/base/rbac.yaml"):
        self.kubeconfig = kubeconfig
        self.timeout = timeout
        self.setting = setting
        self.rbac = rbac
        self.spent = 0.0
        self._http: Any = None
        self._errors: Any = None
        self._namespace = "default"
        if shared is not None:
            self._http, self._errors, self._namespace = shared

    def _why(self, status: int, what: str, body: bytes, permission: str, note: str = "") -> str:
        """_explain with this client's kubeconfig and RBAC manifest."""
        return _explain(status, what, body, self.kubeconfig, permission, note, self.rbac)

    def loaded_client(self) -> tuple[Any, Any, str]:
        """(HTTP client, its error classes, namespace) for `Kube(..., shared=)`, the
        kubeconfig loaded now if no request did yet. Raises KubeError."""
        self._client()
        return self._http, self._errors, self._namespace

    def _client(self) -> Any:
        if self._http is None:
            from . import transport
            try:
                loaded = transport.load(self.kubeconfig)
            except transport.KubeconfigError as e:
                raise KubeError(f"cannot load kubeconfig {self.kubeconfig}: {e}") from None
            if loaded is not None:  # the standard library's http.client (transport.py)
                self._http, self._namespace = loaded
                self._errors = transport.ERRORS
                return self._http
            import httpx2
            try:
                self._http, self._namespace = lightkube_client(self.kubeconfig, self.timeout)
            except Exception as e:  # yaml, msgspec, ssl, OS and lightkube errors alike
                raise KubeError(f"cannot load kubeconfig {self.kubeconfig or '(default)'}: "
                                f"{type(e).__name__}: {_short(e)}") from None
            self._errors = (httpx2.TimeoutException, httpx2.TransportError)
        return self._http

    def namespace(self) -> str:
        """The current context's namespace: the kubeconfig context's `namespace`, the
        ServiceAccount's namespace in-cluster, else "default" (what kubectl uses).

        Loads the kubeconfig if no request did yet; raises KubeError when it cannot.
        """
        self._client()
        return self._namespace

    def remaining(self) -> float:
        """Seconds of the budget left (0 when spent)."""
        return max(0.0, self.timeout - self.spent)

    def pause(self, seconds: float) -> bool:
        """Sleep `seconds` (a retry's backoff) out of the budget; False, without
        sleeping, when less than that is left."""
        if seconds >= self.remaining():
            return False
        time.sleep(seconds)
        self.spent += seconds
        return True

    def _limit(self) -> str:
        return (f"limit: {self.timeout:g} s for all API requests of this operation"
                + (f", {self.setting}" if self.setting else ""))

    def request(self, method: str, path: str, body: Any = None,
                content_type: str | None = None) -> tuple[int, bytes]:
        """One HTTP request to the API server, within what is left of the budget,
        never retried (the typed calls below retry; this is the bare wire).

        `body` is sent as is when bytes or str, else as JSON. Returns (HTTP
        status, body bytes); raises KubeError(status=0) when the server cannot
        be reached, does not answer in time, or the budget is already spent
        (then nothing is sent).
        """
        resp = self._send(method, path, body, content_type)
        return resp.status_code, resp.content

    def _send(self, method: str, path: str, body: Any, content_type: str | None) -> Any:
        """`request`, returning the whole `httpx2.Response` (status_code, headers,
        content). Counts the request in `requests_made()` and its time in `spent`."""
        http = self._client()
        headers = {"Accept": "application/json"}
        content = None
        if body is not None:
            content = body if isinstance(body, (bytes, str)) else json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if content_type:
            headers["Content-Type"] = content_type
        left = self.timeout - self.spent
        if left <= 0:
            raise KubeError(f"API server {http.base_url} too slow: {method} {path} not sent, "
                            f"the earlier requests used up the time ({self._limit()})")
        global _requests_made
        _requests_made += 1
        start = time.monotonic()
        timed_out, unreachable = self._errors
        outcome: dict[str, Any] = {}

        def call() -> None:
            try:
                outcome["resp"] = http.request(method, path, content=content, headers=headers,
                                               timeout=left)
            except BaseException as e:  # handed to the caller's thread
                outcome["error"] = e

        worker = threading.Thread(target=call, name="netattach-api", daemon=True)
        worker.start()
        worker.join(left)
        self.spent += time.monotonic() - start
        too_slow = (f"API server {http.base_url} too slow: it did not answer within "
                    f"{_seconds(left)} s ({method} {path}; {self._limit()})")
        if worker.is_alive():
            raise KubeError(too_slow)
        try:
            if "error" in outcome:
                raise outcome["error"]
            resp = outcome["resp"]
        except timed_out:
            raise KubeError(too_slow) from None
        except unreachable as e:  # connection refused, DNS, TLS verification
            raise KubeError(f"API server {http.base_url} unreachable "
                            f"({type(e).__name__}: {_short(e)})") from None
        except Exception as e:  # credentials: exec plugin or token file failures
            raise KubeError(f"request to API server {http.base_url} failed "
                            f"({type(e).__name__}: {_short(e)})") from None
        log.debug("%s %s -> %s in %.1f ms", method, path, resp.status_code,
                  (time.monotonic() - start) * 1000)
        return resp

    def _exchange(self, method: str, path: str, what: str, permission: str,
                  body: Any = None, content_type: str | None = None) -> tuple[Any, int]:
        """Send one API call, retrying it while the answer is 429 or 5xx, within the
        budget; returns (the `httpx2.Response` of the last try, number of tries) for
        any other status.

        The retry rule (module doc, "Retries"): the pause before the next try is the
        answer's Retry-After when it has one (`_retry_after`), else RETRY_BACKOFF;
        it is taken with `pause`, so it counts against the budget like a request.
        At most MAX_RETRIES retries. Only idempotent calls come here (GET, the
        merge-PATCH, the Event POST of a fixed name: see `create_event`).

        `what` ("get pod ns/p") and `permission` ("get pods") word the error. Raises
        KubeError with the last 429/5xx status when the retries stop: the server
        asked for a longer pause than the budget has left (said so, nothing slept),
        no time is left for the next pause, or MAX_RETRIES is reached; KubeError(0)
        as `request` does, naming the statuses of the tries before.
        """
        statuses: list[int] = []
        while True:
            try:
                resp = self._send(method, path, body, content_type)
            except KubeError as e:
                if not statuses:
                    raise
                raise e.reworded(f"{e.msg} (after {_tries(statuses)})") from None
            status = resp.status_code
            if not _retryable(status):
                return resp, len(statuses) + 1
            statuses.append(status)
            asked = _retry_after(resp.headers.get("Retry-After"), time.time())
            wait = asked if asked is not None else _backoff(len(statuses))
            left = self.remaining()
            if len(statuses) > MAX_RETRIES:
                note = f"{_tries(statuses)}, the most netattach makes"
            elif asked is not None and asked >= left:
                note = (f"{_tries(statuses) + '; ' if len(statuses) > 1 else ''}the API server "
                        f"asked to retry after {_seconds(asked)} s (Retry-After), more than the "
                        f"{_seconds(left)} s left; {self._limit()}")
            elif not self.pause(wait):
                note = f"{_tries(statuses)}, no time left for another; {self._limit()}"
            else:
                log.warning("%s %s: API server %s answered HTTP %d; trying again after a "
                            "pause of %s s (%s), %s s of the budget left", method, path,
                            self._http.base_url, status, _seconds(wait),
                            "its Retry-After" if asked is not None else "backoff",
                            _seconds(self.remaining()))
                continue
            raise KubeError(self._why(status, what, resp.content, permission, note), status)

    def _get(self, path: str, what: str, resource: str) -> dict | None:
        resp, _ = self._exchange("GET", path, f"get {what}", f"get {resource}")
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise KubeError(self._why(resp.status_code, f"get {what}", resp.content,
                                      f"get {resource}"), resp.status_code)
        return self._object(resp, "GET", path, f"get {what}")

    def _object(self, resp: Any, method: str, path: str, what: str) -> dict:
        """The JSON object of a successful answer. Raises KubeError (with the answer's
        status) when the body is empty, not JSON, or JSON but not an object (a
        proxy's HTML page, a truncated body, a list), naming the server and the
        request and quoting a short, sanitized start of the body."""
        data = resp.content
        try:
            doc = json.loads(data)
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            problem = "is empty" if not data.strip() else "is not JSON"
        else:
            if isinstance(doc, dict):
                return doc
            problem = f"is JSON {_json_kind(doc)}, not an object"
        raise KubeError(
            f"{what}: API server {self._http.base_url} answered {method} {path} with HTTP "
            f"{resp.status_code} but a body that {problem} (Content-Type "
            f"{resp.headers.get('Content-Type') or 'none'}, {len(data)} bytes: "
            f"{_excerpt(data, 80)}); is the kubeconfig's server the API server, not a "
            "proxy or another service in front of it?", resp.status_code)

    def get_pod(self, namespace: str, name: str) -> dict | None:
        """The Pod as a JSON dict, or None when it does not exist (404).

        429 and 5xx are retried within the budget (module doc, "Retries"). Raises
        KubeError for any other failure, an answer that is not a JSON object included.
        """
        return self._get(f"/api/v1/namespaces/{namespace}/pods/{name}", f"pod {namespace}/{name}",
                         "pods")

    def get_nad(self, namespace: str, name: str) -> dict | None:
        """The NetworkAttachmentDefinition as a JSON dict, or None when it does not
        exist (404). Retries and errors as `get_pod`."""
        return self._get(f"/apis/{NAD_GROUP}/{NAD_VERSION}/namespaces/{namespace}/"
                         f"{NAD_PLURAL}/{name}",
                         f"NetworkAttachmentDefinition {namespace}/{name}",
                         f"{NAD_PLURAL}.{NAD_GROUP}")

    def patch_pod_annotations(self, namespace: str, name: str, annotations: dict[str, str],
                              uid: str | None = None) -> None:
        """Merge-patch annotations of a pod through the `pods/status` subresource.

        The status subresource is used so that the plugin's RBAC needs no write
        access to the pod itself (deploy/base/rbac.yaml grants `patch` on
        `pods/status` only); the API server keeps metadata changes made there.
        `uid`: the pod must still be this one. The patch then carries it, as
        kubelet's status patches do, and the API server refuses to change a UID, so
        a pod deleted and re-created under the same name is left alone.
        A merge patch is idempotent, so 429 and 5xx are retried within the budget
        (module doc, "Retries"). Raises KubeError on any other non-200 answer.
        """
        metadata: dict[str, Any] = {"annotations": annotations}
        if uid:
            metadata["uid"] = uid
        what = f"patch pod {namespace}/{name} status"
        resp, _ = self._exchange(
            "PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}/status", what,
            "patch pods/status", body={"metadata": metadata},
            content_type="application/merge-patch+json")
        status, data = resp.status_code, resp.content
        if status == 422 and uid and b"metadata.uid" in data:
            raise KubeError(f"patch pod {namespace}/{name} status: HTTP 422: the pod was deleted "
                            f"and re-created under the same name since it was read (UID {uid}); "
                            "the new pod is left alone", status)
        if status != 200:
            raise KubeError(self._why(status, what, data, "patch pods/status"), status)

    def create_event(self, pod: dict, type_: str, reason: str, message: str) -> None:
        """Record a core/v1 Event on a pod (what `kubectl describe pod` shows).

        pod: {"namespace", "name", "uid"}; type_: "Normal" or "Warning";
        reason: CamelCase (e.g. "AddedInterface"); message: <= 1 KiB is kept.
        The Event's name is fixed before the first try, so 429 and 5xx are retried
        within the budget (module doc, "Retries") and a 409 AlreadyExists on a retry
        means an earlier try was stored: success. Raises KubeError on any other
        non-201 answer.
        """
        self.post_event({"apiVersion": "v1", "kind": "Pod", "namespace": pod["namespace"],
                         "name": pod["name"], "uid": pod.get("uid", "")},
                        type_, reason, message)

    def post_event(self, involved: dict, type_: str, reason: str, message: str,
                   count: int = 1, first_timestamp: str | None = None) -> str:
        """`create_event` on any object; returns the Event's name.

        involved: the involvedObject, {"apiVersion", "kind", "namespace", "name",
        "uid"} (a Pod, a NetworkAttachmentDefinition); the Event is made in its
        namespace and named `<name>.<hex nanoseconds>` as client-go names them.
        count, first_timestamp (RFC 3339; default now): an Event the node daemon's
        aggregation (daemon/events.py) makes anew after the one it counted expired.
        Retries and errors as `create_event`.
        """
        now = event_time()
        name = f"{involved['name']}.{time.time_ns():x}"
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": involved["namespace"]},
            "involvedObject": involved,
            "type": type_, "reason": reason, "message": message[:1024],
            "source": {"component": "netattach", "host": _hostname()},
            "reportingComponent": "netattach", "reportingInstance": _hostname(),
            "firstTimestamp": first_timestamp or now, "lastTimestamp": now, "count": count,
        }
        what = f"create event on {involved['kind'].lower()} " \
               f"{involved['namespace']}/{involved['name']}"
        resp, tries = self._exchange("POST", f"/api/v1/namespaces/{involved['namespace']}/events",
                                     what, "create events", body=event,
                                     content_type="application/json")
        if resp.status_code == 409 and tries > 1:
            return name  # AlreadyExists: an earlier try of this POST was stored after all
        if resp.status_code != 201:
            raise KubeError(self._why(resp.status_code, what, resp.content, "create events"),
                            resp.status_code)
        return name

    def patch_event(self, namespace: str, name: str, count: int, last_timestamp: str) -> None:
        """Set `count` and `lastTimestamp` (RFC 3339) of the Event namespace/name: one
        more occurrence of an Event recorded before (client-go's event recorder sends
        the same fields). A merge-PATCH, idempotent, retried as `create_event`. Raises
        KubeError: status 404 when the Event is gone (the API server's event TTL, 1 h
        by default), so the caller creates it anew."""
        what = f"patch event {namespace}/{name}"
        resp, _ = self._exchange("PATCH", f"/api/v1/namespaces/{namespace}/events/{name}",
                                 what, "patch events",
                                 body={"count": count, "lastTimestamp": last_timestamp},
                                 content_type="application/merge-patch+json")
        if resp.status_code != 200:
            raise KubeError(self._why(resp.status_code, what, resp.content, "patch events"),
                            resp.status_code)

    # ---- DRA ResourceClaims (issue 12): claims.py's reads and the claim's status.devices.
    # Kept as one block at the end of the class (the node side adds get_resource_claim too).

    def get_resource_claim(self, namespace: str, name: str) -> dict | None:
        """The ResourceClaim (resource.k8s.io/v1) as a JSON dict, or None if it does not
        exist (404). Retries and errors as `get_pod`."""
        return self._get(f"/apis/{RESOURCE_GROUP}/{RESOURCE_VERSION}/namespaces/{namespace}/"
                         f"resourceclaims/{name}", f"ResourceClaim {namespace}/{name}",
                         f"resourceclaims.{RESOURCE_GROUP}")

    def list_resource_slices(self, driver: str) -> list[dict]:
        """Every ResourceSlice of `driver` (fieldSelector spec.driver), as JSON dicts.
        Retries and errors as `get_pod`."""
        from urllib.parse import quote
        obj = self._get(f"/apis/{RESOURCE_GROUP}/{RESOURCE_VERSION}/resourceslices?"
                        f"fieldSelector={quote('spec.driver=' + driver, safe='')}",
                        f"ResourceSlices of driver {driver}",
                        f"resourceslices.{RESOURCE_GROUP} (list)")
        items = (obj or {}).get("items")
        return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []

    def get_configmap(self, namespace: str, name: str) -> dict | None:
        """The ConfigMap, None when it does not exist. Retries and errors as `get_pod`."""
        return self._get(f"/api/v1/namespaces/{namespace}/configmaps/{name}",
                         f"ConfigMap {namespace}/{name}", "configmaps")

    def apply_claim_devices(self, namespace: str, name: str, devices: list[dict],
                            uid: str = "", resource_version: str = "",
                            after_answer: bool = False) -> None:
        """Server-side apply of the ResourceClaim's `status.devices` (the status
        subresource) as field manager CLAIM_FIELD_MANAGER, forced: `devices` become
        netattach's entries (keyed by driver/pool/device, so other drivers' entries are
        untouched) and netattach's earlier entries not in `devices` are removed ([]
        removes them all). `uid`: the claim must still be this one; `resource_version`:
        it must not have changed since it was read (optimistic lock). Retried on 429/5xx
        as every call (an apply is idempotent). Raises KubeError (409 when the
        resourceVersion or UID no longer matches). `after_answer` is the seam's
        (api.PodApi): this client always sends at once."""
        metadata: dict[str, Any] = {"name": name, "namespace": namespace}
        if uid:
            metadata["uid"] = uid
        if resource_version:
            metadata["resourceVersion"] = resource_version
        body = {"apiVersion": f"{RESOURCE_GROUP}/{RESOURCE_VERSION}", "kind": "ResourceClaim",
                "metadata": metadata, "status": {"devices": devices}}
        what = f"apply ResourceClaim {namespace}/{name} status.devices"
        resp, _ = self._exchange(
            "PATCH", f"/apis/{RESOURCE_GROUP}/{RESOURCE_VERSION}/namespaces/{namespace}/"
            f"resourceclaims/{name}/status?fieldManager={CLAIM_FIELD_MANAGER}&force=true",
            what, f"patch resourceclaims/status.{RESOURCE_GROUP}", body=body,
            content_type="application/apply-patch+yaml")
        if resp.status_code != 200:
            raise KubeError(self._why(resp.status_code, what, resp.content,
                                      f"patch resourceclaims/status.{RESOURCE_GROUP}"),
                            resp.status_code)

    # -- the node's ResourceSlice (daemon/dra.py, the node side of the DRA driver)

    def get_resource_slice(self, name: str) -> dict | None:
        """The ResourceSlice (resource.k8s.io/v1, cluster-scoped) `name` as a JSON dict,
        or None when it does not exist (404). Retries and errors as `get_pod`."""
        return self._get(f"/apis/{RESOURCE_GROUP}/{RESOURCE_VERSION}/resourceslices/{name}",
                         f"ResourceSlice {name}", f"resourceslices.{RESOURCE_GROUP}")

    def create_resource_slice(self, body: dict) -> dict:
        """POST the ResourceSlice `body` (its metadata.name set); returns the stored
        object. Not retried: a create repeated after a lost answer would be refused 409
        (AlreadyExists), which the caller (dra.SlicePublisher) handles by reading the
        slice again. Raises KubeError (status 409 when it exists already)."""
        path = f"/apis/{RESOURCE_GROUP}/{RESOURCE_VERSION}/resourceslices"
        what = f"create ResourceSlice {body.get('metadata', {}).get('name')}"
        resp = self._send("POST", path, body, "application/json")
        if resp.status_code != 201:
            raise KubeError(self._why(resp.status_code, what, resp.content,
                                      f"create resourceslices.{RESOURCE_GROUP}"),
                            resp.status_code)
        return self._object(resp, "POST", path, what)

    def update_resource_slice(self, body: dict) -> dict:
        """PUT the ResourceSlice `body`, which carries the metadata.resourceVersion it was
        read with (optimistic concurrency: 409 Conflict when it changed since). 429 and
        5xx are retried within the budget; a retry after a try that was stored gets 409
        too. Returns the stored object; raises KubeError (status 409 on a conflict)."""
        name = body["metadata"]["name"]
        path = f"/apis/{RESOURCE_GROUP}/{RESOURCE_VERSION}/resourceslices/{name}"
        what = f"update ResourceSlice {name}"
        resp, _ = self._exchange("PUT", path, what, f"update resourceslices.{RESOURCE_GROUP}",
                                 body=body, content_type="application/json")
        if resp.status_code != 200:
            raise KubeError(self._why(resp.status_code, what, resp.content,
                                      f"update resourceslices.{RESOURCE_GROUP}"),
                            resp.status_code)
        return self._object(resp, "PUT", path, what)

    # -- the installer's DaemonSet (install/uninstall.py: uninstall or restart)

    def get_daemonset(self, namespace: str, name: str) -> dict | None:
        """The DaemonSet (apps/v1) as a JSON dict, or None when it does not exist (404).
        Retries and errors as `get_pod` (a 401 or 403 is a KubeError with that status).
        RBAC: the installer's Role in deploy/base/rbac.yaml grants `get` on its own
        DaemonSet by name."""
        return self._get(f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}",
                         f"DaemonSet {namespace}/{name}", "daemonsets.apps")


def event_time() -> str:
    """Now as an Event's timestamps give it (RFC 3339, seconds, UTC)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _retryable(status: int) -> bool:
    """429 and every 5xx: the statuses client-go retries (rest/with_retry.go `checkWait`);
    no other 4xx is, nor 2xx/3xx."""
    return status == 429 or status >= 500


def _retry_after(value: str | None, now: float) -> float | None:
    """The seconds a Retry-After header asks to wait, or None when absent or unreadable.

    value: the header (RFC 9110 §10.2.3: delay-seconds, "1", or an HTTP-date, "Sun,
    06 Nov 1994 08:49:37 GMT", read against `now`, seconds since the epoch; a date
    already past is 0). client-go reads the seconds form only (rest/request.go
    `retryAfterSeconds`); the date form costs one stdlib call here.
    """
    value = (value or "").strip()
    if not value:
        return None
    if value.isascii() and value.isdigit():
        return float(value)
    import datetime
    import email.utils
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": UTC, as an HTTP-date always is
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, when.timestamp() - now)


def _backoff(retry: int) -> float:
    """Seconds before retry number `retry` (1, 2, ...) when the answer had no
    Retry-After: RETRY_BACKOFF[retry - 1] (its last value from then on), plus up to
    10 % random jitter (client-go's retry.DefaultRetry jitter) so the ADDs of one
    node that failed together do not come back together."""
    import random
    base = RETRY_BACKOFF[min(retry, len(RETRY_BACKOFF)) - 1]
    return base * (1 + 0.1 * random.random())


def _tries(statuses: list[int]) -> str:
    """[503, 503, 500] -> "3 tries answered HTTP 503/500": the retried answers (each
    status once, in order), for a message."""
    n = len(statuses)
    codes = "/".join(str(c) for c in dict.fromkeys(statuses))
    return f"{n} {'try' if n == 1 else 'tries'} answered HTTP {codes}"


def _json_kind(doc: Any) -> str:
    """What a decoded JSON value is, for a message: "an array", "a string", ..."""
    if isinstance(doc, list):
        return "an array"
    if isinstance(doc, str):
        return "a string"
    if doc is None:
        return "null"
    return "a boolean" if isinstance(doc, bool) else "a number"


def _excerpt(data: bytes, limit: int) -> str:
    """The start of an answer's body for a message: at most `limit` characters of it
    decoded as UTF-8 (bad bytes replaced), every run of whitespace or control
    characters one space, "..." when cut; quoted. The body itself may be megabytes."""
    text = data[:limit * 4].decode("utf-8", "replace")
    text = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    cut = len(text) > limit or len(data) > limit * 4
    return f'"{text[:limit]}{"..." if cut else ""}"'


def _hostname() -> str:
    import socket
    return socket.gethostname()


def _seconds(x: float) -> str:
    """3 -> "3", 2.54 -> "2.5": a duration as a message shows it."""
    return f"{x:.1f}".removesuffix(".0")


def _short(e: Exception) -> str:
    """`e`'s text for a message, at most 200 characters, holding nothing of the
    kubeconfig: a YAML error by its line and column, without the line PyYAML quotes
    (it can be the token's or the key's), and h11's "Illegal header value" (http.client's
    "Invalid header value") without the value (it is `Bearer <token>` when the token
    has a newline or control byte)."""
    mark = getattr(e, "problem_mark", None)  # yaml.MarkedYAMLError
    if mark is not None:
        text = (f"{getattr(e, 'context', None) or 'invalid YAML'}: "
                f"{getattr(e, 'problem', None) or ''} at line {mark.line + 1}, "
                f"column {mark.column + 1}")
    else:
        text = str(e)
        if text.startswith(("Illegal header value", "Invalid header value")):  # h11, http.client
            text = ("Illegal header value (not shown: it may hold the bearer token; has the "
                    "kubeconfig's token a newline, a control character or trailing space?)")
    return text if len(text) < 200 else text[:200] + "..."
