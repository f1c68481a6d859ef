# netattach: the two README commands are `make demo` and `make test`; each sets up
# everything it needs on a fresh machine (Debian packages, virtualenv, Go-built test bed).
SHELL := /bin/bash
.DEFAULT_GOAL := test

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
CACHE_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/netattach
PYTEST_ARGS ?=

# Go-built test bed (kube-apiserver, etcd, cnitool, CNI reference plugins):
# defines `testbin` and TESTBIN_ENV.
include mk/testbin.mk

SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
DEBS := containernetworking-plugins iproute2 iptables nftables runc socat

.PHONY: sysdeps venv build lint test unit demo bench bench-node bench-cluster bench-all clean
sysdeps:
	@if ! command -v ip >/dev/null || [ ! -x /usr/lib/cni/bridge ] || [ ! -x /usr/sbin/iptables ] || [ ! -x /usr/sbin/runc ] || ! command -v socat >/dev/null || ! command -v nft >/dev/null; then \
	  echo "installing Debian packages: $(DEBS)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $(DEBS) >/dev/null; \
	fi

# netattach and its test bed (testbed/, a distribution of its own that the tests, the
# demo and the bench import as netattach_testbed), both editable. Installed by uv (the
# test extra's, bootstrapped by pip at the same pin): the same resolution as pip's, in
# ~10 s against pip's ~55 s on a clean clone (pip keeps no cache here; uv's is
# ~/.cache/uv). pip stays in the venv for the bench's optional tools.
UV_REQ := $(shell sed -n 's/^ *"\(uv[<>=][^"]*\)".*/\1/p' pyproject.toml)
venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml testbed/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -U pip '$(UV_REQ)'
	$(VENV)/bin/uv pip install -q --python $(PY) -e '.[test]' -e ./testbed
	touch $@

# The single binary (docs/build.md): PyInstaller's onedir bundle dist/netattach/,
# the executable dist/netattach/netattach next to its _internal/. Rebuilt only when
# an input changed: the package's files, the spec, the entry script, pyproject.toml,
# the lock. The executable gets the build's start time, so a source edited during a
# build is newer than the artifact (make rebuilds it; tests/e2e refuses the stale artifact).
NETATTACH_EXE := $(CURDIR)/dist/netattach/netattach
LOCK := hack/lock/build.txt
BUILD_INPUTS := netattach.spec hack/pyinstaller_entry.py hack/shim_entry.py \
	hack/gen-dataclass-code.py hack/build-commit.sh pyproject.toml $(LOCK) \
	$(shell find src/netattach src/netattach_shim -type f ! -path '*/__pycache__/*' ! -name '*.pyc')

# The build's own virtualenv (docs/build.md, "The lock"): exactly what $(LOCK) pins,
# every file checked against its hashes (wheels only), then netattach itself with no
# dependency and no isolated build (the backend is the lock's). Not .venv: pip checks
# no hash of a package already installed, and PyInstaller would bundle what the test
# extra brings along (urllib3, pygments) unpinned.
BUILD_VENV := build/venv
build: $(NETATTACH_EXE)
$(BUILD_VENV)/.installed: $(LOCK) pyproject.toml
	rm -rf $(BUILD_VENV)
	$(PYTHON) -m venv $(BUILD_VENV)
	$(BUILD_VENV)/bin/python -m pip install -q --disable-pip-version-check --require-hashes -r $(LOCK)
	$(BUILD_VENV)/bin/pip install -q --no-deps --no-build-isolation -e .
	touch $@
# A bundle built from the same inputs (their names and contents, the commit it is
# stamped with, the machine's Python) is kept in the cache, the last BUILDS_KEPT of
# them, as `make image` keeps its archives: a fresh clone of a commit built before
# (a CI run again) unpacks it instead of making build/venv and running PyInstaller
# (~50 s on 2 cores). The build venv is made only when PyInstaller runs.
BUILDS := $(CACHE_DIR)/build
BUILDS_KEPT := 4
$(NETATTACH_EXE): $(BUILD_INPUTS)
	@mkdir -p build
	@touch build/.started
	@digest=$$( { hack/build-commit.sh; $(PYTHON) -c 'import platform, sys; print(sys.version, platform.machine())'; \
	  sha256sum $(BUILD_INPUTS); } | sha256sum | cut -c1-16); \
	cached=$(BUILDS)/$$digest.tar; \
	if [ -f $$cached ]; then \
	  echo "make build: the inputs of $$cached, built before: unpacked"; \
	  rm -rf dist/netattach dist/netattach-shim && mkdir -p dist && tar -xf $$cached -C dist; \
	else \
	  $(MAKE) --no-print-directory $(BUILD_VENV)/.installed && \
	  $(BUILD_VENV)/bin/pyinstaller --noconfirm --log-level WARN --distpath dist \
	    --workpath build/pyinstaller netattach.spec && \
	  mkdir -p $(BUILDS) && tar -cf $$cached.tmp -C dist netattach netattach-shim && \
	  mv $$cached.tmp $$cached && \
	  ls -1t $(BUILDS)/*.tar | tail -n +$$(( $(BUILDS_KEPT) + 1 )) | xargs -r rm -f; \
	fi
	@touch -r build/.started $@

# Rewrites $(LOCK) from pyproject.toml (dependencies, the `build` extra) and
# hack/lock/build.in (pip, the build backend): the newest versions that have a wheel
# for the image's build base (CPython and glibc floor of hack/image/base.env), every
# file of each version hashed. uv resolves for that target whatever this machine is,
# so one lock serves `make build` and the Containerfile (docs/build.md, "The lock").
# Pins that still fit stay; UPGRADE=1 takes the newest of everything.
UPGRADE ?=
SBOM_LOCK := hack/lock/sbom.txt
.PHONY: lock
lock: venv
	@# the current pins are uv's preferences (it reads them from the output file)
	@cp $(LOCK) $(LOCK).new
	$(VENV)/bin/uv pip compile pyproject.toml hack/lock/build.in --extra build \
	  --generate-hashes --only-binary :all: --emit-build-options \
	  --python-version $(IMAGE_PYTHON_VERSION) \
	  --python-platform x86_64-manylinux_$(subst .,_,$(IMAGE_GLIBC_FLOOR)) \
	  --custom-compile-command 'make lock' $(if $(UPGRADE),--upgrade) --quiet --output-file $(LOCK).new
	@# an unchanged lock keeps its mtime: nothing of `make build` or `make image` reruns
	@if cmp -s $(LOCK).new $(LOCK); then rm $(LOCK).new; else mv $(LOCK).new $(LOCK); echo "$(LOCK) changed"; fi
	@# the image's SBOM tool (cyclonedx-bom), pinned by hack/lock/sbom.in, for the same target
	@cp $(SBOM_LOCK) $(SBOM_LOCK).new
	$(VENV)/bin/uv pip compile hack/lock/sbom.in --generate-hashes --only-binary :all: \
	  --emit-build-options --python-version $(IMAGE_PYTHON_VERSION) \
	  --python-platform x86_64-manylinux_$(subst .,_,$(IMAGE_GLIBC_FLOOR)) \
	  --custom-compile-command 'make lock' $(if $(UPGRADE),--upgrade) --quiet --output-file $(SBOM_LOCK).new
	@if cmp -s $(SBOM_LOCK).new $(SBOM_LOCK); then rm $(SBOM_LOCK).new; else mv $(SBOM_LOCK).new $(SBOM_LOCK); echo "$(SBOM_LOCK) changed"; fi

# The container image (docs/build.md, "make image"): build/image/netattach.tar, built with
# buildah from the Containerfile on Debian bullseye bases made here; defines `image`,
# `image-clean` and IMAGE_ENV.
include mk/image.mk

# Static checks (configured in pyproject.toml): ruff on the code and tests, mypy on the
# package (strict on the CNI protocol and the orchestrator's core).
lint: venv
	$(VENV)/bin/ruff check src tests testbed hack
	$(VENV)/bin/mypy

# Every test: the static checks, then unit, integration (real plugins in real netns)
# and end to end (real kube-apiserver + etcd), the plugin exec'd being the built
# artifact, the image (tests/image) and the real node (tests/node). Needs root for
# network namespaces. The slowest phases are listed (--durations), so every CI log
# shows where the time goes. With no PYTEST_ARGS, hack/test-all.sh runs every test once
# in three overlapping pytest runs: tests/unit beside TEST_PREP, then tests/node (after
# the e2e tests that start a containerd on the machine and the bench harness tests)
# beside the rest; with PYTEST_ARGS, one pytest run of what they select after TEST_PREP
# (`make test PYTEST_ARGS=tests` runs every test in one run, one tier after the other).
TEST_PREP := lint testbin testbin-k8s-oldest testbin-multus testbin-helm build image
TEST_ENV := NETATTACH_EXE=$(NETATTACH_EXE) $(TESTBIN_ENV) $(IMAGE_ENV)
test: sysdeps venv
ifeq ($(strip $(PYTEST_ARGS)),)
	$(TEST_ENV) MAKE="$(MAKE) --no-print-directory" PREP="$(TEST_PREP)" PY=$(PY) hack/test-all.sh
else
	@$(MAKE) --no-print-directory $(TEST_PREP)
	$(TEST_ENV) $(PY) -m pytest --durations=30 $(PYTEST_ARGS)
endif

unit: venv
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

# RUNTIME=containerd: the same pod through a real containerd, driven through the CRI.
# NODE=real: on a real single-node cluster, netattach's image installed with kubectl.
RUNTIME ?= none
NODE ?= none
demo: sysdeps venv testbin build $(if $(filter real,$(NODE)),image)
	NETATTACH_EXE=$(NETATTACH_EXE) $(TESTBIN_ENV) $(IMAGE_ENV) $(PY) hack/demo.py \
	  --runtime $(RUNTIME) --node $(NODE)

# netattach side by side with Multus (thin and thick) and the child plugins alone,
# interleaved on the real test bed (hack/bench.py). RUNS=<n> rounds (default 15),
# BENCH_OUT=<dir> for the results (default build/bench). GNU time measures peak RSS.
# PROFILE=1 adds py-spy profiles of netattach thin's ADD and DEL.
RUNS ?=
PROFILE ?=
BENCH_OUT ?= build/bench
bench: sysdeps venv testbin testbin-multus build
	@if [ ! -x /usr/bin/time ]; then \
	  echo "installing Debian package: time"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq time >/dev/null; \
	fi
	@# PROFILE=1: py-spy, for the bench only (not a test or runtime dependency)
	@if [ -n "$(PROFILE)" ] && [ ! -x $(VENV)/bin/py-spy ]; then $(VENV)/bin/pip install -q 'py-spy>=0.4,<0.5'; fi
	NETATTACH_EXE=$(NETATTACH_EXE) $(TESTBIN_ENV) $(PY) hack/bench.py --out $(BENCH_OUT) \
	  $(if $(PROFILE),--profile) $(RUNS)

# Pod startup on the real node (hack/bench_node.py, issue 23): the cluster default
# network alone, netattach thin and thick, interleaved round by round; creation -> Ready
# and deletion -> gone of bursts of scenario-1 pods. ROUNDS=<n> (default 3),
# BURSTS=<sizes> (default 1,10,30,110; 110 is the kubelet's default maxPods),
# BENCH_NODE_OUT=<dir>; writes the table (.md, .json) and a plot (.png, matplotlib).
ROUNDS ?=
BURSTS ?=
BENCH_NODE_OUT ?= build/bench-node
bench-node: sysdeps venv testbin testbin-multus image
	@# the plot's library, for the bench only (not a test or runtime dependency)
	@$(PY) -c 'import matplotlib' 2>/dev/null || $(VENV)/bin/pip install -q 'matplotlib>=3.8,<4'
	$(TESTBIN_ENV) $(IMAGE_ENV) ROUNDS=$(ROUNDS) BURSTS=$(BURSTS) \
	  $(PY) hack/bench_node.py --out $(BENCH_NODE_OUT)

# A simulated cluster (hack/bench_cluster.py, issue 23): DAEMONS netattach thick daemons
# (default 50), each its own node and ServiceAccount, against one API server, then as
# many Multus thick daemons on a fresh one: the API server's CPU and the daemons'
# requests idle and under churn, their WATCHes, NAD propagation, the reconnect after an
# API server restart, one daemon's RSS at PODS pods and NADS NADs. SETTLE (a fresh API
# server's idle seconds before the baseline, default 180), SHARED_ROUNDS (rounds of both
# subjects and no daemon on one API server, default 3), CHURN_RATE (churn ticks a second,
# default 5), IDLE, CHURN, DOWN
# (seconds), PROPAGATION (NADs timed), PODS (110), NADS (5000), ROUNDS (interleaved,
# default 1; the table has the medians); BENCH_CLUSTER_OUT=<dir>.
# The daemon is the built artifact's `netattach daemon` (what the image ships).
DAEMONS ?=
SETTLE ?=
SHARED_ROUNDS ?=
CHURN_RATE ?=
IDLE ?=
CHURN ?=
DOWN ?=
PROPAGATION ?=
PODS ?=
NADS ?=
BENCH_CLUSTER_OUT ?= build/bench-cluster
bench-cluster: sysdeps venv testbin testbin-multus build
	NETATTACH_EXE=$(NETATTACH_EXE) $(TESTBIN_ENV) ROUNDS=$(ROUNDS) DAEMONS=$(DAEMONS) \
	  SETTLE=$(SETTLE) SHARED_ROUNDS=$(SHARED_ROUNDS) CHURN_RATE=$(CHURN_RATE) \
	  IDLE=$(IDLE) CHURN=$(CHURN) DOWN=$(DOWN) \
	  PROPAGATION=$(PROPAGATION) PODS=$(PODS) NADS=$(NADS) \
	  $(PY) hack/bench_cluster.py --out $(BENCH_CLUSTER_OUT)

# The three benches, one after the other (README "Performance"): exec'd CNI calls,
# pod startup on the real node, a simulated cluster of node daemons. About 90 minutes
# with the defaults on 2 CPUs; each prints its table and writes it to its out dir.
bench-all: bench bench-node bench-cluster

clean:
	rm -rf $(VENV) build dist .pytest_cache
