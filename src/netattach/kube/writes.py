"""The writes of the plugin but Events: the network-status merge-PATCH of a pod's status,
a DRA ResourceClaim's status.devices by server-side apply, the node's ResourceSlice
(created, updated). Retried as kube/session.py's "Retries" says, but the create."""
from __future__ import annotations

from .errors import KubeError
from .reads import RESOURCE_GROUP, RESOURCE_VERSION
from .session import Session

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)
if TYPE_CHECKING:
    from typing import Any

CLAIM_FIELD_MANAGER = "netattach"
"""The field manager of netattach's server-side apply of a claim's status.devices."""


class ObjectWrites(Session):
    """The PATCH, apply, POST and PUT of `kube.Kube`."""

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
        (kube/session.py, "Retries"). Raises KubeError on any other non-200 answer.
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

    def apply_claim_devices(self, namespace: str, name: str, devices: list[dict[str, Any]],
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

    def create_resource_slice(self, body: dict[str, Any]) -> dict[str, Any]:
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

    def update_resource_slice(self, body: dict[str, Any]) -> dict[str, Any]:
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
