# The container image (docs/build.md, "make image"), built here with no registry: two
# Debian bullseye base images made from Debian packages (hack/image/bases.sh, cached
# per key), then the repository's Containerfile built on them with buildah, exported as
# a docker-archive (`ctr -n k8s.io images import`, `docker load`, `podman load`).
#
# Defines:
#   image           build/image/netattach.tar, rebuilt only when an input changed
#   image-bases     the two base images (a second run only checks a stamp)
#   image-clean     drop the cached bases (every key) and the archive
#   IMAGE_ENV       command prefix pointing the tests (tests/image) at the archive
#   IMAGE_REF, IMAGE_ARCHIVE, IMAGE_KEY, IMAGE_KEY_DIR
# Needs BUILD_INPUTS (the Makefile's inputs of `make build`), CACHE_DIR and SUDO.

IMAGE_SRC := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))../hack/image)
# IMAGE_SUITE, IMAGE_GLIBC_FLOOR, IMAGE_PYTHON_VERSION, ...
include $(IMAGE_SRC)/base.env

# The key names what determines the bases: the suite, CPython's version and the scripts
# (base.env pins the rest), so changing any of them builds into a fresh directory.
IMAGE_BASE_FILES := $(IMAGE_SRC)/base.env $(IMAGE_SRC)/lib.sh $(IMAGE_SRC)/bases.sh $(IMAGE_SRC)/bases-cpython.sh
IMAGE_KEY := $(IMAGE_SUITE)-python$(IMAGE_PYTHON_VERSION)-$(shell cat $(IMAGE_BASE_FILES) | sha256sum | cut -c1-12)
IMAGE_KEY_DIR := $(CACHE_DIR)/image/$(IMAGE_KEY)

# The reference deploy/ runs: the version of pyproject.toml.
IMAGE_VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' pyproject.toml | head -n1)
IMAGE_REF := ghcr.io/netattach/netattach:$(IMAGE_VERSION)
IMAGE_ARCHIVE := $(CURDIR)/build/image/netattach.tar
# (BUILD_INPUTS has the lock the build stage installs, hack/lock/build.txt)
# (and the SBOM's: its tool's lock and the script that picks the bundle's pins)
IMAGE_INPUTS := Containerfile .dockerignore $(IMAGE_SRC)/build.sh $(BUILD_INPUTS) \
	hack/lock/sbom.txt hack/sbom-requirements.py

IMAGE_ENV := NETATTACH_IMAGE=$(IMAGE_ARCHIVE) NETATTACH_IMAGE_REF=$(IMAGE_REF)

# mmdebstrap and buildah make the bases and the image; patch and xz-utils apply Debian's
# patches to CPython's source; binutils' objdump is what tests/image reads the dist with.
IMAGE_DEBS := mmdebstrap buildah patch xz-utils binutils
IMAGE_COMMANDS := mmdebstrap buildah patch xz objdump
.PHONY: image image-sysdeps image-bases image-clean
image-sysdeps:
	@if ! (for c in $(IMAGE_COMMANDS); do command -v $$c >/dev/null || exit 1; done); then \
	  echo "installing Debian packages: $(IMAGE_DEBS)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $(IMAGE_DEBS) >/dev/null; \
	fi

image-bases: $(IMAGE_KEY_DIR)/bases.done
$(IMAGE_KEY_DIR)/bases.done: | image-sysdeps
	@echo "building the image's base images $(IMAGE_KEY) (takes 3-5 min on 2 cores the first time, cached afterwards in $(IMAGE_KEY_DIR))"
	$(SUDO) env IMAGE_KEY_DIR=$(IMAGE_KEY_DIR) $(IMAGE_SRC)/bases.sh

# The archive gets the build's start time, as the executable of `make build` does.
# An archive built from the same inputs (their names and contents, the bases' key, the
# reference, the commit) is kept in the cache, the last IMAGE_ARCHIVES_KEPT of them: a
# fresh clone of a commit built before copies it instead of building again (buildah's
# build is reproducible from these inputs alone: the Containerfile pins every pip package).
# The commit (hack/build-commit.sh) is stamped into the bundle and the image's
# org.opencontainers.image.revision; org.opencontainers.image.created is that commit's
# time (SOURCE_DATE_EPOCH's convention: one commit, one value), the build's start
# without one. A new commit alone does not rebuild an archive that is up to date: its
# stamp stays the commit it was built from (docs/build.md, "Version and commit").
IMAGE_ARCHIVES := $(IMAGE_KEY_DIR)/archives
IMAGE_ARCHIVES_KEPT := 4
image: $(IMAGE_ARCHIVE)
$(IMAGE_ARCHIVE): $(IMAGE_KEY_DIR)/bases.done $(IMAGE_INPUTS) | image-sysdeps
	@mkdir -p $(@D)
	@touch $(@D)/.started
	@commit=$$(hack/build-commit.sh); \
	case $$commit in unknown) created=$$(date -u +%Y-%m-%dT%H:%M:%SZ);; \
	  *) created=$$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ);; esac; \
	digest=$$( { echo $(IMAGE_KEY) $(IMAGE_REF) $$commit; sha256sum $(IMAGE_INPUTS); } | sha256sum | cut -c1-16); \
	cached=$(IMAGE_ARCHIVES)/$$digest.tar; \
	if [ -f $$cached ]; then \
	  echo "make image: the inputs of $$cached, built before: copied"; \
	  cp $$cached $@.tmp && mv $@.tmp $@; \
	else \
	  $(SUDO) env IMAGE_KEY_DIR=$(IMAGE_KEY_DIR) NETATTACH_COMMIT=$$commit NETATTACH_CREATED=$$created \
	    NETATTACH_VERSION=$(IMAGE_VERSION) $(IMAGE_SRC)/build.sh $(IMAGE_REF) $@ && \
	  mkdir -p $(IMAGE_ARCHIVES) && cp $@ $$cached.tmp && mv $$cached.tmp $$cached && \
	  ls -1t $(IMAGE_ARCHIVES)/*.tar | tail -n +$$(( $(IMAGE_ARCHIVES_KEPT) + 1 )) | xargs -r rm -f; \
	fi
	@touch -r $(@D)/.started $@

image-clean:
	$(SUDO) rm -rf $(CACHE_DIR)/image $(IMAGE_ARCHIVE) $(dir $(IMAGE_ARCHIVE)).started
