"""The only module that talks to the Kubernetes API server.

Objects travel as plain JSON dicts: the plugin reads a handful of fields of a Pod
and a NetworkAttachmentDefinition, so the client's typed models (and their
validation cost on every ADD) are skipped; requests go through the `kubernetes`
client's transport (kubeconfig loading, TLS, bearer token) as raw REST calls.

The `kubernetes` package is imported lazily, on the first API call, so DEL from
saved state and CHECK never pay for it.

Every call is bounded by `timeout` seconds and counted in `Kube.requests`
(reported by `make bench`). The bearer token is never logged.
"""
from __future__ import annotations

import json
import logging
import time
from typing import Any

log = logging.getLogger("netattach.kube")

NAD_GROUP = "k8s.cni.cncf.io"
NAD_VERSION = "v1"
NAD_PLURAL = "network-attachment-definitions"

_requests_made = 0


def requests_made() -> int:
    """API requests sent by this process so far (every Kube instance), for the timing log."""
    return _requests_made


class KubeError(Exception):
    """An API request failed.

    `status` is the HTTP status (0 when the server could not be reached or the
    request timed out); `reason` a short phrase; the message says what to fix.
    """

    def __init__(self, message: str, status: int = 0, reason: str = ""):
        super().__init__(message)
        self.status = status
        self.reason = reason

    @property
    def unreachable(self) -> bool:
        return self.status == 0


def _explain(status: int, what: str, body: bytes, kubeconfig: str | None) -> str:
    try:
        detail = json.loads(body).get("message", "")
    except (ValueError, AttributeError):
        detail = body[:200].decode("utf-8", "replace")
    hint = ""
    if status == 401:
        hint = (f" (the credentials in kubeconfig {kubeconfig or '(default)'} were rejected: "
                "the ServiceAccount token is expired or revoked; rewrite the kubeconfig with a fresh token)")
    elif status == 403:
        hint = (" (RBAC forbids it: bind the netattach ClusterRole from deploy/rbac.yaml "
                "to the ServiceAccount in the kubeconfig)")
    return f"{what}: HTTP {status}{hint}: {detail}".rstrip(": ")


class Kube:
    """A minimal API client for the plugin.

    kubeconfig: path to a kubeconfig file (None: the client's default lookup).
    timeout: seconds, bound on each request (connect and read).
    """

    def __init__(self, kubeconfig: str | None, timeout: float = 10.0):
        self.kubeconfig = kubeconfig
        self.timeout = timeout
        self.requests = 0
        self._api: Any = None

    def _client(self) -> Any:
        if self._api is None:
            from kubernetes.client import ApiClient, Configuration
            from kubernetes.config.kube_config import load_kube_config

            cfg = Configuration()
            try:
                load_kube_config(config_file=self.kubeconfig, client_configuration=cfg,
                                 persist_config=False)
            except Exception as e:  # the client raises several unrelated types here
                raise KubeError(f"cannot load kubeconfig {self.kubeconfig}: {e}") from None
            cfg.retries = False  # our callers decide about retrying, within their own bound
            self._api = ApiClient(cfg)
        return self._api

    def request(self, method: str, path: str, body: Any = None,
                content_type: str | None = None) -> tuple[int, bytes]:
        """One HTTP request to the API server.

        Returns (HTTP status, body bytes); raises KubeError(status=0) when the
        server cannot be reached in `timeout` seconds.
        """
        api = self._client()
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        method_, url, headers, body_, _ = api.param_serialize(
            method, path, header_params=headers, body=body, auth_settings=["BearerToken"])
        global _requests_made
        self.requests += 1
        _requests_made += 1
        start = time.monotonic()
        try:
            resp = api.call_api(method_, url, header_params=headers, body=body_,
                                _request_timeout=(self.timeout, self.timeout))
        except Exception as e:  # urllib3 connection/timeout errors, ssl errors
            raise KubeError(f"API server {api.configuration.host} unreachable "
                            f"({type(e).__name__}: {_short(e)})") from None
        data = resp.read() or b""
        log.debug("%s %s -> %s in %.1f ms", method, path, resp.status,
                  (time.monotonic() - start) * 1000)
        return resp.status, data

    def _get(self, path: str, what: str) -> dict | None:
        status, data = self.request("GET", path)
        if status == 404:
            return None
        if status != 200:
            raise KubeError(_explain(status, f"get {what}", data, self.kubeconfig), status)
        return json.loads(data)

    def get_pod(self, namespace: str, name: str) -> dict | None:
        """The Pod as a JSON dict, or None when it does not exist (404).

        Raises KubeError for any other failure.
        """
        return self._get(f"/api/v1/namespaces/{namespace}/pods/{name}", f"pod {namespace}/{name}")

    def get_nad(self, namespace: str, name: str) -> dict | None:
        """The NetworkAttachmentDefinition as a JSON dict, or None when it does not exist."""
        return self._get(f"/apis/{NAD_GROUP}/{NAD_VERSION}/namespaces/{namespace}/{NAD_PLURAL}/{name}",
                         f"NetworkAttachmentDefinition {namespace}/{name}")

    def patch_pod_annotations(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        """Merge-patch annotations of a pod through the `pods/status` subresource.

        The status subresource is used so that the plugin's RBAC needs no write
        access to the pod itself (deploy/rbac.yaml grants `patch` on
        `pods/status` only); the API server keeps metadata changes made there.
        Raises KubeError on any non-200 answer.
        """
        status, data = self.request(
            "PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}/status",
            body={"metadata": {"annotations": annotations}},
            content_type="application/merge-patch+json")
        if status != 200:
            raise KubeError(_explain(status, f"patch pod {namespace}/{name} status", data,
                                     self.kubeconfig), status)


def _short(e: Exception) -> str:
    text = str(e)
    return text if len(text) < 200 else text[:200] + "..."
