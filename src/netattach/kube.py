"""The only module that talks to the Kubernetes API server.

Objects travel as plain JSON dicts: the plugin reads a handful of fields of a Pod
and a NetworkAttachmentDefinition, so no client's typed models (nor their
validation cost on every ADD) are used. Requests are raw REST calls (method +
path) on the HTTP client that `lightkube` builds from the kubeconfig:
`lightkube.config.kubeconfig.KubeConfig` loads it, and
`lightkube.config.client_adapter.Client` turns its current context into an
`httpx2.Client` with the server as base URL, TLS verified against the
kubeconfig's CA (file or data), the client certificate if any, and the bearer
token (or token file / exec credential). The transport makes no retries; only
lightkube's token-file and exec credentials re-read themselves once on a 401,
as client-go does.

`lightkube` is imported lazily, on the first API call, so DEL from saved state
and CHECK never pay for it. It was chosen over the official `kubernetes` client
for its import cost, paid on every exec'd ADD: docs/architecture.md (Decisions)
has the measurements.

`timeout` is a budget for the whole client, not per request: the time spent in
requests (connecting, TLS, sending, waiting for the answer) and in retry pauses
(`Kube.pause`) is added up, each request gets what is left as a wall-clock
deadline, and none is sent once it is spent. A per-read timeout alone would not
bound a request: an answer that trickles in a byte at a time never lets a read time
out, so the request runs in a worker thread that is abandoned at the deadline
(it is a daemon; the process exits after the operation without waiting for it).
Every request is counted in `requests_made()` (the timing log line `make bench`
reads). The bearer token is never logged.

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

from .cni.errors import TryAgain

log = logging.getLogger("netattach.kube")

NAD_GROUP = "k8s.cni.cncf.io"
NAD_VERSION = "v1"
NAD_PLURAL = "network-attachment-definitions"

_requests_made = 0


def requests_made() -> int:
    """API requests sent by this process so far (every Kube instance), for the timing log."""
    return _requests_made


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
             permission: str) -> str:
    """The message of a failed request: `what`, the HTTP status, what to fix for 401 and
    403, and the API server's own message. `permission`: the RBAC verb and resource
    the request needs ("get pods"). The server's message is the Status' `message`,
    else a short, sanitized start of the body."""
    try:
        detail = str(json.loads(body).get("message", ""))
    except (ValueError, AttributeError, RecursionError):
        detail = _excerpt(body, 200)
    hint = ""
    if status == 401:
        hint = (f" (the credentials in kubeconfig {kubeconfig or '(default)'} were rejected: "
                "the ServiceAccount token is expired or revoked; rewrite the kubeconfig with a "
                "fresh token. `netattach install`, the DaemonSet of deploy/daemonset.yaml, "
                "rewrites it whenever kubelet rotates the token: check that its pod runs on "
                "this node)")
    elif status == 403:
        hint = (f" (RBAC forbids it: the kubeconfig's user may not {permission}; bind the "
                "netattach ClusterRole from deploy/rbac.yaml, which grants it, to the "
                "ServiceAccount in the kubeconfig)")
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
    """

    def __init__(self, kubeconfig: str | None, timeout: float = 10.0, setting: str | None = None):
        self.kubeconfig = kubeconfig
        self.timeout = timeout
        self.setting = setting
        self.spent = 0.0
        self._http: Any = None
        self._errors: Any = None
        self._namespace = "default"

    def _client(self) -> Any:
        if self._http is None:
            import httpx2
            from lightkube.config.client_adapter import Client, ConnectionParams
            from lightkube.config.kubeconfig import KubeConfig

            try:
                config = (KubeConfig.from_file(self.kubeconfig) if self.kubeconfig
                          else KubeConfig.from_env()).get()
                # trust_env=False: no proxy, CA bundle or netrc from the runtime's
                # environment; the kubeconfig alone says where and how to connect.
                self._http = Client(config, ConnectionParams(
                    timeout=httpx2.Timeout(self.timeout), trust_env=False))
                self._namespace = config.namespace
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
        """One HTTP request to the API server, within what is left of the budget.

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

    def _get(self, path: str, what: str, resource: str) -> dict | None:
        resp = self._send("GET", path, None, None)
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise KubeError(_explain(resp.status_code, f"get {what}", resp.content,
                                     self.kubeconfig, f"get {resource}"), resp.status_code)
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

        Raises KubeError for any other failure, an answer that is not a JSON object
        included.
        """
        return self._get(f"/api/v1/namespaces/{namespace}/pods/{name}", f"pod {namespace}/{name}",
                         "pods")

    def get_nad(self, namespace: str, name: str) -> dict | None:
        """The NetworkAttachmentDefinition as a JSON dict, or None when it does not exist."""
        return self._get(f"/apis/{NAD_GROUP}/{NAD_VERSION}/namespaces/{namespace}/{NAD_PLURAL}/{name}",
                         f"NetworkAttachmentDefinition {namespace}/{name}",
                         f"{NAD_PLURAL}.{NAD_GROUP}")

    def patch_pod_annotations(self, namespace: str, name: str, annotations: dict[str, str],
                              uid: str | None = None) -> None:
        """Merge-patch annotations of a pod through the `pods/status` subresource.

        The status subresource is used so that the plugin's RBAC needs no write
        access to the pod itself (deploy/rbac.yaml grants `patch` on
        `pods/status` only); the API server keeps metadata changes made there.
        `uid`: the pod must still be this one. The patch then carries it, as
        kubelet's status patches do, and the API server refuses to change a UID, so
        a pod deleted and re-created under the same name is left alone.
        Raises KubeError on any non-200 answer.
        """
        metadata: dict[str, Any] = {"annotations": annotations}
        if uid:
            metadata["uid"] = uid
        status, data = self.request(
            "PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}/status",
            body={"metadata": metadata}, content_type="application/merge-patch+json")
        if status == 422 and uid and b"metadata.uid" in data:
            raise KubeError(f"patch pod {namespace}/{name} status: HTTP 422: the pod was deleted "
                            f"and re-created under the same name since it was read (UID {uid}); "
                            "the new pod is left alone", status)
        if status != 200:
            raise KubeError(_explain(status, f"patch pod {namespace}/{name} status", data,
                                     self.kubeconfig, "patch pods/status"), status)

    def create_event(self, pod: dict, type_: str, reason: str, message: str) -> None:
        """Record a core/v1 Event on a pod (what `kubectl describe pod` shows).

        pod: {"namespace", "name", "uid"}; type_: "Normal" or "Warning";
        reason: CamelCase (e.g. "AddedInterface"); message: <= 1 KiB is kept.
        Raises KubeError on any non-201 answer.
        """
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{pod['name']}.{time.time_ns():x}", "namespace": pod["namespace"]},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": pod["namespace"],
                               "name": pod["name"], "uid": pod.get("uid", "")},
            "type": type_, "reason": reason, "message": message[:1024],
            "source": {"component": "netattach", "host": _hostname()},
            "reportingComponent": "netattach", "reportingInstance": _hostname(),
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        status, data = self.request("POST", f"/api/v1/namespaces/{pod['namespace']}/events",
                                    body=event, content_type="application/json")
        if status != 201:
            raise KubeError(_explain(status, f"create event on pod {pod['namespace']}/{pod['name']}",
                                     data, self.kubeconfig, "create events"), status)


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
    (it can be the token's or the key's), and h11's "Illegal header value" without
    the value (it is `Bearer <token>` when the token has a newline or control byte)."""
    mark = getattr(e, "problem_mark", None)  # yaml.MarkedYAMLError
    if mark is not None:
        text = (f"{getattr(e, 'context', None) or 'invalid YAML'}: "
                f"{getattr(e, 'problem', None) or ''} at line {mark.line + 1}, "
                f"column {mark.column + 1}")
    else:
        text = str(e)
        if text.startswith("Illegal header value"):
            text = ("Illegal header value (not shown: it may hold the bearer token; has the "
                    "kubeconfig's token a newline, a control character or trailing space?)")
    return text if len(text) < 200 else text[:200] + "..."
