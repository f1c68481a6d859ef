"""Loading a kubeconfig into the HTTP client the API requests go through.

Objects travel as plain JSON dicts: the plugin reads a handful of fields of a Pod
and a NetworkAttachmentDefinition, so no client's typed models (nor their
validation cost on every ADD) are used. Requests are raw REST calls (method +
path) on one of two transports, chosen by the kubeconfig (`load`):
* `transport.StdlibTransport` (socket + ssl, http11.py) for the kubeconfigs it reads
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
"""
from __future__ import annotations

import threading

from .errors import KubeError, short

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)
if TYPE_CHECKING:
    from typing import Any

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


def load(kubeconfig: str | None, timeout: float) -> tuple[Any, Any, str]:
    """(HTTP client, its (timed out, unreachable) error classes, the current context's
    namespace) for `kubeconfig` (None: lightkube's default lookup): the standard
    library's transport (transport.py) when it reads the kubeconfig whole, else
    lightkube's httpx2 client (`lightkube_client`, `timeout` its per-request timeout).
    Raises KubeError naming the kubeconfig when it cannot be loaded."""
    from . import transport
    try:
        loaded = transport.load(kubeconfig)
    except transport.KubeconfigError as e:
        raise KubeError(f"cannot load kubeconfig {kubeconfig}: {e}") from None
    if loaded is not None:  # the standard library's socket + ssl (transport.py)
        http, namespace = loaded
        return http, transport.ERRORS, namespace
    import httpx2
    try:
        http, namespace = lightkube_client(kubeconfig, timeout)
    except Exception as e:  # yaml, msgspec, ssl, OS and lightkube errors alike
        raise KubeError(f"cannot load kubeconfig {kubeconfig or '(default)'}: "
                        f"{type(e).__name__}: {short(e)}") from None
    return http, (httpx2.TimeoutException, httpx2.TransportError), namespace
