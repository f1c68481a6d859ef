"""The only client of the Kubernetes API server: `Kube`, put together from one module
per concern:

* kubeconfig.py: the kubeconfig loaded into an HTTP client (the standard library's
  transport.py for the kubeconfigs it reads whole, else lightkube's);
* session.py: one budget of requests (`apiTimeout`), the bare request, the retries of
  429 and 5xx, the answers that are not JSON objects, `requests_made`;
* errors.py: `KubeError` and the wording of a failed request;
* reads.py, writes.py, events.py: the typed calls (GETs; the network-status PATCH, the
  claim status apply, the ResourceSlice; Events).

Objects travel as plain JSON dicts. The official `kubernetes` client is never imported:
its import was most of an ADD's time (docs/architecture.md, Decisions).
"""
from __future__ import annotations

from .errors import KubeError
from .events import EventWrites
from .reads import ObjectReads
from .session import requests_made
from .writes import ObjectWrites

__all__ = ["Kube", "KubeError", "requests_made"]


class Kube(ObjectReads, ObjectWrites, EventWrites):
    """A minimal API client for the plugin.

    kubeconfig: path to a kubeconfig file (None: lightkube's default lookup: the
      in-cluster service account, else $KUBECONFIG, else ~/.kube/config); its
      current context is used.
    timeout: seconds, the budget of all requests and retry pauses of this client
      together (kube/session.py); loading the kubeconfig is not counted.
    setting: the configuration key that sets `timeout`, named in the message when
      a request runs out of it (e.g. "apiTimeout").
    shared: the loaded client of another Kube of the same kubeconfig (`loaded_client`),
      used instead of loading one: the daemon's calls share its connection. The budget
      stays this Kube's own.
    rbac: the manifest whose ClusterRole grants this client's requests, named in a 403's
      message (the node daemon's: deploy/thick/rbac.yaml); None for an operator's own
      credentials (the operator tools), whose 401 and 403 messages then name only what
      is missing (kube/errors.explain).
    """
