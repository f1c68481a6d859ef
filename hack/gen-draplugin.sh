#!/usr/bin/env bash
# Regenerates the Python modules of the kubelet plugin APIs the DRA kubelet plugin of
# `netattach daemon --dra` serves (src/netattach/daemon/dra.py), from the .proto files in
# src/netattach/draplugin/ (each one's header says where it came from):
#   pluginregistration_v1.proto  the kubelet's plugin registration API (service Registration)
#   dra_v1.proto, dra_v1beta1.proto  the DRA kubelet plugin API (service DRAPlugin)
# For each: <name>_pb2.py (messages), <name>_pb2.pyi (type stubs), <name>_pb2_grpc.py
# (stubs and servicers).
#
# The generator is pinned, the same one as hack/gen-podresources.sh, so the committed
# files are reproducible and ask for the same grpcio/protobuf runtime:
#   grpcio-tools 1.84.0 (bundles libprotoc 35.1, i.e. protobuf 7.35.1 gencode)
# It runs from a throwaway venv, so the project venv never needs grpcio-tools.
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
    netattach/draplugin/pluginregistration_v1.proto \
    netattach/draplugin/dra_v1.proto \
    netattach/draplugin/dra_v1beta1.proto
echo "generated with grpcio-tools $GRPCIO_TOOLS_VERSION:" netattach/draplugin/*_pb2*.py*
