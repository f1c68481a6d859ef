"""core/v1 Events: recorded on a pod (or any object) and counted again, as client-go's
event recorder does (the node daemon aggregates them: daemon/events.py)."""
from __future__ import annotations

import time

from .errors import KubeError
from .session import Session

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)
if TYPE_CHECKING:
    from typing import Any, TypedDict
else:
    TypedDict = dict  # a dict's keys: read by the type checker only


class InvolvedObject(TypedDict):
    """The object an Event is about (core/v1 ObjectReference, the keys netattach sets):
    a Pod (`apiVersion` "v1", `kind` "Pod") or a NetworkAttachmentDefinition; `uid` ""
    when unknown."""
    apiVersion: str
    kind: str
    namespace: str
    name: str
    uid: str


class EventWrites(Session):
    """The Event calls of `kube.Kube`."""

    def create_event(self, pod: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """Record a core/v1 Event on a pod (what `kubectl describe pod` shows).

        pod: {"namespace", "name", "uid"}; type_: "Normal" or "Warning";
        reason: CamelCase (e.g. "AddedInterface"); message: <= 1 KiB is kept.
        The Event's name is fixed before the first try, so 429 and 5xx are retried
        within the budget (kube/session.py, "Retries") and a 409 AlreadyExists on a retry
        means an earlier try was stored: success. Raises KubeError on any other
        non-201 answer.
        """
        self.post_event({"apiVersion": "v1", "kind": "Pod", "namespace": pod["namespace"],
                         "name": pod["name"], "uid": pod.get("uid", "")},
                        type_, reason, message)

    def post_event(self, involved: InvolvedObject, type_: str, reason: str, message: str,
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


def event_time() -> str:
    """Now as an Event's timestamps give it (RFC 3339, seconds, UTC)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _hostname() -> str:
    import socket
    return socket.gethostname()
