#!/usr/bin/env bash
# Regenerates the Python modules of the kubelet gRPC APIs netattach speaks, from the
# .proto files beside them (each one's header says where it came from):
#   src/netattach/node/podresources/api.proto   PodResources v1 (client: node/devices.py)
#   src/netattach/daemon/draplugin/pluginregistration_v1.proto  plugin registration
#                                     (service Registration, served by daemon/dra.py)
#   src/netattach/daemon/draplugin/dra_v1.proto, dra_v1beta1.proto  the DRA kubelet
#                                     plugin API (service DRAPlugin, served by daemon/dra.py)
# Each package lives in the layer folder of its only user (docs/architecture.md, "Layers").
# For each: <name>_pb2.py (messages), <name>_pb2.pyi (type stubs), <name>_pb2_grpc.py
# (stubs and servicers; runtime: grpcio >= the GRPC_GENERATED_VERSION it names).
#
# The generator is pinned so that the committed files are reproducible:
#   grpcio-tools 1.84.0 (bundles libprotoc 35.1, i.e. protobuf 7.35.1 gencode)
# It runs from a throwaway venv, so the project venv never needs grpcio-tools. After
# regenerating, keep the `grpcio` and `protobuf` lower bounds in pyproject.toml at or
# above the versions the new files check for. The proto paths are given relative to
# src/, so the generated grpc modules import `from netattach.<layer>.<dir> import
# <name>_pb2`: moving a package means regenerating it (the paths are also in the
# descriptors, as the .proto file's name).
set -euo pipefail
GRPCIO_TOOLS_VERSION=1.84.0
PROTOS=(  # relative to src/
    netattach/node/podresources/api.proto
    netattach/daemon/draplugin/pluginregistration_v1.proto
    netattach/daemon/draplugin/dra_v1.proto
    netattach/daemon/draplugin/dra_v1beta1.proto
)
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q "grpcio-tools==$GRPCIO_TOOLS_VERSION"
cd src
"$tmp/venv/bin/python" -m grpc_tools.protoc -I . \
    --python_out=. --pyi_out=. --grpc_python_out=. \
    "${PROTOS[@]}"
echo "generated with grpcio-tools $GRPCIO_TOOLS_VERSION:" ${PROTOS[@]/%.proto/_pb2*.py*}
