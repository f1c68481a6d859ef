#!/usr/bin/env bash
# Regenerates the Python modules of the kubelet PodResources v1 API from
# src/netattach/podresources/api.proto:
#   api_pb2.py       messages            (runtime: protobuf >= the gencode version it names)
#   api_pb2.pyi      type stubs
#   api_pb2_grpc.py  PodResourcesLister stub and servicer (runtime: grpcio >= GRPC_GENERATED_VERSION)
#
# The generator is pinned so that the committed files are reproducible:
#   grpcio-tools 1.84.0 (bundles libprotoc 35.1, i.e. protobuf 7.35.1 gencode)
# It runs from a throwaway venv, so the project venv never needs grpcio-tools.
# After regenerating, keep the `grpcio` and `protobuf` lower bounds in
# pyproject.toml at or above the versions the new files check for.
#
# The proto path is given relative to src/ so the generated grpc module imports
# `from netattach.podresources import api_pb2`.
set -euo pipefail
GRPCIO_TOOLS_VERSION=1.84.0
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q "grpcio-tools==$GRPCIO_TOOLS_VERSION"
cd src
"$tmp/venv/bin/python" -m grpc_tools.protoc -I . \
    --python_out=. --pyi_out=. --grpc_python_out=. \
    netattach/podresources/api.proto
echo "generated with grpcio-tools $GRPCIO_TOOLS_VERSION:" netattach/podresources/api_pb2*.py*
