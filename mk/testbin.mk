# Go-built test bed: etcd + kube-apiserver (the real control plane the e2e tests,
# `make demo` and `make bench` run against), kube-controller-manager, kube-scheduler,
# kubelet and kubectl (the real node of testbed/netattach_testbed/node.py), cnitool + the CNI reference plugins, and
# containerd (the real container runtime, with its runc shim, ctr, the tests' CRI
# client and the sandbox image's pause program; runc itself is Debian's), and Multus
# CNI (thin plugin, thick-mode shim and daemon: what `make bench` measures netattach
# against; only `make bench` builds it).
# A second Kubernetes, the oldest minor still supported upstream (hack/testbin/k8s-oldest:
# kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kubectl; etcd is
# the main one's), runs the real node of tests/node/test_node_versions.py.
#
# The pinned versions live only in the tools modules under hack/testbin/*/go.mod;
# they are read from there and key the cache directories, so bumping a go.mod
# builds into a fresh directory and never reuses binaries of another version.
#
# Defines:
#   testbin         build whatever is missing (a second run only checks files)
#   testbin-multus  build Multus (for `make bench*` and `make test`, whose
#                   tests/integration/test_bench_cluster_harness.py runs its daemon; not part of `testbin`)
#   testbin-helm    build the Helm client (for `make test`, whose tests lint, render and
#                   install charts/netattach/; not part of `testbin`)
#   testbin-k8s-oldest  build the oldest supported Kubernetes (for `make test`, whose
#                   tests/node/test_node_versions.py starts a node on it; not part of `testbin`)
#   TESTBIN_ENV     command prefix pointing the tests/demo/bench at the binaries
#   TESTBIN_K8S_DIR, TESTBIN_CNI_DIR, TESTBIN_CONTAINERD_DIR, TESTBIN_MULTUS_DIR,
#   TESTBIN_HELM_DIR, TESTBIN_K8S_OLDEST_DIR, K8S_VERSION, K8S_OLDEST_VERSION, ETCD_VERSION,
#   CNI_PLUGINS_VERSION, CONTAINERD_VERSION, MULTUS_VERSION, HELM_VERSION

TESTBIN_DIR := $(CACHE_DIR)/testbin
TESTBIN_SRC := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))../hack/testbin)

# $(call gomod_version,<go.mod>,<module path>): the version a go.mod requires.
gomod_version = $(shell awk '$$1 == "$(2)" && $$2 ~ /^v/ { print $$2; exit }' $(1))
# $(call gomod_tools,<go.mod>): the package paths of its `tool ( ... )` block.
gomod_tools = $(shell awk '/^tool \(/ { t = 1; next } t && /^\)/ { t = 0 } t { print $$1 }' $(1))

K8S_VERSION := $(call gomod_version,$(TESTBIN_SRC)/k8s/go.mod,k8s.io/kubernetes)
ETCD_VERSION := $(call gomod_version,$(TESTBIN_SRC)/k8s/go.mod,go.etcd.io/etcd/server/v3)
K8S_OLDEST_VERSION := $(call gomod_version,$(TESTBIN_SRC)/k8s-oldest/go.mod,k8s.io/kubernetes)
CNI_PLUGINS_VERSION := $(call gomod_version,$(TESTBIN_SRC)/cni/go.mod,github.com/containernetworking/plugins)
CONTAINERD_VERSION := $(call gomod_version,$(TESTBIN_SRC)/containerd/go.mod,github.com/containerd/containerd/v2)
MULTUS_MODULE := gopkg.in/k8snetworkplumbingwg/multus-cni.v4
MULTUS_VERSION := $(call gomod_version,$(TESTBIN_SRC)/multus/go.mod,$(MULTUS_MODULE))
HELM_MODULE := helm.sh/helm/v3
HELM_VERSION := $(call gomod_version,$(TESTBIN_SRC)/helm/go.mod,$(HELM_MODULE))
ifeq ($(and $(K8S_VERSION),$(K8S_OLDEST_VERSION),$(ETCD_VERSION),$(CNI_PLUGINS_VERSION),$(CONTAINERD_VERSION),$(MULTUS_VERSION),$(HELM_VERSION)),)
$(error cannot read the test-bed versions from $(TESTBIN_SRC)/*/go.mod)
endif

# Keep these names in sync with testbed/netattach_testbed/cluster.py (default_k8s_bin_dir),
# which derives the same key from the same go.mod.
TESTBIN_K8S_DIR := $(TESTBIN_DIR)/k8s-$(K8S_VERSION)-etcd-$(ETCD_VERSION)
# The Kubernetes commands of the tools module (etcd, built apart, is not one of them).
K8S_PKGS := $(filter k8s.io/kubernetes/cmd/%,$(call gomod_tools,$(TESTBIN_SRC)/k8s/go.mod))
K8S_BINS := $(addprefix $(TESTBIN_K8S_DIR)/,$(notdir $(K8S_PKGS)))
# Keep in sync with testbed/netattach_testbed/cluster.py (default_k8s_oldest_bin_dir).
TESTBIN_K8S_OLDEST_DIR := $(TESTBIN_DIR)/k8s-$(K8S_OLDEST_VERSION)
K8S_OLDEST_PKGS := $(filter k8s.io/kubernetes/cmd/%,$(call gomod_tools,$(TESTBIN_SRC)/k8s-oldest/go.mod))
K8S_OLDEST_BINS := $(addprefix $(TESTBIN_K8S_OLDEST_DIR)/,$(notdir $(K8S_OLDEST_PKGS)))
TESTBIN_CNI_DIR := $(TESTBIN_DIR)/cni-$(CNI_PLUGINS_VERSION)
CNI_PKGS := $(call gomod_tools,$(TESTBIN_SRC)/cni/go.mod)
CNI_BINS := $(addprefix $(TESTBIN_CNI_DIR)/,$(notdir $(CNI_PKGS)))
# Keep in sync with testbed/netattach_testbed/runtime.py (default_bin_dir, BINARIES).
TESTBIN_CONTAINERD_DIR := $(TESTBIN_DIR)/containerd-$(CONTAINERD_VERSION)
CONTAINERD_PKGS := $(call gomod_tools,$(TESTBIN_SRC)/containerd/go.mod)
CONTAINERD_RELEASE_BINS := $(addprefix $(TESTBIN_CONTAINERD_DIR)/,$(notdir $(CONTAINERD_PKGS)))
CONTAINERD_BINS := $(CONTAINERD_RELEASE_BINS) $(TESTBIN_CONTAINERD_DIR)/criclient $(TESTBIN_CONTAINERD_DIR)/pause
# Keep in sync with hack/benchlib/multus.py (bin_dir).
TESTBIN_MULTUS_DIR := $(TESTBIN_DIR)/multus-$(MULTUS_VERSION)
MULTUS_PKGS := $(call gomod_tools,$(TESTBIN_SRC)/multus/go.mod)
MULTUS_BINS := $(addprefix $(TESTBIN_MULTUS_DIR)/,$(notdir $(MULTUS_PKGS)))
TESTBIN_HELM_DIR := $(TESTBIN_DIR)/helm-$(HELM_VERSION)
TESTBIN_HELM := $(TESTBIN_HELM_DIR)/helm

TESTBIN_ENV := NETATTACH_K8S_BIN=$(TESTBIN_K8S_DIR) NETATTACH_K8S_BIN_OLDEST=$(TESTBIN_K8S_OLDEST_DIR) \
	NETATTACH_CNI_BIN=$(TESTBIN_CNI_DIR) \
	NETATTACH_CONTAINERD_BIN=$(TESTBIN_CONTAINERD_DIR) NETATTACH_MULTUS_BIN=$(TESTBIN_MULTUS_DIR) \
	NETATTACH_HELM=$(TESTBIN_HELM)

# Build environment: the committed go.sum pins every module; -mod=readonly makes
# a build fail rather than edit go.mod/go.sum. The checksum DB is only a second
# opinion on downloads go.sum already verifies, so if it is unreachable (offline
# mirrors, proxies that only pass the module proxy) retry without it.
GO ?= go
TESTBIN_GOENV := GOFLAGS='-mod=readonly -buildvcs=false' GOTOOLCHAIN=local
# $(call testbin_download,<module dir>)
testbin_download = cd $(1) && err=$$(mktemp) && \
	if ! $(TESTBIN_GOENV) $(GO) mod download 2>$$err; then \
	  echo "go mod download failed ($$(tail -n1 $$err)); retrying with GOSUMDB=off, go.sum still verifies every module"; \
	  $(TESTBIN_GOENV) GOSUMDB=off $(GO) mod download || { rm -f $$err; exit 1; }; \
	fi; rm -f $$err

# Version stamping as the Kubernetes release build does it, so /version reports
# the pinned release instead of v0.0.0-master. $(call k8s_ldflags,<version>)
K8S_VERSION_PKG := k8s.io/component-base/version
k8s_ldflags = -s -w \
	-X $(K8S_VERSION_PKG).gitVersion=$(1) \
	-X $(K8S_VERSION_PKG).gitMajor=$(word 1,$(subst ., ,$(1:v%=%))) \
	-X $(K8S_VERSION_PKG).gitMinor=$(word 2,$(subst ., ,$(1:v%=%))) \
	-X $(K8S_VERSION_PKG).gitTreeState=clean

.PHONY: testbin testbin-multus testbin-helm testbin-k8s-oldest testbin-clean
testbin: $(K8S_BINS) $(TESTBIN_K8S_DIR)/etcd $(CNI_BINS) $(CONTAINERD_BINS)

# Each binary is linked to a temporary name and renamed into place, so an
# interrupted build never leaves a truncated binary that passes the existence check.
# kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kubectl: one
# `go build` (they share most packages), grouped target. The compiler writes no DWARF
# (-dwarf=false): the linker's -w would drop it anyway, and it is compile time.
# $(call k8s_build,<tools module dir>,<version>,<out dir>,<packages>,<binaries>,<minutes>)
define k8s_build
	@mkdir -p $(3).tmp
	@echo "building Kubernetes $(2): $(notdir $(5)) (takes ~$(6) min on 2 cores the first time, downloads included, cached afterwards in $(3))"
	@$(call testbin_download,$(1))
	cd $(1) && $(TESTBIN_GOENV) $(GO) build -trimpath -gcflags=all=-dwarf=false \
	  -ldflags '$(call k8s_ldflags,$(2))' -o $(3).tmp/ $(4)
	@mkdir -p $(3) && mv -f $(addprefix $(3).tmp/,$(notdir $(5))) $(3)/ && rmdir $(3).tmp
endef
$(K8S_BINS) &:
	$(call k8s_build,$(TESTBIN_SRC)/k8s,$(K8S_VERSION),$(TESTBIN_K8S_DIR),$(K8S_PKGS),$(K8S_BINS),12)

# The same five commands at the oldest supported minor, from their own tools module.
testbin-k8s-oldest: $(K8S_OLDEST_BINS)
$(K8S_OLDEST_BINS) &:
	$(call k8s_build,$(TESTBIN_SRC)/k8s-oldest,$(K8S_OLDEST_VERSION),$(TESTBIN_K8S_OLDEST_DIR),$(K8S_OLDEST_PKGS),$(K8S_OLDEST_BINS),7)

# etcd's main package is go.etcd.io/etcd/server/v3, which go would name `server`.
$(TESTBIN_K8S_DIR)/etcd:
	@mkdir -p $(@D)
	@echo "building etcd $(ETCD_VERSION) (takes ~2 min on 2 cores the first time, cached afterwards in $(@D))"
	@$(call testbin_download,$(TESTBIN_SRC)/k8s)
	cd $(TESTBIN_SRC)/k8s && $(TESTBIN_GOENV) $(GO) build -trimpath -ldflags '-s -w' \
	  -o $@.tmp go.etcd.io/etcd/server/v3
	@mv -f $@.tmp $@

# One `go build` for all CNI tools (they share most packages); grouped target.
$(CNI_BINS) &:
	@mkdir -p $(TESTBIN_CNI_DIR).tmp
	@echo "building cnitool and CNI plugins $(CNI_PLUGINS_VERSION) (takes ~1 min on 2 cores the first time, cached afterwards in $(TESTBIN_CNI_DIR))"
	@$(call testbin_download,$(TESTBIN_SRC)/cni)
	cd $(TESTBIN_SRC)/cni && $(TESTBIN_GOENV) $(GO) build -trimpath -ldflags '-s -w' \
	  -o $(TESTBIN_CNI_DIR).tmp/ $(CNI_PKGS)
	@mkdir -p $(TESTBIN_CNI_DIR) && mv -f $(TESTBIN_CNI_DIR).tmp/* $(TESTBIN_CNI_DIR)/ && rmdir $(TESTBIN_CNI_DIR).tmp

# containerd without the btrfs/devmapper/zfs snapshotters (cgo, headers we do not need:
# the test bed uses the native snapshotter); everything static (CGO_ENABLED=0), so the
# sandbox image's pause needs no libc. The release's binaries are keyed by version
# only; criclient and pause, this module's own packages, are rebuilt when their source
# is newer (seconds: Go's build cache holds the rest).
CONTAINERD_GOBUILD = cd $(TESTBIN_SRC)/containerd && CGO_ENABLED=0 $(TESTBIN_GOENV) $(GO) build \
	-trimpath -tags 'no_btrfs no_devmapper no_zfs' -ldflags '-s -w'
$(CONTAINERD_RELEASE_BINS) &:
	@mkdir -p $(TESTBIN_CONTAINERD_DIR).tmp
	@echo "building containerd $(CONTAINERD_VERSION) and ctr (takes ~2 min on 2 cores the first time, cached afterwards in $(TESTBIN_CONTAINERD_DIR))"
	@$(call testbin_download,$(TESTBIN_SRC)/containerd)
	$(CONTAINERD_GOBUILD) -o $(TESTBIN_CONTAINERD_DIR).tmp/ $(CONTAINERD_PKGS)
	@mkdir -p $(TESTBIN_CONTAINERD_DIR) && mv -f $(TESTBIN_CONTAINERD_DIR).tmp/* $(TESTBIN_CONTAINERD_DIR)/ && rmdir $(TESTBIN_CONTAINERD_DIR).tmp

$(TESTBIN_CONTAINERD_DIR)/%: $(TESTBIN_SRC)/containerd/%/main.go $(TESTBIN_SRC)/containerd/go.sum | $(CONTAINERD_RELEASE_BINS)
	$(CONTAINERD_GOBUILD) -o $@.tmp ./$*
	@mv -f $@.tmp $@

# Multus as its release is built (CGO_ENABLED=0, the version stamped, not stripped),
# so the bench measures the binaries a node runs; one `go build` for the three.
testbin-multus: $(MULTUS_BINS)
$(MULTUS_BINS) &:
	@mkdir -p $(TESTBIN_MULTUS_DIR).tmp
	@echo "building Multus $(MULTUS_VERSION): multus, multus-shim, multus-daemon (takes ~3 min on 2 cores the first time, cached afterwards in $(TESTBIN_MULTUS_DIR))"
	@$(call testbin_download,$(TESTBIN_SRC)/multus)
	cd $(TESTBIN_SRC)/multus && CGO_ENABLED=0 $(TESTBIN_GOENV) $(GO) build -trimpath \
	  -ldflags '-X $(MULTUS_MODULE)/pkg/multus.version=$(MULTUS_VERSION)' \
	  -o $(TESTBIN_MULTUS_DIR).tmp/ $(MULTUS_PKGS)
	@mkdir -p $(TESTBIN_MULTUS_DIR) && mv -f $(TESTBIN_MULTUS_DIR).tmp/* $(TESTBIN_MULTUS_DIR)/ && rmdir $(TESTBIN_MULTUS_DIR).tmp

# The Helm client as its release is built (static, the version stamped, and the
# Kubernetes version that `helm template` and `helm lint` assume by default taken from
# the client-go its go.mod requires, as Helm's own Makefile does).
HELM_K8S_MINOR := $(word 2,$(subst ., ,$(call gomod_version,$(TESTBIN_SRC)/helm/go.mod,k8s.io/client-go)))
HELM_LDFLAGS := -s -w -X $(HELM_MODULE)/internal/version.version=$(HELM_VERSION) \
	-X $(HELM_MODULE)/internal/version.gitTreeState=clean \
	-X $(HELM_MODULE)/pkg/lint/rules.k8sVersionMajor=1 \
	-X $(HELM_MODULE)/pkg/lint/rules.k8sVersionMinor=$(HELM_K8S_MINOR) \
	-X $(HELM_MODULE)/pkg/chartutil.k8sVersionMajor=1 \
	-X $(HELM_MODULE)/pkg/chartutil.k8sVersionMinor=$(HELM_K8S_MINOR)
testbin-helm: $(TESTBIN_HELM)
$(TESTBIN_HELM):
	@mkdir -p $(@D)
	@echo "building Helm $(HELM_VERSION) (takes ~2 min on 2 cores the first time, cached afterwards in $(@D))"
	@$(call testbin_download,$(TESTBIN_SRC)/helm)
	cd $(TESTBIN_SRC)/helm && CGO_ENABLED=0 $(TESTBIN_GOENV) $(GO) build -trimpath \
	  -ldflags '$(HELM_LDFLAGS)' -o $@.tmp $(HELM_MODULE)/cmd/helm
	@mv -f $@.tmp $@

# Drops the binaries of the pinned versions only (Go's build cache stays, so a
# rebuild is mostly linking).
testbin-clean:
	rm -rf $(TESTBIN_K8S_DIR) $(TESTBIN_K8S_DIR).tmp $(TESTBIN_K8S_OLDEST_DIR) \
	  $(TESTBIN_K8S_OLDEST_DIR).tmp $(TESTBIN_CNI_DIR) $(TESTBIN_CNI_DIR).tmp \
	  $(TESTBIN_CONTAINERD_DIR) $(TESTBIN_CONTAINERD_DIR).tmp \
	  $(TESTBIN_MULTUS_DIR) $(TESTBIN_MULTUS_DIR).tmp $(TESTBIN_HELM_DIR)
