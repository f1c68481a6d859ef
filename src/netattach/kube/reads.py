"""The objects the plugin reads, by their API paths: pods, NetworkAttachmentDefinitions,
ConfigMaps, DRA ResourceClaims and ResourceSlices, the installer's DaemonSet. Each is a
GET retried as every call (kube/session.py, "Retries"), None for a 404."""
from __future__ import annotations

from collections.abc import Iterator

from .errors import KubeError
from .session import Session

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)
if TYPE_CHECKING:
    from typing import Any

NAD_GROUP = "k8s.cni.cncf.io"


NAD_VERSION = "v1"


NAD_PLURAL = "network-attachment-definitions"


RESOURCE_GROUP = "resource.k8s.io"


LIST_LIMIT = 500
"""Objects per page of a paginated LIST (`list_pages`): the API server's own chunking,
so neither it nor the client holds a big cluster's objects in one answer."""


RESOURCE_VERSION = "v1"
"""Dynamic Resource Allocation's API (GA in Kubernetes 1.34): ResourceClaims, ResourceSlices."""


class ObjectReads(Session):
    """The GETs of `kube.Kube`."""

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Pod as a JSON dict, or None when it does not exist (404).

        429 and 5xx are retried within the budget (kube/session.py, "Retries"). Raises
        KubeError for any other failure, an answer that is not a JSON object included.
        """
        return self._get(f"/api/v1/namespaces/{namespace}/pods/{name}", f"pod {namespace}/{name}",
                         "pods")

    def get_nad(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The NetworkAttachmentDefinition as a JSON dict, or None when it does not
        exist (404). Retries and errors as `get_pod`."""
        return self._get(f"/apis/{NAD_GROUP}/{NAD_VERSION}/namespaces/{namespace}/"
                         f"{NAD_PLURAL}/{name}",
                         f"NetworkAttachmentDefinition {namespace}/{name}",
                         f"{NAD_PLURAL}.{NAD_GROUP}")

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ConfigMap, None when it does not exist. Retries and errors as `get_pod`."""
        return self._get(f"/api/v1/namespaces/{namespace}/configmaps/{name}",
                         f"ConfigMap {namespace}/{name}", "configmaps")

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ResourceClaim (resource.k8s.io/v1) as a JSON dict, or None if it does not
        exist (404). Retries and errors as `get_pod`."""
        return self._get(f"/apis/{RESOURCE_GROUP}/{RESOURCE_VERSION}/namespaces/{namespace}/"
                         f"resourceclaims/{name}", f"ResourceClaim {namespace}/{name}",
                         f"resourceclaims.{RESOURCE_GROUP}")

    def list_resource_slices(self, driver: str) -> list[dict[str, Any]]:
        """Every ResourceSlice of `driver` (fieldSelector spec.driver), as JSON dicts.
        Retries and errors as `get_pod`."""
        from urllib.parse import quote
        obj = self._get(f"/apis/{RESOURCE_GROUP}/{RESOURCE_VERSION}/resourceslices?"
                        f"fieldSelector={quote('spec.driver=' + driver, safe='')}",
                        f"ResourceSlices of driver {driver}",
                        f"resourceslices.{RESOURCE_GROUP} (list)")
        items = (obj or {}).get("items")
        return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []

    def get_resource_slice(self, name: str) -> dict[str, Any] | None:
        """The ResourceSlice (resource.k8s.io/v1, cluster-scoped) `name` as a JSON dict,
        or None when it does not exist (404). Retries and errors as `get_pod`."""
        return self._get(f"/apis/{RESOURCE_GROUP}/{RESOURCE_VERSION}/resourceslices/{name}",
                         f"ResourceSlice {name}", f"resourceslices.{RESOURCE_GROUP}")

    def get_daemonset(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The DaemonSet (apps/v1) as a JSON dict, or None when it does not exist (404).
        Retries and errors as `get_pod` (a 401 or 403 is a KubeError with that status).
        RBAC: the installer's Role in deploy/base/rbac.yaml grants `get` on its own
        DaemonSet by name."""
        return self._get(f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}",
                         f"DaemonSet {namespace}/{name}", "daemonsets.apps")

    def list_pages(self, path: str, what: str, resource: str,
                   limit: int = LIST_LIMIT) -> Iterator[list[dict[str, Any]]]:
        """The objects of a LIST at `path` (a collection: "/api/v1/pods", a namespace's
        or a custom resource's), one page of at most `limit` of them at a time, following
        the answer's `metadata.continue` (the API server's chunking) until it has none.

        `what` ("pods in all namespaces") and `resource` ("pods", for the RBAC verb
        "list pods") word the errors. Each page is retried as every call (kube/session.py,
        "Retries"), within the client's one budget for all of them. Raises KubeError for
        any failure: a 404 (the API server does not serve the resource: a CRD not
        installed; a namespace that does not exist lists as empty, not 404), a 410 (the
        continue token expired: the listing took longer than the API server keeps it,
        about 5 minutes), and the rest as every call.
        """
        from urllib.parse import quote
        token = ""
        while True:
            query = f"limit={limit}" + (f"&continue={quote(token, safe='')}" if token else "")
            sep = "&" if "?" in path else "?"
            resp, _ = self._exchange("GET", f"{path}{sep}{query}", f"list {what}",
                                     f"list {resource}")
            if resp.status_code == 404:
                raise KubeError(f"list {what}: HTTP 404: the API server does not serve "
                                f"{resource} (is its CustomResourceDefinition installed?)", 404)
            if resp.status_code != 200:
                raise KubeError(self._why(resp.status_code, f"list {what}", resp.content,
                                          f"list {resource}"), resp.status_code)
            page = self._object(resp, "GET", path, f"list {what}")
            items = page.get("items")
            yield [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []
            meta = page.get("metadata")
            more = meta.get("continue") if isinstance(meta, dict) else None
            if not isinstance(more, str) or not more:
                return
            token = more
