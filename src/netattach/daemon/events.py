"""The node daemon's Events, aggregated as the kubelet's event recorder aggregates them
(k8s.io/client-go/tools/record: events_cache.go `eventLogger.eventObserve`, event.go
`recordToSink`): an Event with the same involvedObject, type, reason and message as
one recorded before is not created again; that Event's `count` is raised by one and its
`lastTimestamp` set to now (a PATCH of those two fields). When that PATCH finds the
Event gone (404: the API server's event TTL, 1 h by default), it is created anew with
the count and firstTimestamp kept, as client-go does.

So a standing failure (a hot-plug element that fails at each try of its backoff, a
NetworkAttachmentDefinition over the config bound seen again) is one Event whose count
says how often, not one Event per try. The recorder remembers the last MAX_ENTRIES
distinct Events (least recently seen dropped first: client-go's LRU of
maxLruCacheEntries, 4096), so its memory is bounded whatever the messages.
The source (component netattach, this host) is the same for every Event of one daemon,
so it is not part of the key.
"""
from __future__ import annotations

import collections
import threading
from dataclasses import dataclass
from typing import Any

from ..kube.client import Kube, KubeError
from ..kube.events import InvolvedObject, event_time

MAX_ENTRIES = 4096
"""Distinct Events remembered (client-go's maxLruCacheEntries)."""


@dataclass
class _Seen:
    name: str  # the Event object's name
    count: int
    first: str  # its firstTimestamp


def pod_object(pod: dict[str, str]) -> InvolvedObject:
    """The involvedObject of an Event on a pod ({"namespace", "name", "uid"})."""
    return {"apiVersion": "v1", "kind": "Pod", "namespace": pod["namespace"],
            "name": pod["name"], "uid": pod.get("uid", "")}


class EventRecorder:
    """Sends the daemon's Events, aggregated (module doc). Thread-safe: the publisher's
    workers call `send` from their threads.

    max_entries: how many distinct Events are remembered (> 0).
    """

    def __init__(self, max_entries: int = MAX_ENTRIES):
        self.max_entries = max_entries
        self._seen: collections.OrderedDict[tuple[Any, ...], _Seen] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.created = self.updated = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._seen)

    def send(self, kube: Kube, involved: InvolvedObject, type_: str, reason: str,
             message: str) -> None:
        """Record one occurrence: PATCH the count of the Event recorded before with the
        same key, else (or when it is gone) POST a new one. involved: the
        involvedObject ({"apiVersion", "kind", "namespace", "name", "uid"}); message:
        its first 1 KiB counts (what is stored). The count is raised only once the
        write succeeded, so a write retried after a failure counts once. Raises
        KubeError from the API server (the publisher retries it)."""
        message = message[:1024]
        key = (involved.get("apiVersion"), involved.get("kind"), involved.get("namespace"),
               involved.get("name"), involved.get("uid"), type_, reason, message)
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None:
                self._seen.move_to_end(key)
                count, name, first = seen.count + 1, seen.name, seen.first
        if seen is not None:
            try:
                kube.patch_event(involved["namespace"], name, count, event_time())
            except KubeError as e:
                if e.status != 404:
                    raise
            else:
                with self._lock:
                    seen.count = max(seen.count, count)
                    self.updated += 1
                return
            name = kube.post_event(involved, type_, reason, message, count, first)
        else:
            count, first = 1, event_time()
            name = kube.post_event(involved, type_, reason, message)
        with self._lock:
            self._seen[key] = _Seen(name, count, first)
            self._seen.move_to_end(key)
            while len(self._seen) > self.max_entries:
                self._seen.popitem(last=False)
            self.created += 1
