"""A stand-in kubelet PodResources API (gRPC v1 over a unix socket), speaking the same
generated protobuf API netattach's client uses, so method paths and field numbers
cross a real gRPC connection. Device plugins' devices and DRA claims (DynamicResources,
in the shape kubelet 1.34 gives them)."""
from __future__ import annotations

from concurrent import futures

import grpc

from netattach.node.podresources import api_pb2, api_pb2_grpc


def dynamic_resources(namespace: str, claims) -> list:
    """[(ResourceClaim name, [(driver, pool, device, [CDI device names]), ...]), ...] ->
    DynamicResources, assembled as kubelet 1.34 assembles them (k8s.io/kubernetes
    v1.34.4, pkg/kubelet/cm/container_manager_linux.go, GetDynamicResources): one
    ClaimResource per device, grouped by driver (the kubelet walks a Go map of
    drivers, so any order; here the order of first appearance), each device's
    cdi_devices holding the CDI devices of the same driver's devices before it too
    (its slice is built across the driver's devices), claim_namespace the pod's."""
    out = []
    for claim, devices in claims:
        by_driver: dict[str, list] = {}
        for driver, pool, device, cdi_names in devices:
            by_driver.setdefault(driver, []).append((pool, device, cdi_names))
        claim_resources = []
        for driver, driver_devices in by_driver.items():
            cdi: list = []
            for pool, device, cdi_names in driver_devices:
                cdi = cdi + [api_pb2.CDIDevice(name=n) for n in cdi_names]
                claim_resources.append(api_pb2.ClaimResource(
                    cdi_devices=cdi, driver_name=driver, pool_name=pool, device_name=device))
        out.append(api_pb2.DynamicResource(claim_name=claim, claim_namespace=namespace,
                                           claim_resources=claim_resources))
    return out


def containers(*specs, namespace: str = "") -> list:
    """[(container name, [(resource name, [device IDs]), ...][, claims]), ...] ->
    ContainerResources; `claims` as dynamic_resources takes them (the claims the
    container references), `namespace` the pod's."""
    return [api_pb2.ContainerResources(
        name=spec[0],
        devices=[api_pb2.ContainerDevices(resource_name=r, device_ids=ids) for r, ids in spec[1]],
        dynamic_resources=dynamic_resources(namespace, spec[2] if len(spec) > 2 else []))
        for spec in specs]


def pod_resources(namespace: str, name: str, *specs) -> api_pb2.PodResources:
    return api_pb2.PodResources(name=name, namespace=namespace,
                                containers=containers(*specs, namespace=namespace))


def claims_of_pod(api, namespace: str, pod_name: str, cdi_devices: dict) -> list:
    """The pod's containers with the ResourceClaims each references, read from the API
    server as kubelet 1.34 reads them (pkg/kubelet/cm/dra/manager.go,
    GetContainerClaimInfos; podresources/server_v1.go): restartable init containers,
    then containers; for each, every pod claim (spec.resourceClaims order) once per
    reference in the container's resources.claims; the claim's object name from
    `resourceClaimName`, or for a template from status.resourceClaimStatuses (none yet:
    skipped); its devices from status.allocation.devices.results, the CDI names being
    what the driver's NodePrepareResources answered: `cdi_devices` (driver, pool,
    device) -> [CDI device names]. A claim not reserved for the pod (status.reservedFor)
    is refused, as the kubelet refuses to prepare it.

    Returns [(container name, [], claims)] for `containers`/`pod_resources`.
    """
    from kubernetes.client import CoreV1Api, ResourceV1Api

    pod = api.sanitize_for_serialization(CoreV1Api(api).read_namespaced_pod(pod_name, namespace))
    spec, status = pod["spec"], pod.get("status") or {}
    generated = {s["name"]: s.get("resourceClaimName")
                 for s in status.get("resourceClaimStatuses") or []}
    claims = {}
    for pc in spec.get("resourceClaims") or []:
        name = pc.get("resourceClaimName") or generated.get(pc["name"])
        if not name:
            continue
        claim = api.sanitize_for_serialization(
            ResourceV1Api(api).read_namespaced_resource_claim(name, namespace))
        cstatus = claim.get("status") or {}
        if not any(r.get("uid") == pod["metadata"]["uid"] for r in cstatus.get("reservedFor") or []):
            raise RuntimeError(f"ResourceClaim {namespace}/{name} is not reserved for the pod")
        results = ((cstatus.get("allocation") or {}).get("devices") or {}).get("results") or []
        claims[pc["name"]] = (name, [(r["driver"], r["pool"], r["device"],
                                      cdi_devices.get((r["driver"], r["pool"], r["device"]), []))
                                     for r in results])
    out = []
    containers = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    for c in containers + spec["containers"]:
        refs = [r["name"] for r in (c.get("resources") or {}).get("claims") or []]
        out.append((c["name"], [], [claims[pc["name"]] for pc in spec.get("resourceClaims") or []
                                    if pc["name"] in claims for ref in refs if ref == pc["name"]]))
    return out


class PodResourcesServer(api_pb2_grpc.PodResourcesListerServicer):
    """Serves Get and List for a fixed list of PodResources."""

    def __init__(self, pods: list):
        self.pods = pods

    def Get(self, request, context):
        for p in self.pods:
            if (p.namespace, p.name) == (request.pod_namespace, request.pod_name):
                return api_pb2.GetPodResourcesResponse(pod_resources=p)
        context.abort(grpc.StatusCode.UNKNOWN,
                      f"pod {request.pod_name} in namespace {request.pod_namespace} not found")

    def List(self, request, context):
        return api_pb2.ListPodResourcesResponse(pod_resources=self.pods)


def serve(socket_path: str, servicer) -> grpc.Server:
    """Start `servicer` on unix:`socket_path`; the caller stops it (server.stop(None))."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(servicer, server)
    if server.add_insecure_port(f"unix://{socket_path}") == 0:
        raise RuntimeError(f"cannot listen on {socket_path}")
    server.start()
    return server
