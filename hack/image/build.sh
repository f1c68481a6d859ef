#!/bin/sh
# The image from the repository's Containerfile, built by buildah on the two bases of
# hack/image/bases.sh (no registry: --pull=never, the bases named by build args), and
# exported as a docker-archive for `ctr images import` / `docker load` / `podman load`.
# The storage keeps only the bases afterwards: the archive is the product.
# The bundle's commit stamp and the image's OCI labels revision, version and created come
# from NETATTACH_COMMIT, NETATTACH_VERSION and NETATTACH_CREATED (mk/image.mk sets them:
# hack/build-commit.sh, pyproject.toml's version, the commit's time).
# usage: IMAGE_KEY_DIR=<dir> [NETATTACH_COMMIT=..] [NETATTACH_VERSION=..] [NETATTACH_CREATED=..]
#        hack/image/build.sh <image reference> <archive>
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
ref=$1 archive=$2
cd "$here/../.."

step "buildah bud Containerfile -> $ref"
# chroot isolation: no OCI runtime, no namespaces to set up; the host's network, for pip
# shellcheck disable=SC2086 # PIP_TRUST_VOLUMES: one option a word
buildah bud --pull=never --isolation=chroot --network=host --format=docker $PIP_TRUST_VOLUMES \
	--build-arg BUILD_BASE="$BUILD_BASE" --build-arg RUNTIME_BASE="$RUNTIME_BASE" \
	--build-arg NETATTACH_COMMIT="${NETATTACH_COMMIT:-unknown}" \
	${NETATTACH_VERSION:+--build-arg NETATTACH_VERSION="$NETATTACH_VERSION"} \
	--label org.opencontainers.image.created="${NETATTACH_CREATED:-$(date -u +%Y-%m-%dT%H:%M:%SZ)}" \
	--tag "$ref" --file Containerfile .
step "exporting $ref to $archive"
rm -f "$archive.tmp"
buildah push --quiet "$ref" "docker-archive:$archive.tmp:$ref"
buildah rmi "$ref" >/dev/null
buildah rmi --prune >/dev/null
mv -f "$archive.tmp" "$archive"
