"""One budget of API requests, sent and retried: the wire under every typed call of
`kube.Kube` (reads.py, writes.py, events.py).

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

from . import kubeconfig
from .errors import KubeError, excerpt, explain, short

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)
if TYPE_CHECKING:
    from typing import Any

log = logging.getLogger("netattach.kube")

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


class Session:
    """The requests of one client: its kubeconfig (loaded on the first request), its
    budget, the bare request and the retried exchange (the typed calls are `kube.Kube`'s;
    the constructor's arguments are documented there)."""

    def __init__(self, kubeconfig: str | None, timeout: float = 10.0, setting: str | None = None,
                 shared: tuple[Any, Any, str] | None = None,
                 rbac: str | None = "deploy/base/rbac.yaml"):
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
        return explain(status, what, body, self.kubeconfig, permission, note,
                       self.rbac)

    def loaded_client(self) -> tuple[Any, Any, str]:
        """(HTTP client, its error classes, namespace) for `Kube(..., shared=)`, the
        kubeconfig loaded now if no request did yet. Raises KubeError."""
        self._client()
        return self._http, self._errors, self._namespace

    def _client(self) -> Any:
        if self._http is None:
            self._http, self._errors, self._namespace = kubeconfig.load(self.kubeconfig,
                                                                        self.timeout)
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
                            f"({type(e).__name__}: {short(e)})") from None
        except Exception as e:  # credentials: exec plugin or token file failures
            raise KubeError(f"request to API server {http.base_url} failed "
                            f"({type(e).__name__}: {short(e)})") from None
        log.debug("%s %s -> %s in %.1f ms", method, path, resp.status_code,
                  (time.monotonic() - start) * 1000)
        return resp

    def _exchange(self, method: str, path: str, what: str, permission: str,
                  body: Any = None, content_type: str | None = None) -> tuple[Any, int]:
        """Send one API call, retrying it while the answer is 429 or 5xx, within the
        budget; returns (the `httpx2.Response` of the last try, number of tries) for
        any other status.

        The retry rule (kube/session.py, "Retries"): the pause before the next try is the
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
            asked = retry_after(resp.headers.get("Retry-After"), time.time())
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

    def _get(self, path: str, what: str, resource: str) -> dict[str, Any] | None:
        resp, _ = self._exchange("GET", path, f"get {what}", f"get {resource}")
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise KubeError(self._why(resp.status_code, f"get {what}", resp.content,
                                      f"get {resource}"), resp.status_code)
        return self._object(resp, "GET", path, f"get {what}")

    def _object(self, resp: Any, method: str, path: str, what: str) -> dict[str, Any]:
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
            f"{excerpt(data, 80)}); is the kubeconfig's server the API server, not a "
            "proxy or another service in front of it?", resp.status_code)


def _retryable(status: int) -> bool:
    """429 and every 5xx: the statuses client-go retries (rest/with_retry.go `checkWait`);
    no other 4xx is, nor 2xx/3xx."""
    return status == 429 or status >= 500


def retry_after(value: str | None, now: float) -> float | None:
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


def _seconds(x: float) -> str:
    """3 -> "3", 2.54 -> "2.5": a duration as a message shows it."""
    return f"{x:.1f}".removesuffix(".0")
