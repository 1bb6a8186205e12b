# kubedevice — build, generate, test.
#
# Tools are installed at pinned versions into ./bin with `go install`; the test control plane
# (etcd, kube-apiserver, kube-scheduler) is built from the Go module proxy into ./bin/k8s by
# hack/build-control-plane.sh, and the oldest supported kube-apiserver into ./bin/k8s-1.36 by the
# same script. Nothing is downloaded from release pages.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := build

ROOT := $(shell pwd)
LOCALBIN ?= $(ROOT)/bin
K8S_BIN_DIR ?= $(LOCALBIN)/k8s
# bin/k8s-<major.minor> of KUBE_COMPAT_VERSION (make's basename drops the patch: 1.36.3 -> 1.36).
K8S_COMPAT_BIN_DIR ?= $(LOCALBIN)/k8s-$(basename $(KUBE_COMPAT_VERSION:v%=%))
export PATH := $(LOCALBIN):$(PATH)
export GOFLAGS ?= -buildvcs=false

## Pinned tool versions.
CONTROLLER_TOOLS_VERSION ?= v0.23.0
GOLANGCI_LINT_VERSION ?= v2.15.0
KUBE_VERSION ?= v1.37.1
# The oldest Kubernetes kubedevice supports (docs/install.md, "Compatibility"): make test-compat runs the install tests and the API,
# controller and admission suites against its kube-apiserver. v1.36.3 is the newest 1.36 patch the
# module proxy serves.
KUBE_COMPAT_VERSION ?= v1.36.3
ETCD_VERSION ?= v3.7.3
HELM_VERSION ?= v4.3.1
# v5.8.3 needs Go 1.27; v5.8.2 is the newest that builds with the project's Go 1.26.
KUSTOMIZE_VERSION ?= v5.8.2
# promtool (make test-rules) and the prometheus server (make e2e-node's real Prometheus) are built
# with go install from the module github.com/prometheus/prometheus, whose v0.316.0 is Prometheus
# 3.16.0 (go 1.26.7 in its go.mod).
PROMETHEUS_VERSION ?= v0.316.0

CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint
HELM ?= $(LOCALBIN)/helm
KUSTOMIZE ?= $(LOCALBIN)/kustomize
PROMTOOL ?= $(LOCALBIN)/promtool
PROMETHEUS ?= $(LOCALBIN)/prometheus

## The version: the chart's appVersion (charts/kubedevice/Chart.yaml), which is the image's tag and
## what config/default deploys, and what every binary says (`kubedevice version`, --version,
## kubedevice_build_info), with the git commit, through the linker flags hack/version.sh prints
## (internal/version). CHANGELOG.md says what each version changed.
VERSION ?= $(shell hack/version.sh --version)
# GIT_COMMIT: empty means the clone's HEAD (with -dirty for a modified tree).
GIT_COMMIT ?=
VERSION_LDFLAGS = $(shell VERSION='$(VERSION)' GIT_COMMIT='$(GIT_COMMIT)' hack/version.sh)

## The image: every binary in /usr/local/bin, as an OCI archive that containerd imports without a
## registry (`make image`). The tag is the version.
IMAGE_REPOSITORY ?= docker.io/local/kubedevice
IMAGE ?= $(IMAGE_REPOSITORY):$(VERSION)
IMAGE_TAR ?= $(LOCALBIN)/kubedevice-image.tar
IMAGE_ARCH ?= $(shell go env GOARCH)
# A static busybox (Debian: busybox-static) gives the image a shell for `kubectl exec`.
BUSYBOX ?= /bin/busybox

# envtest reads the control plane binaries from here; the API, controller, admission and install
# suites fail when the API server reports another version than this (test-compat: KUBE_COMPAT_VERSION).
export KUBEBUILDER_ASSETS := $(K8S_BIN_DIR)
export KUBEDEVICE_TEST_KUBE_VERSION := $(KUBE_VERSION)

GO_TEST_FLAGS ?= -race -count=1
UNIT_PACKAGES = $(shell go list ./... | grep -v /test/)
INTEGRATION_PACKAGES = $(shell go list ./test/... | grep -v '/test/e2e$$')
# What test-compat runs against the oldest supported kube-apiserver: the installs, the CRDs and
# their CEL rules, the controller and the admission policies. Not the agent's suite, the crash
# harness or the upgrade test: they exercise kubedevice's own code far more than the API server.
COMPAT_PACKAGES = ./test/install ./test/integration ./test/integration/controller ./test/integration/admission
# test/install's two slowest tests only render (helm template, and go build of the binaries for
# their flags) and never reach the API server: the version cannot change their result, and
# test-integration runs them. A new test runs in both unless it is named here.
COMPAT_SKIP = ^(TestEveryValueIsExercised|TestArgsAreTheBinariesFlags)$$
BINARIES := $(notdir $(wildcard cmd/*))

##@ General

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  %-22s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: controller-gen ## Generate CRDs and RBAC from the API types and kubebuilder markers.
	$(CONTROLLER_GEN) crd paths="./api/..." output:crd:artifacts:config=config/crd/bases
	rm -f charts/kubedevice/crds/*.yaml && cp config/crd/bases/*.yaml charts/kubedevice/crds/
	$(CONTROLLER_GEN) rbac:roleName=kubedevice-agent paths="./internal/agent/..." output:rbac:artifacts:config=config/rbac/agent
	$(CONTROLLER_GEN) rbac:roleName=kubedevice-controller paths="./internal/controller/..." output:rbac:artifacts:config=config/rbac/controller
	$(CONTROLLER_GEN) rbac:roleName=kubedevice-cleanup paths="./internal/cleanup/..." output:rbac:artifacts:config=config/rbac/cleanup

.PHONY: generate
generate: controller-gen ## Generate deepcopy code.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."

.PHONY: fmt
fmt: ## Run gofmt on the code.
	gofmt -s -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: lint
lint: golangci-lint ## Run golangci-lint (config in .golangci.yml).
	$(GOLANGCI_LINT) run ./...

.PHONY: monitoring
monitoring: ## Write the alerting rules and the Grafana dashboard (hack/monitoring) into the chart (charts/kubedevice/files) and the kustomize components (config/components/prometheus-rule, grafana-dashboard).
	go run ./hack/monitoring

.PHONY: verify
verify: manifests generate monitoring ## Regenerate everything and fail if the tree changed, a file is unformatted or lacks the license header, or a Markdown link is broken.
	@if [ -n "$$(git status --porcelain -- api config charts/kubedevice/crds charts/kubedevice/files)" ]; then \
		echo "Generated files are out of date; run 'make manifests generate monitoring' and commit:"; \
		git status --porcelain -- api config charts/kubedevice/crds charts/kubedevice/files; \
		git diff --stat -- api config charts/kubedevice/crds charts/kubedevice/files; exit 1; fi
	@unformatted=$$(gofmt -s -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then \
		echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	@hack/boilerplate.sh
	@# Every relative link and #anchor of the repository's Markdown must resolve (external links are not checked).
	@go run ./hack/mdlinks .

##@ Test

.PHONY: test
test: envtest-assets vet test-unit test-rules test-integration test-compat test-e2e plugin-test-kubelet-stub ## Run every test: unit, the alerting rules, integration against a real API server (and part of it against the oldest supported one), the demo end to end, then the plugin checker on the kubelet's stub plugin.

.PHONY: test-unit
test-unit: envtest-assets ## Run the unit tests (real gRPC over unix sockets, -race).
	go test $(GO_TEST_FLAGS) $(UNIT_PACKAGES)

# test-rules: promtool checks hack/monitoring/rules.yaml and runs its unit tests,
# hack/monitoring/rules_test.yaml: every alert fires on the series that should fire it, not before
# its `for`, and stays silent on a healthy node.
.PHONY: test-rules
test-rules: promtool ## Check the alerting rules and run their promtool unit tests (hack/monitoring).
	$(PROMTOOL) check rules hack/monitoring/rules.yaml
	$(PROMTOOL) test rules hack/monitoring/rules_test.yaml

.PHONY: test-integration
test-integration: envtest-assets helm kustomize ## Run the envtest suites in test/ against the real kube-apiserver and etcd in bin/k8s (test/install also renders the Helm chart and config/ with bin/helm and bin/kustomize).
	go test $(GO_TEST_FLAGS) -timeout 30m $(INTEGRATION_PACKAGES)

# test-compat: KUBEBUILDER_ASSETS points envtest at bin/k8s-1.36 for kube-apiserver and
# TEST_ASSET_ETCD at bin/k8s's etcd (etcd v3.7 serves a 1.36 kube-apiserver as well). Every spec
# of these suites passes on 1.36; one that comes to need a newer API server must check the server
# for what it needs and skip saying why, and docs/install.md's "Compatibility" must name it.
.PHONY: test-compat
test-compat: envtest-assets envtest-assets-compat helm kustomize ## Run test/install and the API, controller and admission envtest suites against kube-apiserver 1.36 (KUBE_COMPAT_VERSION), the oldest supported.
	KUBEBUILDER_ASSETS=$(K8S_COMPAT_BIN_DIR) TEST_ASSET_ETCD=$(K8S_BIN_DIR)/etcd KUBEDEVICE_TEST_KUBE_VERSION=$(KUBE_COMPAT_VERSION) \
		go test $(GO_TEST_FLAGS) -timeout 20m -skip '$(COMPAT_SKIP)' $(COMPAT_PACKAGES)

.PHONY: test-e2e
test-e2e: envtest-assets ## Build the binaries and run `kubedevice dev --exit-after-demo`, then the demo until Ctrl-C (test/e2e).
	go test $(GO_TEST_FLAGS) -v -timeout 20m ./test/e2e/

# test-crash: the crash-injection harness (test/crash) with CRASH_RUNS runs per crash point and as many
# killed at random times; make test runs it with one run per point. The outcomes per point are written
# to bin/crash-report.txt (and logged). CRASH_SEED repeats a run's randomness.
CRASH_RUNS ?= 100
CRASH_SEED ?=

.PHONY: test-crash
test-crash: envtest-assets ## SIGKILL the agent (a real process, built with -tags crashpoint) at every named point of the allocation and free paths and at random times, CRASH_RUNS (100) times each, restart it and check every run converges (test/crash).
	KUBEDEVICE_CRASH_RUNS=$(CRASH_RUNS) KUBEDEVICE_CRASH_SEED=$(CRASH_SEED) KUBEDEVICE_CRASH_REPORT=$(LOCALBIN)/crash-report.txt \
		go test -count=1 -v -timeout 180m -run '^TestCrashConvergence$$' ./test/crash/

# soak: the agent (a release build, as a process) under random pod churn, health flips and plugin
# restarts for DURATION, its goroutines and memory sampled (CSV in bin/soak.csv; the live heap is read
# after a forced GC through the agent's --pprof-bind-address); heap profiles at an eighth of the run
# and at its end in bin/soak-heap-{early,late}.pb.gz (`go tool pprof -diff_base bin/soak-heap-early.pb.gz
# bin/soak-heap-late.pb.gz`); fails if they grow or the node does not converge at the end. Not part
# of make test.
DURATION ?= 30m

.PHONY: soak
soak: envtest-assets ## Run the agent for DURATION (30m) under pod churn, health flips and plugin restarts, sampling goroutines and memory (test/crash TestSoak).
	KUBEDEVICE_SOAK_DURATION=$(DURATION) KUBEDEVICE_SOAK_REPORT=$(LOCALBIN)/soak.csv KUBEDEVICE_SOAK_PROFILES=$(LOCALBIN) \
		go test -count=1 -v -timeout 24h -run '^TestSoak$$' ./test/crash/

# The kubelet's own device plugin stub (k8s.io/kubernetes pkg/kubelet/cm/devicemanager/plugin/v1beta1)
# is built from test/kubeletstub, a module of its own that requires k8s.io/kubernetes (pinned in its
# go.mod, v1.37.1) and cannot be a dependency of kubedevice's. SIGUSR1 flips a device's health.
# The stub has one real bug, which the checker must catch: its ListAndWatch never watches its stream's
# context, so after a kubelet restart the old stream's goroutine takes the first update off the
# stub's channel and sends it to a dead stream (Stub.ListAndWatch, Stub.Restart). The target passes
# when that, list-and-watch/health-update on the stream after the restart, is the only failure.
PLUGIN_TEST_BIN ?= $(LOCALBIN)/plugin-test
KUBELET_STUB_REPORT = $(PLUGIN_TEST_BIN)/kubelet-stub.txt

.PHONY: plugin-test-kubelet-stub
plugin-test-kubelet-stub: ## Build the kubelet's own stub device plugin (test/kubeletstub) and run `kubedevice plugin test` on it (JUnit in bin/plugin-test/).
	@mkdir -p $(PLUGIN_TEST_BIN)
	cd test/kubeletstub && go build -o $(PLUGIN_TEST_BIN)/kubeletstub .
	go build -ldflags "$(VERSION_LDFLAGS)" -o $(PLUGIN_TEST_BIN)/kubedevice ./cmd/kubedevice
	$(PLUGIN_TEST_BIN)/kubedevice plugin test --junit $(PLUGIN_TEST_BIN)/kubelet-stub.xml \
		--health-change-cmd 'kill -USR1 "$$KUBEDEVICE_PLUGIN_PID"' -- $(PLUGIN_TEST_BIN)/kubeletstub --plugin-dir={plugin-dir} \
		> $(KUBELET_STUB_REPORT) || true
	@cat $(KUBELET_STUB_REPORT)
	@[ "$$(grep -c '^FAIL ' $(KUBELET_STUB_REPORT))" = 1 ] && grep -q '^FAIL  list-and-watch/health-update' $(KUBELET_STUB_REPORT) && \
		grep -q 'the stream after the kubelet restart: no list with a changed health' $(KUBELET_STUB_REPORT) && \
		grep -q 'the first stream: a health change' $(KUBELET_STUB_REPORT) || \
		{ echo "the kubelet's stub must fail list-and-watch/health-update after the restart (its known bug) and pass everything else"; exit 1; }
	@echo "The kubelet's stub passes every check but its known stale-stream bug, which the checker caught."

# fuzz: how long each fuzz target explores; their seeds (and testdata/fuzz) run in make test.
FUZZTIME ?= 60s

.PHONY: fuzz
fuzz: ## Run every native Go fuzz target for FUZZTIME each (default 60s); a failing input is written to the package's testdata/fuzz and then runs as a seed in make test.
	@set -e; for pkg in $$(go list ./...); do \
		for target in $$(go test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
			echo "== $$pkg $$target ($(FUZZTIME))"; \
			go test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) $$pkg; \
		done; \
	done

.PHONY: bench
bench: envtest-assets ## Run the benchmarks (allocation latency, checkpoint writes, hint generation, ...); the controller at scale is `make bench-scale`.
	go test -run '^$$' -bench . -benchmem $(UNIT_PACKAGES)

# bench-kubelet: workloads (devices x devices per pod), allocations per run and runs per workload.
BENCH_KUBELET_FLAGS ?= --cases=128x1,1024x8,10000x1 --cycles=300 --runs=3

.PHONY: bench-kubelet
bench-kubelet: ## The kubelet's device manager (k8s.io/kubernetes $(KUBE_VERSION), its own Go module in test/benchkubelet) and kubedevice's core on the same workload, interleaved; prints one table. Runs in a mount namespace of its own (unshare), as the kubelet's manager only listens in /var/lib/kubelet/device-plugins.
	@scratch=$$(mktemp -d /var/tmp/kubedevice-bench-kubelet-XXXXXX); rc=0; \
	{ (cd test/benchkubelet && go build -o "$$scratch/benchkubelet" .) && \
	unshare --mount --map-root-user --propagation private \
		sh -c 'mount --bind "$$0" /var/lib && exec "$$0/benchkubelet" --scratch="$$0" "$$@"' "$$scratch" $(BENCH_KUBELET_FLAGS); } || rc=$$?; \
	rm -rf "$$scratch"; exit $$rc

# The cluster bench-scale builds; see test/scale and docs/performance.md ("Scale").
SCALE_NODES ?= 1000
SCALE_SHARDS ?= 2

.PHONY: bench-scale
bench-scale: envtest-assets ## Benchmark the controller (cold start, failover, steady state, churn; SCALE_NODES=1000, SCALE_SHARDS=2), the agent (10 k devices: register, restart; 100 k rejected) and the built agent and controller binaries outside in (BenchmarkBinaries) against the real API server (minutes; not part of `make test`; `-bench Agent` alone: see docs/performance.md).
	KUBEDEVICE_SCALE_NODES=$(SCALE_NODES) KUBEDEVICE_SCALE_SHARDS=$(SCALE_SHARDS) \
		go test -run '^$$' -bench . -benchtime=1x -timeout 90m ./test/scale/

.PHONY: envtest-assets
envtest-assets: ## Build etcd, kube-apiserver and kube-scheduler from source into bin/k8s (skipped when present).
	KUBE_VERSION=$(KUBE_VERSION) ETCD_VERSION=$(ETCD_VERSION) K8S_BIN_DIR=$(K8S_BIN_DIR) hack/build-control-plane.sh

.PHONY: envtest-assets-compat
envtest-assets-compat: ## Build kube-apiserver 1.36 (KUBE_COMPAT_VERSION) from source into bin/k8s-1.36 (skipped when present).
	KUBE_VERSION=$(KUBE_COMPAT_VERSION) K8S_BIN_DIR=$(K8S_COMPAT_BIN_DIR) hack/build-control-plane.sh kube-apiserver

##@ Real node (root; builds and starts a kubelet and containerd on this machine: never part of `make test`)

E2E_NODE_KUBECONFIG ?= $(LOCALBIN)/e2e-node/kubeconfig

.PHONY: e2e-node
e2e-node: ## Install, start a real single-node cluster (kubelet, containerd 2.4 with NRI), run test/e2e-node, tear it down.
	hack/e2e-node/e2e.sh

.PHONY: e2e-node-up
e2e-node-up: ## Install and start the real-node cluster, and leave it up (KUBECONFIG=bin/e2e-node/kubeconfig).
	hack/e2e-node/install.sh
	hack/e2e-node/up.sh

.PHONY: e2e-node-test
e2e-node-test: helm prometheus ## Run the real-node e2e suite against the cluster that e2e-node-up started (it builds the binaries and imports the image itself).
	KUBECONFIG=$(E2E_NODE_KUBECONFIG) E2E_KUBECTL=$(K8S_BIN_DIR)/kubectl E2E_HELM=$(HELM) E2E_PROMETHEUS=$(PROMETHEUS) go test -v -tags e2enode -count=1 -timeout 50m ./test/e2e-node/ -ginkgo.v $(E2E_NODE_TEST_FLAGS)

.PHONY: e2e-node-down
e2e-node-down: ## Stop the real-node cluster and restore the host (safe to run twice).
	hack/e2e-node/down.sh

##@ Build

.PHONY: build
build: ## Build the binaries into bin/, with the version and commit (bin/kubedevice version), and bin/kubectl-kubedevice, the kubectl plugin (a link to kubedevice).
	@mkdir -p $(LOCALBIN)
	@ldflags="$(VERSION_LDFLAGS)"; for b in $(BINARIES); do echo "go build -o bin/$$b ./cmd/$$b"; \
		CGO_ENABLED=0 go build -trimpath -ldflags "$$ldflags" -o $(LOCALBIN)/$$b ./cmd/$$b; done
	@# kubectl runs kubectl-kubedevice from the PATH as `kubectl kubedevice`.
	ln -sf kubedevice $(LOCALBIN)/kubectl-kubedevice

# The platforms `make krew` builds the kubectl plugin for.
KREW_PLATFORMS ?= linux/amd64 linux/arm64

.PHONY: krew
krew: ## Build the kubectl plugin's archives (KREW_PLATFORMS) into bin/krew/ and its krew manifest bin/krew/kubedevice.yaml (plugins/kubedevice.yaml with their sha256s).
	@rm -rf $(LOCALBIN)/krew && mkdir -p $(LOCALBIN)/krew
	@ldflags="$(VERSION_LDFLAGS)"; for p in $(KREW_PLATFORMS); do os=$${p%/*}; arch=$${p#*/}; d=$(LOCALBIN)/krew/$$os-$$arch; \
		echo "go build -o $$d/kubectl-kubedevice ./cmd/kubedevice ($$p)"; \
		GOOS=$$os GOARCH=$$arch CGO_ENABLED=0 go build -trimpath -ldflags "$$ldflags" -o $$d/kubectl-kubedevice ./cmd/kubedevice && \
		tar -C $$d --owner=0 --group=0 --numeric-owner -czf $(LOCALBIN)/krew/kubectl-kubedevice_$${os}_$${arch}.tar.gz kubectl-kubedevice || exit 1; done
	go run ./hack/krew --template plugins/kubedevice.yaml --version $(VERSION) --archives $(LOCALBIN)/krew > $(LOCALBIN)/krew/kubedevice.yaml.tmp
	mv $(LOCALBIN)/krew/kubedevice.yaml.tmp $(LOCALBIN)/krew/kubedevice.yaml

.PHONY: version
version: ## Print the version the build gives the binaries, the image and the chart (the chart's appVersion).
	@echo $(VERSION)

# A device plugin author's plugin: its command line, with {plugin-dir} where the plugin directory goes
# (see docs/plugin-authors.md); HEALTH_CHANGE is a shell command that flips a device's
# health, for `make plugin-test`.
PLUGIN ?=
PLUGIN_DRA ?=
HEALTH_CHANGE ?=
# PLUGIN_TEST_FLAGS are more flags for `kubedevice plugin test`, e.g. --mount-namespace (a plugin
# that hard-codes /var/lib/kubelet/device-plugins; root) or --strict.
PLUGIN_TEST_FLAGS ?=

.PHONY: demo
demo: envtest-assets build ## Run the demo: a local cluster with the agent, controller and Gopher plugin (bin/kubedevice dev; Ctrl-C stops it); PLUGIN='cmd --plugin-dir={plugin-dir}' adds your plugin, PLUGIN_DRA=<resource> serves that resource of it through DRA.
	$(LOCALBIN)/kubedevice dev $(if $(PLUGIN),--plugin '$(PLUGIN)') $(if $(PLUGIN_DRA),--plugin-dra '$(PLUGIN_DRA)')

.PHONY: plugin-test
plugin-test: ## Check the device plugin PLUGIN='cmd --plugin-dir={plugin-dir}' (or {plugins-registry-dir} for one that registers through the plugin watcher; HEALTH_CHANGE='shell command', run per resource with KUBEDEVICE_RESOURCE_NAME set, and PLUGIN_TEST_FLAGS='--mount-namespace' optional): a conformance report, JUnit in bin/plugin-test/report.xml.
	@[ -n "$(PLUGIN)" ] || { echo "make plugin-test needs PLUGIN='<your plugin's command line, with {plugin-dir}>'"; exit 1; }
	@mkdir -p $(PLUGIN_TEST_BIN)
	go build -ldflags "$(VERSION_LDFLAGS)" -o $(PLUGIN_TEST_BIN)/kubedevice ./cmd/kubedevice
	$(PLUGIN_TEST_BIN)/kubedevice plugin test --junit $(PLUGIN_TEST_BIN)/report.xml $(if $(HEALTH_CHANGE),--health-change-cmd '$(HEALTH_CHANGE)') $(PLUGIN_TEST_FLAGS) -- $(PLUGIN)

IMAGE_BIN_DIR := $(LOCALBIN)/image

.PHONY: image
image: ## Write the image as an OCI archive, bin/kubedevice-image.tar, without Docker (import: ctr -n k8s.io images import --all-platforms).
	@[ -x "$(BUSYBOX)" ] || { echo "make image needs a static busybox at $(BUSYBOX) (Debian: apt-get install busybox-static), or BUSYBOX=<path>"; exit 1; }
	@mkdir -p $(IMAGE_BIN_DIR)
	@ldflags="-s -w $(VERSION_LDFLAGS)"; for b in $(BINARIES); do echo "go build -o $(IMAGE_BIN_DIR)/$$b ./cmd/$$b"; \
		CGO_ENABLED=0 GOARCH=$(IMAGE_ARCH) go build -trimpath -ldflags "$$ldflags" -o $(IMAGE_BIN_DIR)/$$b ./cmd/$$b; done
	CGO_ENABLED=0 GOARCH=$(IMAGE_ARCH) go build -trimpath -ldflags "-s -w" -o $(IMAGE_BIN_DIR)/pause ./hack/e2e-node/pause
	CGO_ENABLED=0 go build -trimpath -o $(LOCALBIN)/mkimage ./hack/e2e-node/mkimage
	$(LOCALBIN)/mkimage -o $(IMAGE_TAR) -name $(IMAGE) -arch $(IMAGE_ARCH) -busybox $(BUSYBOX) -pause $(IMAGE_BIN_DIR)/pause \
		$(addprefix -bin $(IMAGE_BIN_DIR)/,$(BINARIES))

##@ Tools

.PHONY: controller-gen
controller-gen: $(CONTROLLER_GEN)
$(CONTROLLER_GEN): Makefile
	$(call go-install-tool,$(CONTROLLER_GEN),sigs.k8s.io/controller-tools/cmd/controller-gen,$(CONTROLLER_TOOLS_VERSION))

.PHONY: golangci-lint
golangci-lint: $(GOLANGCI_LINT)
$(GOLANGCI_LINT): Makefile
	$(call go-install-tool,$(GOLANGCI_LINT),github.com/golangci/golangci-lint/v2/cmd/golangci-lint,$(GOLANGCI_LINT_VERSION))

# helm and kustomize render the installs in test/install (and are what users run to install).
.PHONY: helm
helm: $(HELM)
$(HELM): Makefile
	$(call go-install-tool,$(HELM),helm.sh/helm/v4/cmd/helm,$(HELM_VERSION))

.PHONY: kustomize
kustomize: $(KUSTOMIZE)
$(KUSTOMIZE): Makefile
	$(call go-install-tool,$(KUSTOMIZE),sigs.k8s.io/kustomize/kustomize/v5,$(KUSTOMIZE_VERSION))

# promtool tests the alerting rules (make test-rules); the prometheus server scrapes the real node
# in make e2e-node (test/e2e-node, label prometheus).
.PHONY: promtool
promtool: $(PROMTOOL)
$(PROMTOOL): Makefile
	$(call go-install-tool,$(PROMTOOL),github.com/prometheus/prometheus/cmd/promtool,$(PROMETHEUS_VERSION))

.PHONY: prometheus
prometheus: $(PROMETHEUS)
$(PROMETHEUS): Makefile
	$(call go-install-tool,$(PROMETHEUS),github.com/prometheus/prometheus/cmd/prometheus,$(PROMETHEUS_VERSION))

# go-install-tool installs $2@$3 as $1, keeping a versioned copy so a version bump reinstalls.
# go install names the binary after the package path's last element, or the one before it when
# that is a major version suffix (sigs.k8s.io/kustomize/kustomize/v5 -> kustomize).
define go-install-tool
@[ -f "$(1)-$(3)" ] || { \
	set -e; \
	echo "Installing $(2)@$(3) into $(LOCALBIN)"; \
	rm -f "$(1)"; \
	GOBIN="$(LOCALBIN)" GOTOOLCHAIN=local go install "$(2)@$(3)"; \
	bin=$$(basename "$(2)"); \
	case "$$bin" in v[0-9]*) bin=$$(basename "$$(dirname "$(2)")");; esac; \
	mv "$(LOCALBIN)/$$bin" "$(1)-$(3)"; \
}; \
ln -sf "$$(basename "$(1)-$(3)")" "$(1)"
endef
