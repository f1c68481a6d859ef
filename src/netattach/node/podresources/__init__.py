"""Generated client/server modules of the kubelet PodResources v1 gRPC API (api.proto).

Regenerate with hack/gen-grpc.sh. Imported only by node/devices.py, lazily.
"""
