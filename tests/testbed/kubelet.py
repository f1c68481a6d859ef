"""A stand-in kubelet PodResources API (gRPC v1 over a unix socket), speaking the same
generated protobuf API netattach's client uses, so method paths and field numbers
cross a real gRPC connection."""
from __future__ import annotations

from concurrent import futures

import grpc

from netattach.podresources import api_pb2, api_pb2_grpc


def containers(*specs) -> list:
    """[(container name, [(resource name, [device IDs]), ...]), ...] -> ContainerResources."""
    return [api_pb2.ContainerResources(name=name, devices=[
        api_pb2.ContainerDevices(resource_name=r, device_ids=ids) for r, ids in devs])
        for name, devs in specs]


def pod_resources(namespace: str, name: str, *specs) -> api_pb2.PodResources:
    return api_pb2.PodResources(name=name, namespace=namespace, containers=containers(*specs))


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
