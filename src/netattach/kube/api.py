"""The API seam: what the orchestrator asks of the Kubernetes API server, and the pod a
request names.

`PodApi` is a protocol: thin mode hands the orchestrator `kube.Kube` (live requests
within one `apiTimeout` budget); the node daemon will hand it its watch caches; unit
tests hand it a fake. Implementations raise `kube.KubeError` (code 11) when the
server cannot be asked or refuses, and return None for an object that does not exist.

An implementation whose writes (the network-status PATCH, Events) are queued, sent by
another thread that the runtime's answer does not wait for, says so with a true class
attribute `WRITES_AFTER_ANSWER` (`writes_after_answer`); ADD then records the
network-status in the container's saved state first (state.PendingStatus), so that it
survives the process that was to send it, and queues each AddedInterface Event as its
attachment is up.
"""
from __future__ import annotations

from ..cni.errors import InvalidEnv
from ..cni.names import is_dns1123_label, is_dns1123_subdomain
from ..cni.request import CniRequest
from ..spec.pod import PodRef

TYPE_CHECKING = False  # typing is not imported on the exec'd path (cli.py)
if TYPE_CHECKING:
    from typing import Any, Protocol
else:
    Protocol = object  # a protocol: read by the type checker only

MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"


class PodApi(Protocol):
    """The requests one CNI operation makes (multi-net spec §5 status, §3 NADs)."""

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Pod as a JSON dict, None when it does not exist. Raises KubeError."""
        ...

    def get_nad(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The NetworkAttachmentDefinition, None when it does not exist. Raises KubeError."""
        ...

    def patch_pod_annotations(self, namespace: str, name: str, annotations: dict[str, str],
                              uid: str | None = None) -> None:
        """Merge `annotations` into the pod of UID `uid` (status subresource). Raises
        KubeError."""
        ...

    def create_event(self, pod: dict[str, str], type_: str, reason: str, message: str) -> None:
        """Record an Event on the pod ({"namespace", "name", "uid"}). Raises KubeError."""
        ...

    # DRA ResourceClaims (claims.py), asked only for a pod with spec.resourceClaims or
    # an attachment saved with its claim

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ResourceClaim (resource.k8s.io/v1), or None if it does not exist. Raises
        KubeError."""
        ...

    def list_resource_slices(self, driver: str) -> list[dict[str, Any]]:
        """Every ResourceSlice of `driver`. Raises KubeError."""
        ...

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ConfigMap, None when it does not exist. Raises KubeError."""
        ...

    def apply_claim_devices(self, namespace: str, name: str, devices: list[dict[str, Any]],
                            uid: str = "", resource_version: str = "",
                            after_answer: bool = False) -> None:
        """Make `devices` netattach's entries of the claim's status.devices (server-side
        apply, kube.Kube.apply_claim_devices). `after_answer`: the seam may send it after
        the runtime's answer (the node daemon queues it); otherwise it is sent now.
        Raises KubeError when sent now."""
        ...

    def pause(self, seconds: float) -> bool:
        """Wait `seconds` before asking again (a retry's backoff), out of the operation's
        API budget; False, without waiting, when the budget has less than that left."""
        ...


def writes_after_answer(api: PodApi) -> bool:
    """True when `api` sends its writes after the runtime's answer (module doc): the node
    daemon's. Thin mode's `kube.Kube` sends them before, so nothing need be recorded."""
    return getattr(api, "WRITES_AFTER_ANSWER", False) is True


def pods_cached(api: PodApi | None) -> bool:
    """True when `api` reads pods from a watch cache (the node daemon's): the whole pod,
    its spec included, costs no request, so ADD reads it rather than take the pod's
    annotations from the runtime (networks.build_plan)."""
    return getattr(api, "PODS_CACHED", False) is True


def pod_ref(req: CniRequest) -> PodRef | None:
    """The pod named by CNI_ARGS (K8S_POD_NAMESPACE, K8S_POD_NAME, K8S_POD_UID), if any.

    Raises InvalidEnv (4) when the namespace is not a DNS-1123 label or the name not
    a DNS-1123 subdomain (names.py): both become API request paths ("../..", "?",
    "#" would reach other resources than the pod).
    """
    ns, name = req.arg("K8S_POD_NAMESPACE"), req.arg("K8S_POD_NAME")
    if not ns or not name:
        return None
    if not is_dns1123_label(ns) or not is_dns1123_subdomain(name):
        raise InvalidEnv(f"CNI_ARGS K8S_POD_NAMESPACE={ns!r} K8S_POD_NAME={name!r} is not a pod",
                         "a namespace is a DNS-1123 label, a pod name a DNS-1123 subdomain")
    return PodRef(ns, name, req.arg("K8S_POD_UID") or "")


def where(pod: PodRef | None, network: str | None = None) -> str:
    """The context an error message starts with: "pod ns/name: network x"."""
    out = f"pod {pod}" if pod else "request"
    return f"{out}: network {network}" if network else out
