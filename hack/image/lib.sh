# Sourced by hack/image/*.sh (make image): the names and the buildah storage of one key
# directory, IMAGE_KEY_DIR (~/.cache/netattach/image/<key>, set by mk/image.mk).
# shellcheck shell=sh

: "${IMAGE_KEY_DIR:?IMAGE_KEY_DIR is not set (run make image)}"
IMAGE_KEY=$(basename "$IMAGE_KEY_DIR")
# The local stand-ins for python:3.11-slim-bullseye and debian:bullseye-slim.
BUILD_BASE=localhost/netattach-build-base:$IMAGE_KEY
RUNTIME_BASE=localhost/netattach-runtime-base:$IMAGE_KEY

# One script at a time per key directory (two worktrees may run `make image` at once).
mkdir -p "$IMAGE_KEY_DIR"
exec 9>"$IMAGE_KEY_DIR/lock"
flock 9

# buildah's storage of its own (vfs: no overlay mounts, no fuse; never the machine's
# default /var/lib/containers), configured by a storage.conf of its own so no
# system or user storage.conf applies.
export CONTAINERS_STORAGE_CONF="$IMAGE_KEY_DIR/storage.conf"
mkdir -p "$IMAGE_KEY_DIR/storage" "$IMAGE_KEY_DIR/run"
cat >"$CONTAINERS_STORAGE_CONF" <<CONF
[storage]
driver = "vfs"
graphroot = "$IMAGE_KEY_DIR/storage"
runroot = "$IMAGE_KEY_DIR/run"
CONF

# The moment a step starts, for the log: `step <what>`.
step() { echo "make image: $* ($(date +%T))"; }

# pip inside the build (buildah bud's RUN steps, buildah run) trusts the CAs this host
# trusts: a machine whose HTTPS goes through a proxy with its own CA reaches PyPI as the
# host's pip does. Bind mounts, so nothing of it is committed into an image.
HOST_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
printf '[global]\ncert = /etc/netattach-host-ca.crt\n' >"$IMAGE_KEY_DIR/pip.conf"
PIP_TRUST_VOLUMES="--volume $HOST_CA_BUNDLE:/etc/netattach-host-ca.crt:ro --volume $IMAGE_KEY_DIR/pip.conf:/etc/pip.conf:ro"
