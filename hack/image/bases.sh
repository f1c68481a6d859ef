#!/bin/sh
# The two base images the Containerfile's build args name under `make image`, made from
# Debian packages with no registry (docs/build.md, "make image"), imported into the buildah
# storage of IMAGE_KEY_DIR (hack/image/lib.sh):
#   $BUILD_BASE    what python:3.11-slim-bullseye is to a registry build: an IMAGE_SUITE
#                  root with CPython built from Debian's source package (base.env) in
#                  /usr/local, its run-time libraries and binutils (PyInstaller runs
#                  objdump; the spec strips);
#   $RUNTIME_BASE  what debian:bullseye-slim is: minbase (coreutils included: the thick
#                  daemon runs child plugins through /usr/sbin/chroot), documentation
#                  left out as the slim images do.
# Writes IMAGE_KEY_DIR/bases.done last, so an interrupted run starts over.
# usage: IMAGE_KEY_DIR=<dir> hack/image/bases.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/base.env"
. "$here/lib.sh"
if [ -e "$IMAGE_KEY_DIR/bases.done" ]; then
	step "bases made meanwhile by another run"
	exit 0
fi

work=$IMAGE_KEY_DIR/work
rm -rf "$work" "$IMAGE_KEY_DIR/bases.done"
mkdir -p "$work"
# working containers an interrupted run left (the storage is this key's own)
buildah rm --all >/dev/null

keyring=/usr/share/keyrings/debian-archive-keyring.gpg
mirrors="deb [signed-by=$keyring] $IMAGE_MIRROR $IMAGE_SUITE main|deb [signed-by=$keyring] $IMAGE_MIRROR $IMAGE_SUITE-updates main|deb [signed-by=$keyring] $IMAGE_SECURITY_MIRROR $IMAGE_SUITE-security main"
# slim, as debian:*-slim (debuerreotype) is: no manuals, no docs but the copyright files
slim="--dpkgopt=path-exclude=/usr/share/man/* --dpkgopt=path-exclude=/usr/share/info/*
	--dpkgopt=path-exclude=/usr/share/doc/* --dpkgopt=path-include=/usr/share/doc/*/copyright
	--dpkgopt=path-exclude=/usr/share/locale/* --dpkgopt=path-exclude=/usr/share/groff/*
	--dpkgopt=path-exclude=/usr/share/lintian/*"

# mmdebstrap <variant> <tarball> [options...]: an IMAGE_SUITE root as a tarball, without
# device nodes (the container runtime makes /dev).
mmdebstrap_suite() {
	variant=$1 out=$2
	shift 2
	set -- "$@" "$IMAGE_SUITE" "$out"
	IFS='|'
	# shellcheck disable=SC2086 # $mirrors splits on '|' into sources.list lines
	set -- "$@" $mirrors
	unset IFS
	# shellcheck disable=SC2086 # $slim: one option a word
	mmdebstrap --quiet --mode=root --variant="$variant" --format=tar --skip=output/dev \
		$slim "$@"
}

# ------------------------------------------------ the runtime base, in the background
step "runtime base: mmdebstrap $IMAGE_SUITE minbase"
mmdebstrap_suite minbase "$work/runtime-base.tar" >"$work/runtime-base.log" 2>&1 &
runtime_pid=$!
trap 'kill "$runtime_pid" 2>/dev/null || true' EXIT

# ------------------------------------------------ CPython's source, from Debian's mirror
step "CPython source: $IMAGE_PYTHON_SOURCE from $IMAGE_PYTHON_SOURCE_SUITE"
apt_dir=$work/apt
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$work/src"
echo "deb-src [signed-by=$keyring] $IMAGE_MIRROR $IMAGE_PYTHON_SOURCE_SUITE main" >"$apt_dir/sources.list"
# apt with lists and cache of its own: the machine's sources and state stay as they are;
# the Sources index is verified against the archive keyring, the files against the index.
apt_own() {
	apt-get -q -o Dir::Etc::SourceList="$apt_dir/sources.list" -o Dir::Etc::SourceParts=/nonexistent \
		-o Dir::State::Lists="$apt_dir/lists" -o Dir::Cache="$apt_dir/cache" \
		-o APT::Sandbox::User=root -o Debug::NoLocking=1 "$@"
}
apt_own update >"$work/apt.log" 2>&1 || { cat "$work/apt.log"; exit 1; }
(cd "$work/src" && apt_own source --download-only "$IMAGE_PYTHON_SOURCE") >>"$work/apt.log" 2>&1 \
	|| { cat "$work/apt.log"; exit 1; }
dsc=$(ls "$work/src/"*.dsc)
set -- "$work/src/${IMAGE_PYTHON_SOURCE}_$IMAGE_PYTHON_VERSION.orig.tar."*
orig=$1
if ! echo "$IMAGE_PYTHON_ORIG_SHA256  $orig" | sha256sum --quiet -c -; then
	echo "make image: $(basename "$dsc") does not use the CPython $IMAGE_PYTHON_VERSION tarball" \
		"hack/image/base.env pins (sha256 $IMAGE_PYTHON_ORIG_SHA256): update base.env" >&2
	exit 1
fi
mkdir "$work/src/python"
tar -C "$work/src/python" --strip-components=1 -xf "$orig"
tar -C "$work/src" -xf "$work/src/"*.debian.tar.*
# Debian's series lists its packaging patches (Debian's file layout, multiarch, its
# install schemes: not for a /usr/local build) first, then, from the first CVE patch on,
# the upstream fixes its security updates backport: those are applied.
sed -n '/^CVE-/,$p' "$work/src/debian/patches/series" | grep -v '^#' | while read -r patch level; do
	patch -d "$work/src/python" -s -N "${level:--p1}" <"$work/src/debian/patches/$patch"
done
python_source="$(basename "$dsc" .dsc): upstream tarball + the patches from the first CVE patch of debian/patches/series on"
cp "$here/bases-cpython.sh" "$work/src/"

# ------------------------------------------------ the build base
step "build base: mmdebstrap $IMAGE_SUITE with CPython $IMAGE_PYTHON_VERSION built in it"
# kept: what the interpreter's modules link (ssl, ctypes, sqlite3, the compressors,
# pyexpat, uuid), certificates and the net/time-zone databases, binutils
runtime_debs=binutils,ca-certificates,netbase,tzdata,libssl1.1,libffi7,libsqlite3-0,libexpat1,libbz2-1.0,liblzma5,zlib1g,libuuid1
# purged once CPython is installed
build_debs="gcc make libc6-dev dpkg-dev pkg-config libssl-dev libffi-dev libsqlite3-dev libexpat1-dev libbz2-dev liblzma-dev zlib1g-dev uuid-dev"
mmdebstrap_suite minbase "$work/build-base.tar" \
	--include="$runtime_debs,$(echo "$build_debs" | tr ' ' ,)" \
	--customize-hook="copy-in $work/src/python $work/src/bases-cpython.sh /usr/src" \
	--customize-hook='chroot "$1" sh /usr/src/bases-cpython.sh' \
	--customize-hook="chroot \"\$1\" apt-get purge -qq -y --auto-remove $build_debs >/dev/null" \
	--customize-hook='rm "$1/usr/src/bases-cpython.sh"' \
	--customize-hook='chroot "$1" python3 -c "import bz2, ctypes, lzma, pyexpat, sqlite3, ssl, zlib, _uuid"' \
	--customize-hook='chroot "$1" objdump --version >/dev/null'

if ! wait "$runtime_pid"; then
	cat "$work/runtime-base.log"
	exit 1
fi

# ------------------------------------------------ into buildah's storage
# import_rootfs <tarball> <image> <what made it> [buildah config options...]: one layer, the
# root as mmdebstrap wrote it plus an empty /dev (the runtime mounts one there)
import_rootfs() {
	tarball=$1 image=$2 created_by=$3
	shift 3
	ctr=$(buildah from --pull=never scratch)
	mnt=$(buildah mount "$ctr")
	tar -C "$mnt" --numeric-owner --xattrs --xattrs-include='*' -xpf "$tarball"
	mkdir -p -m 755 "$mnt/dev"
	buildah umount "$ctr" >/dev/null
	buildah config --created-by "$created_by" \
		--env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@" "$ctr"
	buildah rmi "$image" >/dev/null 2>&1 || true
	buildah commit --quiet --rm "$ctr" "$image" >/dev/null
}
step "importing $BUILD_BASE and $RUNTIME_BASE into $IMAGE_KEY_DIR/storage"
import_rootfs "$work/build-base.tar" "$BUILD_BASE" \
	"hack/image/bases.sh: mmdebstrap $IMAGE_SUITE minbase, CPython $IMAGE_PYTHON_VERSION in /usr/local" \
	--env LANG=C.UTF-8 --env PYTHON_VERSION="$IMAGE_PYTHON_VERSION" \
	--label "netattach.python-source=$python_source" --cmd python3
import_rootfs "$work/runtime-base.tar" "$RUNTIME_BASE" "hack/image/bases.sh: mmdebstrap $IMAGE_SUITE minbase" \
	--cmd bash
trap - EXIT
rm -rf "$work"
touch "$IMAGE_KEY_DIR/bases.done"
step "bases ready"
