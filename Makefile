# VERSION is the operator's version: the bundle's CSV (pgpilot-operator.v$(VERSION)), the image
# tags, the catalog entry `make catalog` renders and, compiled in, status.operatorVersion. It lives
# in internal/version/VERSION. Bump it, BUNDLE_CREATED_AT and the catalog's channels
# (catalog/pgpilot-operator/channels.yaml) together, then run `make bundle catalog`.
VERSION ?= $(shell cat internal/version/VERSION)

# BUNDLE_CREATED_AT is the CSV's createdAt annotation, the release date of VERSION. operator-sdk
# stamps the current time; pinning it keeps `make bundle` reproducible (CI fails on a diff).
BUNDLE_CREATED_AT ?= 2026-12-03T06:00:00Z

# CHANNELS and DEFAULT_CHANNEL go into the bundle's metadata (bundle/metadata/annotations.yaml).
# The catalog's channels (catalog/) are what OLM follows; keep the two consistent.
CHANNELS ?= candidate,stable
DEFAULT_CHANNEL ?= stable
BUNDLE_METADATA_OPTS ?= --channels=$(CHANNELS) --default-channel=$(DEFAULT_CHANNEL)

# IMAGE_TAG_BASE is the registry and name of the operator image; the bundle, catalog and
# scorecard images add a suffix to it. Override it to push to your own registry, e.g.
# make bundle-build bundle-push IMAGE_TAG_BASE=registry.example.com/pgpilot/pgpilot-operator
IMAGE_TAG_BASE ?= ghcr.io/pgpilot/pgpilot-operator

# IMG is the operator (manager) image. `make bundle` writes it into the CSV's deployment,
# containerImage and relatedImages (config/manifests/image); the committed bundle uses the default.
IMG ?= $(IMAGE_TAG_BASE):v$(VERSION)

# BUNDLE_IMG is the bundle image (bundle.Dockerfile), for `operator-sdk run bundle`.
BUNDLE_IMG ?= $(IMAGE_TAG_BASE)-bundle:v$(VERSION)

# SCORECARD_IMG holds pgpilot's own scorecard tests (test/scorecard), run by `make scorecard`.
SCORECARD_IMG ?= $(IMAGE_TAG_BASE)-scorecard:v$(VERSION)

# BUNDLE_GEN_FLAGS are the flags passed to the operator-sdk generate bundle command
BUNDLE_GEN_FLAGS ?= -q --overwrite --version $(VERSION) $(BUNDLE_METADATA_OPTS)

# USE_IMAGE_DIGESTS defines if images are resolved via tags or digests
# You can enable this value if you would like to use SHA Based Digests
# To enable set flag to true
USE_IMAGE_DIGESTS ?= false
ifeq ($(USE_IMAGE_DIGESTS), true)
	BUNDLE_GEN_FLAGS += --use-image-digests
endif

# Set the Operator SDK version to use. By default, what is installed on the system is used.
# This is useful for CI or a project to utilize a specific version of the operator-sdk toolkit.
OPERATOR_SDK_VERSION ?= v1.42.2

# Get the currently used golang install path (in GOPATH/bin, unless GOBIN is set)
ifeq (,$(shell go env GOBIN))
GOBIN=$(shell go env GOPATH)/bin
else
GOBIN=$(shell go env GOBIN)
endif

# Every Go build here is static, as the images are: with CGO off for go vet, go test and the
# local cluster's operator image alike, a cold build cache compiles the dependencies once.
export CGO_ENABLED ?= 0

# CONTAINER_TOOL defines the container tool to be used for building images.
# Be aware that the target commands are only tested with Docker which is
# scaffolded by default. However, you might want to replace it to use other
# tools. (i.e. podman)
CONTAINER_TOOL ?= docker

# Setting SHELL to bash allows bash commands to be executed by recipes.
# Options are set to exit when a recipe line exits non-zero or a piped command fails.
SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

.PHONY: all
all: build

##@ General

# The help target prints out all targets with their descriptions organized
# beneath their categories. The categories are represented by '##@' and the
# target descriptions by '##'. The awk command is responsible for reading the
# entire set of makefiles included in this invocation, looking for lines of the
# file as xyz: ## something, and then pretty-format the target and help. Then,
# if there's a line with ##@ something, that gets pretty-printed as a category.
# More info on the usage of ANSI control characters for terminal formatting:
# https://en.wikipedia.org/wiki/ANSI_escape_code#SGR_parameters
# More info on the awk command:
# http://linuxcommand.org/lc3_adv_awk.php

.PHONY: help
help: ## Display this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-15s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

.PHONY: print-%
print-%: ## Print a variable as the Makefile computes it (tests read IMAGE_TAG_BASE and others this way).
	@:$(info $($*))

##@ Development

# The Prometheus operator's CRDs that pgpilot manages or ships objects of (test/crds).
PROMETHEUS_OPERATOR_CRDS = test/crds/prometheus-operator

.PHONY: manifests
manifests: controller-gen ## Generate WebhookConfiguration, ClusterRole and CustomResourceDefinition objects, and the Grafana dashboard.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd webhook paths="./..." output:crd:artifacts:config=config/crd/bases
	go run ./hack/olmrbac config/rbac/role.yaml config/manifests/rbac
	mkdir -p config/grafana && go run ./hack/grafana > config/grafana/pgpilot.json.tmp && mv config/grafana/pgpilot.json.tmp config/grafana/pgpilot.json
	@# The envtest suites' Prometheus operator CRDs: no module served here holds its CRD manifests,
	@# so they are made from its API types, at go.mod's version, by the same controller-gen.
	rm -rf $(PROMETHEUS_OPERATOR_CRDS)/.all
	$(CONTROLLER_GEN) crd paths=github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1 output:crd:dir=$(PROMETHEUS_OPERATOR_CRDS)/.all
	for kind in podmonitors servicemonitors prometheusrules; do \
	  mv $(PROMETHEUS_OPERATOR_CRDS)/.all/monitoring.coreos.com_$$kind.yaml $(PROMETHEUS_OPERATOR_CRDS)/; done
	rm -rf $(PROMETHEUS_OPERATOR_CRDS)/.all

.PHONY: generate
generate: controller-gen ## Generate code containing DeepCopy, DeepCopyInto, and DeepCopyObject method implementations.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./..."

.PHONY: fmt
fmt: ## Run go fmt against code.
	go fmt ./...

.PHONY: vet
vet: ## Run go vet against code.
	go vet ./...

.PHONY: test
test: host-packages manifests generate fmt vet lint lint-shell envtest versitygw operator-sdk opm kustomize ## Run every test: golangci-lint, shellcheck, the e2e specs on the local cluster, with the real-server suites (test-real-servers) and a few seconds of every fuzz target, the unit and envtest suites, packaging checks and benchmark budgets (test-unit) beside its OLM phase.
	@# The recipes of test-e2e, test-unit and test-real-servers, without their prerequisites
	@# again: this target has made them, and CI's CPU is the limit. The real-server suites come
	@# after the unit suites, the images' in a cgroup with a small CPU share (test/e2e/run.sh):
	@# the agent's suites and the unit suites at once beside the OLM phase starved its clusters
	@# (a lone primary fenced itself, its Lease not renewed for 8 s: stop 51's CI).
	E2E_BESIDE_OLM='$(MAKE) --no-print-directory fuzz-short && $(UNIT_TESTS_BUT_REAL_SERVERS) && \
	  $(REAL_SERVER_TESTS)' test/e2e/run.sh

# UNIT_TESTS are the unit and envtest suites, packaging checks and benchmark budgets. They run
# beside the OLM phase on 2 cores, where the agent's real-server suite takes about 3x its time
# alone (385 s in one run): go test's default 10-minute limit per package is too close.
GO_TEST_FLAGS ?= -timeout 25m
UNIT_TESTS = KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" PGPILOT_VERSITYGW="$(VERSITYGW)" go test $(GO_TEST_FLAGS) ./... -coverprofile cover.out
# make test runs the agent's suite with the other real-server suites instead. (No single quotes:
# make test quotes this in them.)
UNIT_TESTS_BUT_REAL_SERVERS = KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" PGPILOT_VERSITYGW="$(VERSITYGW)" \
	go test $(GO_TEST_FLAGS) $$(go list ./... | grep -v "/internal/instance/agent$$") -coverprofile cover.out

# REAL_SERVER_TESTS run the suites that start real PostgreSQL servers on every major pgpilot
# ships (hack/test-real-servers.sh): the agent's on the host's PostgreSQL 15, and,
# inside the root filesystem of pgpilot's image of each other major (hack/test-in-image.sh; the
# local cluster builds the same roots for its images), the server, exporter and pgBackRest
# suites, with the agent's on the newest too.
REAL_SERVER_TESTS = GO_TEST_FLAGS="$(GO_TEST_FLAGS)" PGPILOT_VERSITYGW="$(VERSITYGW)" hack/test-real-servers.sh

.PHONY: test-real-servers
test-real-servers: host-packages versitygw ## Run the real-server suites on PostgreSQL 15 (host) and 17 and 18 inside pgpilot's images of them (root: chroot): the agent's suites and the images' side by side, each image's packages one after another.
	$(REAL_SERVER_TESTS)

.PHONY: test-unit
test-unit: host-packages manifests envtest versitygw operator-sdk opm ## Run the unit and envtest suites, packaging checks and the benchmark budgets (no local cluster).
	$(UNIT_TESTS)

# Size of the database BenchmarkBackupAndRestore backs up and restores (MiB).
BACKUP_BENCH_MIB ?= 1024

.PHONY: bench
bench: manifests envtest host-packages versitygw ## Measure API load, CPU and cache memory (fail when test/bench/budgets.yaml is exceeded), then backup, restore and archiving throughput, the cost of a metrics scrape, and of a pass over 200 managed roles and 50 databases.
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" go run ./test/bench $(BENCH_FLAGS)
	PGPILOT_VERSITYGW="$(VERSITYGW)" go test -run '^$$' -bench BackupAndRestore -benchtime 1x -timeout 40m \
		./internal/instance/pgbackrest/ -args -backup-bench-mib=$(BACKUP_BENCH_MIB)
	go test -run '^$$' -bench Scrape -benchtime 500x -benchmem ./internal/instance/exporter/
	go test -run '^$$' -bench CatalogPass -benchtime 20x ./internal/instance/postgres/

.PHONY: figures
figures: ## Render the HA figures of README.md and docs/benchmarks.md from the recorded e2e run, docs/results/e2e.json (each e2e run writes its own to bin/e2e-results.json), and the major upgrade figures from docs/results/major-upgrade.json.
	go run ./hack/figures render docs/results/e2e.json README.md docs/benchmarks.md
	go run ./hack/figures render -block upgrade docs/results/major-upgrade.json docs/benchmarks.md

# BENCH_UPGRADE_MIB are the database sizes bench-major-upgrade upgrades, side by side.
BENCH_UPGRADE_MIB ?= 1024 10240

.PHONY: bench-major-upgrade
bench-major-upgrade: manifests kustomize ## Upgrade 3-instance synchronous PostgreSQL 15 clusters of each size in BENCH_UPGRADE_MIB to 17 on the local cluster under the write checker (outage, HA back, archiving back, bytes per replica); record with `cp bin/e2e-results.json docs/results/major-upgrade.json && make figures`.
	E2E_PHASES=deploy E2E_PROCS=1 E2E_DEPLOY_LABELS=upgrade-bench E2E_UPGRADE_BENCH_MIB="$(BENCH_UPGRADE_MIB)" \
		E2E_GINKGO_FLAGS=--timeout=3h test/e2e/run.sh

.PHONY: demo-envtest
demo-envtest: manifests envtest ## The operator against a bare control plane (no kubelet, no root): children and conditions only.
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" go run ./hack/demo $(DEMO_FLAGS)

.PHONY: lint
lint: golangci-lint ## Run golangci-lint with .golangci.yml over every package, the e2e suite's too.
	$(GOLANGCI_LINT) run --build-tags e2e

.PHONY: lint-fix
lint-fix: golangci-lint ## Run golangci-lint linter and perform fixes
	$(GOLANGCI_LINT) run --build-tags e2e --fix

# lint-shell runs shellcheck over the shell scripts of SHELLCHECK_DIRS: every *.sh and every file
# whose first line is a sh or bash shebang (.ci/run, hack/localcluster/localcluster...). -x with
# the script's own folder as source path follows the libraries they source (# shellcheck
# source=... directives). shellcheck is Debian's package, which .ci/run installs when missing.
SHELLCHECK ?= shellcheck
SHELLCHECK_DIRS ?= hack .ci
.PHONY: lint-shell
lint-shell: ## Run shellcheck on the shell scripts of hack/ and .ci/.
	@command -v $(SHELLCHECK) >/dev/null 2>&1 || { echo "lint-shell: $(SHELLCHECK) not found; install it with: apt-get install -y --no-install-recommends shellcheck" >&2; exit 1; }
	@mapfile -t scripts < <({ find $(SHELLCHECK_DIRS) -type f -name '*.sh'; \
		find $(SHELLCHECK_DIRS) -type f ! -name '*.sh' -exec awk 'FNR == 1 && /^#!.*[\/ ](ba|da|k)?sh([ \t]|$$)/ {print FILENAME} {nextfile}' {} +; } | LC_ALL=C sort); \
	(($${#scripts[@]} > 0)) || { echo "lint-shell: no shell scripts found in $(SHELLCHECK_DIRS)" >&2; exit 1; }; \
	echo "lint-shell: shellcheck $$($(SHELLCHECK) --version | sed -n 's/^version: //p') on $${#scripts[@]} scripts in $(SHELLCHECK_DIRS)"; \
	$(SHELLCHECK) -x --source-path=SCRIPTDIR "$${scripts[@]}"

# fuzz runs every Go fuzz target (func FuzzX in a _test.go file under FUZZ_DIRS) for FUZZTIME,
# one after the other: `go test -fuzz` takes one package and one target per run. Crashers land in
# the package's testdata/fuzz/FuzzX/, where plain `go test` replays them from then on.
FUZZTIME ?= 1m
# A count, not a duration: Go 1.26's fuzz coordinator can report "context deadline exceeded" as
# a failure when a duration ends while a worker is mid-input (golang/go#75804, fixed in Go 1.27),
# which a loaded CI machine hit (CI run 11). 1500 inputs took 5 s each there.
FUZZTIME_SHORT ?= 1500x
FUZZ_DIRS ?= api internal
.PHONY: fuzz
fuzz: ## Run every Go fuzz target for FUZZTIME each, e.g. make fuzz FUZZTIME=5m.
	@hits=$$(grep -rE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*\(' $(FUZZ_DIRS) | LC_ALL=C sort); \
	[[ -n "$$hits" ]] || { echo "fuzz: no fuzz targets found in $(FUZZ_DIRS)" >&2; exit 1; }; \
	while IFS= read -r hit; do \
		pkg=./$$(dirname "$${hit%%:*}"); target=$$(sed -E 's/^[^:]*:func (Fuzz[A-Za-z0-9_]*).*/\1/' <<<"$$hit"); \
		echo "fuzz: $$target in $$pkg for $(FUZZTIME)"; \
		go test "$$pkg" -run='^$$' -fuzz="^$$target\$$" -fuzztime=$(FUZZTIME); \
	done <<<"$$hits"

.PHONY: fuzz-short
fuzz-short: ## Run every Go fuzz target for a few seconds' worth of inputs (FUZZTIME_SHORT), as make test does.
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZTIME_SHORT)

.PHONY: lint-config
lint-config: golangci-lint ## Verify golangci-lint linter configuration
	$(GOLANGCI_LINT) config verify

##@ Build

.PHONY: build
build: manifests generate fmt vet kubectl-pgpilot ## Build manager binary and the kubectl plugin.
	go build -o bin/manager cmd/main.go

.PHONY: kubectl-pgpilot
kubectl-pgpilot: ## Build the kubectl plugin (bin/kubectl-pgpilot: put it on PATH, then `kubectl pgpilot status NAME`).
	go build -o bin/kubectl-pgpilot ./cmd/kubectl-pgpilot

.PHONY: run
run: manifests generate fmt vet ## Run a controller from your host.
	go run ./cmd/main.go

# If you wish to build the manager image targeting other platforms you can use the --platform flag.
# (i.e. docker build --platform linux/arm64). However, you must enable docker buildKit for it.
# More info: https://docs.docker.com/develop/develop-images/build_enhancements/
.PHONY: docker-build
docker-build: ## Build docker image with the manager.
	$(CONTAINER_TOOL) build -t ${IMG} .

# POSTGRES_IMAGE_BASE is where pgpilot's PostgreSQL images are published (tag: the major).
POSTGRES_IMAGE_BASE ?= ghcr.io/pgpilot/postgresql

.PHONY: postgres-images
postgres-images: ## Build pgpilot's PostgreSQL image of every major images/postgresql/majors lists.
	awk '$$1 ~ /^[0-9]+$$/ { print $$1, $$2 }' images/postgresql/majors | while read -r major suite; do \
		$(CONTAINER_TOOL) build --build-arg PG_MAJOR=$$major --build-arg DEBIAN_SUITE=$$suite \
			-t $(POSTGRES_IMAGE_BASE):$$major images/postgresql || exit 1; done

.PHONY: docker-push
docker-push: ## Push docker image with the manager.
	$(CONTAINER_TOOL) push ${IMG}

# PLATFORMS defines the target platforms for the manager image be built to provide support to multiple
# architectures. (i.e. make docker-buildx IMG=myregistry/mypoperator:0.0.1). To use this option you need to:
# - be able to use docker buildx. More info: https://docs.docker.com/build/buildx/
# - have enabled BuildKit. More info: https://docs.docker.com/develop/develop-images/build_enhancements/
# - be able to push the image to your registry (i.e. if you do not set a valid value via IMG=<myregistry/image:<tag>> then the export will fail)
# To adequately provide solutions that are compatible with multiple platforms, you should consider using this option.
PLATFORMS ?= linux/arm64,linux/amd64,linux/s390x,linux/ppc64le
.PHONY: docker-buildx
docker-buildx: ## Build and push docker image for the manager for cross-platform support
	# copy existing Dockerfile and insert --platform=${BUILDPLATFORM} into Dockerfile.cross, and preserve the original Dockerfile
	sed -e '1 s/\(^FROM\)/FROM --platform=\$$\{BUILDPLATFORM\}/; t' -e ' 1,// s//FROM --platform=\$$\{BUILDPLATFORM\}/' Dockerfile > Dockerfile.cross
	- $(CONTAINER_TOOL) buildx create --name pgpilot-operator-builder
	$(CONTAINER_TOOL) buildx use pgpilot-operator-builder
	- $(CONTAINER_TOOL) buildx build --push --platform=$(PLATFORMS) --tag ${IMG} -f Dockerfile.cross .
	- $(CONTAINER_TOOL) buildx rm pgpilot-operator-builder
	rm Dockerfile.cross

.PHONY: build-installer
build-installer: manifests generate kustomize ## Generate a consolidated YAML with CRDs and deployment.
	mkdir -p dist
	cd config/manager && $(KUSTOMIZE) edit set image controller=${IMG}
	$(KUSTOMIZE) build config/default > dist/install.yaml

##@ Deployment

ifndef ignore-not-found
  ignore-not-found = false
endif

.PHONY: install
install: manifests kustomize ## Install CRDs into the K8s cluster specified in ~/.kube/config.
	$(KUSTOMIZE) build config/crd | $(KUBECTL) apply -f -

.PHONY: uninstall
uninstall: manifests kustomize ## Uninstall CRDs from the K8s cluster specified in ~/.kube/config. Call with ignore-not-found=true to ignore resource not found errors during deletion.
	$(KUSTOMIZE) build config/crd | $(KUBECTL) delete --ignore-not-found=$(ignore-not-found) -f -

.PHONY: deploy
deploy: manifests kustomize ## Deploy controller to the K8s cluster specified in ~/.kube/config.
	cd config/manager && $(KUSTOMIZE) edit set image controller=${IMG}
	$(KUSTOMIZE) build config/default | $(KUBECTL) apply -f -

.PHONY: undeploy
undeploy: kustomize ## Undeploy controller from the K8s cluster specified in ~/.kube/config. Call with ignore-not-found=true to ignore resource not found errors during deletion.
	$(KUSTOMIZE) build config/default | $(KUBECTL) delete --ignore-not-found=$(ignore-not-found) -f -

##@ Dependencies

## Location to install dependencies to
LOCALBIN ?= $(shell pwd)/bin
$(LOCALBIN):
	mkdir -p $(LOCALBIN)

## Tool Binaries
KUBECTL ?= $(shell hack/toolchain.sh kubernetes)/kubectl
KUSTOMIZE ?= $(LOCALBIN)/kustomize
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen

## Tool Versions
KUSTOMIZE_VERSION ?= v5.6.0
CONTROLLER_TOOLS_VERSION ?= v0.23.0

.PHONY: kustomize
kustomize: $(KUSTOMIZE) ## Download kustomize locally if necessary.
$(KUSTOMIZE): $(LOCALBIN)
	$(call go-install-tool,$(KUSTOMIZE),sigs.k8s.io/kustomize/kustomize/v5,$(KUSTOMIZE_VERSION))

.PHONY: controller-gen
controller-gen: $(CONTROLLER_GEN) ## Download controller-gen locally if necessary.
$(CONTROLLER_GEN): $(LOCALBIN)
	$(call go-install-tool,$(CONTROLLER_GEN),sigs.k8s.io/controller-tools/cmd/controller-gen,$(CONTROLLER_TOOLS_VERSION))

# The test control plane (kube-apiserver, kube-controller-manager, kubectl, etcd) is built from the
# Go module proxy at pinned versions into a cache outside the clone (hack/toolchain.sh);
# setup-envtest would download prebuilt binaries instead.
.PHONY: envtest
envtest: ## Build the envtest control plane binaries if they are not cached yet.
	$(eval ENVTEST_ASSETS := $(shell hack/toolchain.sh envtest))
	@test -x "$(ENVTEST_ASSETS)/kube-apiserver" || { echo "envtest assets missing in '$(ENVTEST_ASSETS)'" >&2; exit 1; }

.PHONY: host-packages
host-packages: ## Install the Debian packages the tests need on the host when missing (PostgreSQL 15, pgBackRest, shellcheck).
	hack/host-packages.sh

# The S3 server of the backup tests (pgBackRest's repository), built like the control plane.
.PHONY: versitygw
versitygw: ## Build VersityGW (the backup tests' S3 server) if it is not cached yet.
	$(eval VERSITYGW := $(shell hack/toolchain.sh versitygw)/versitygw)
	@test -x "$(VERSITYGW)" || { echo "versitygw missing: '$(VERSITYGW)'" >&2; exit 1; }

# golangci-lint, pinned in hack/toolchain/golangci-lint and built like the control plane.
.PHONY: golangci-lint
golangci-lint: ## Build golangci-lint if it is not cached yet.
	$(eval GOLANGCI_LINT := $(shell hack/toolchain.sh golangci-lint)/golangci-lint)
	@test -x "$(GOLANGCI_LINT)" || { echo "golangci-lint missing: '$(GOLANGCI_LINT)'" >&2; exit 1; }

# go-install-tool will 'go install' any package with custom target and name of binary, if it doesn't exist
# $1 - target path with name of binary
# $2 - package url which can be installed
# $3 - specific version of package
define go-install-tool
@[ -f "$(1)-$(3)" ] || { \
set -e; \
package=$(2)@$(3) ;\
echo "Downloading $${package}" ;\
rm -f $(1) || true ;\
GOBIN=$(LOCALBIN) go install $${package} ;\
mv $(1) $(1)-$(3) ;\
} ;\
ln -sf $(1)-$(3) $(1)
endef

.PHONY: operator-sdk
OPERATOR_SDK ?= $(LOCALBIN)/operator-sdk
operator-sdk: $(LOCALBIN) ## Build operator-sdk from the Go module proxy (cached outside the clone).
	ln -sf "$$(hack/toolchain.sh operator-sdk)/operator-sdk" $(OPERATOR_SDK)

##@ OLM packaging

# `make bundle` regenerates bundle/ and bundle.Dockerfile from config/. The result is committed
# and must be exactly what this target generates (CI runs `make bundle catalog` and fails on a
# diff), so nothing in it may depend on time or on the machine: createdAt is pinned, stale files
# are removed first. The CSV base with everything not generated (description, icon, links, install
# modes...) is config/manifests/bases; descriptors come from the +operator-sdk:csv markers in api/.
.PHONY: bundle
bundle: manifests kustomize operator-sdk ## Regenerate bundle/ and bundle.Dockerfile from config/, then validate them.
	$(OPERATOR_SDK) generate kustomize manifests --interactive=false -q
	cd config/manifests/image && $(KUSTOMIZE) edit set image controller=$(IMG) pgpilot-scorecard=$(SCORECARD_IMG)
	rm -rf bundle/manifests bundle/metadata bundle/tests
	$(KUSTOMIZE) build config/manifests | $(OPERATOR_SDK) generate bundle $(BUNDLE_GEN_FLAGS)
	sed -i -e 's/^    createdAt: .*/    createdAt: "$(BUNDLE_CREATED_AT)"/' bundle/manifests/pgpilot-operator.clusterserviceversion.yaml
	$(OPERATOR_SDK) bundle validate ./bundle --select-optional suite=operatorframework
	$(OPERATOR_SDK) bundle validate ./bundle --select-optional name=good-practices

.PHONY: bundle-build
bundle-build: ## Build the bundle image.
	$(CONTAINER_TOOL) build -f bundle.Dockerfile -t $(BUNDLE_IMG) .

.PHONY: bundle-push
bundle-push: ## Push the bundle image.
	$(MAKE) docker-push IMG=$(BUNDLE_IMG)

.PHONY: opm
OPM = $(LOCALBIN)/opm
opm: $(LOCALBIN) ## Build opm from the Go module proxy (cached outside the clone).
	ln -sf "$$(hack/toolchain.sh opm)/opm" $(OPM)

# The file-based catalog (catalog/pgpilot-operator): the package and its channels (the upgrade
# graph, written by hand in channels.yaml), and one file per released bundle. Each entry names its
# bundle image (BUNDLE_IMAGE_TEMPLATE, as OperatorHub catalogs do: OLM unpacks it with a Job) and
# carries the manifests inline too (olm.bundle.object, for catalog browsers). `make catalog`
# re-renders only the bundle of VERSION from bundle/; the files of earlier versions are kept as
# released (v0.1.0 was rendered from the git tag v0.1.0, see catalog-render-release below), and
# they are the only copy of those bundles: hack/olm/bundle-dir writes one back out for its image.
CATALOG_DIR = catalog/pgpilot-operator
BUNDLE_IMAGE_TEMPLATE = $(IMAGE_TAG_BASE)-bundle:v{{.Version}}
.PHONY: catalog
catalog: opm ## Render bundle/ into the file-based catalog (catalog/) and validate the catalog.
	mkdir -p $(CATALOG_DIR)/bundles
	$(OPM) init pgpilot-operator --default-channel=$(DEFAULT_CHANNEL) \
		--icon=config/manifests/bases/pgpilot-icon.svg -o yaml > $(CATALOG_DIR)/package.yaml
	$(OPM) render ./bundle --alpha-image-ref-template '$(BUNDLE_IMAGE_TEMPLATE)' -o yaml \
		> $(CATALOG_DIR)/bundles/pgpilot-operator.v$(VERSION).yaml
	$(OPM) validate catalog

# catalog-release adds an earlier release (a git tag) to the catalog and keeps its source: the
# tag's own catalog entry, as released, byte for byte, and its tree in hack/releases/RELEASE.tar.gz
# (git archive, whose header names the commit), from which the local cluster builds that
# release's operator; committed binaries and the earlier releases' archives are left out. (The
# 0.1.0 entry predates bundle/: it was built from the tag's CRD, RBAC and manager with the CSV
# base of its day, by an earlier version of this target; see git log.)
RELEASE ?=
RELEASE_ENTRY = $(CATALOG_DIR)/bundles/pgpilot-operator.$(RELEASE).yaml
.PHONY: catalog-release
catalog-release: opm ## Add git tag RELEASE (e.g. v0.2.0) to the catalog and hack/releases.
	@test -n "$(RELEASE)" || { echo "usage: make catalog-release RELEASE=v0.2.0" >&2; exit 2; }
	@git cat-file -e "$(RELEASE):$(RELEASE_ENTRY)" 2>/dev/null || \
		{ echo "$(RELEASE) has no $(RELEASE_ENTRY) (is the tag here, and was its catalog made?)" >&2; exit 2; }
	git show "$(RELEASE):$(RELEASE_ENTRY)" > $(RELEASE_ENTRY)
	git archive --format=tar "$(RELEASE)" -- . ':!bench' ':!hack/releases' | gzip -9n > hack/releases/$(RELEASE).tar.gz
	$(OPM) validate catalog

# The image tag given to the resulting catalog image (e.g. make catalog-build CATALOG_IMG=example.com/operator-catalog:v0.2.0).
CATALOG_IMG ?= $(IMAGE_TAG_BASE)-catalog:v$(VERSION)

# The catalog image serves catalog/ with `opm serve`. catalog.Dockerfile was written by
# `opm generate dockerfile catalog -b quay.io/operator-framework/opm:v1.61.0 -i quay.io/operator-framework/opm:v1.61.0`.
.PHONY: catalog-build
catalog-build: ## Build the catalog image (catalog.Dockerfile).
	$(CONTAINER_TOOL) build -f catalog.Dockerfile -t $(CATALOG_IMG) .

# Push the catalog image.
.PHONY: catalog-push
catalog-push: ## Push a catalog image.
	$(MAKE) docker-push IMG=$(CATALOG_IMG)

# `make scorecard` runs every test of bundle/tests/scorecard/config.yaml as pods in the cluster of
# $$KUBECONFIG: the built-in basic and olm suites (quay.io/operator-framework/scorecard-test) and
# pgpilot's own (SCORECARD_IMG, built by scorecard-build). The operator must be installed (the
# CRD must exist) and SCORECARD_SA allowed to create PostgresClusters (see README).
# `make test` runs the same tests without a cluster (test/olm).
SCORECARD_SA ?= default
SCORECARD_FLAGS ?= --wait-time=180s
.PHONY: scorecard
scorecard: operator-sdk ## Run the scorecard tests against the cluster of $KUBECONFIG.
	$(OPERATOR_SDK) scorecard ./bundle --service-account=$(SCORECARD_SA) $(SCORECARD_FLAGS)

.PHONY: scorecard-build
scorecard-build: ## Build the image with pgpilot's scorecard tests (test/scorecard).
	$(CONTAINER_TOOL) build -f test/scorecard/Dockerfile -t $(SCORECARD_IMG) .

.PHONY: scorecard-push
scorecard-push: ## Push the image with pgpilot's scorecard tests.
	$(MAKE) docker-push IMG=$(SCORECARD_IMG)

##@ Local cluster

# A real single-node Kubernetes (hack/localcluster, see its README): every component built from
# its Go module at pinned versions, images built offline (operator from this clone, PostgreSQL 15
# from Debian), the whole cluster inside the network namespace pgpilot-node with no route off
# the machine. Needs root. Builds and image tarballs are cached outside the clone.
LOCALCLUSTER ?= hack/localcluster/localcluster

.PHONY: cluster-up
cluster-up: ## Start the local cluster (builds its components and images the first time).
	$(LOCALCLUSTER) up

.PHONY: cluster-down
cluster-down: ## Stop the local cluster and check the host is left as it was found.
	$(LOCALCLUSTER) down

.PHONY: cluster-status
cluster-status: ## Show the local cluster's daemons, node and pods.
	$(LOCALCLUSTER) status

.PHONY: demo
# OLM=1 installs OLM and pgpilot from its catalog image by a Subscription instead of kustomize.
OLM ?=
demo: manifests kustomize kubectl-pgpilot ## Local cluster + the operator from its image (config/default; OLM=1: through OLM) + the sample PostgresCluster, Ready.
	OLM=$(OLM) $(LOCALCLUSTER) demo

.PHONY: demo-down
demo-down: ## Tear down the local cluster of make demo.
	$(LOCALCLUSTER) down

.PHONY: test-e2e
test-e2e: manifests kustomize ## Run the e2e specs (test/e2e) on the local cluster (deployed, then installed through OLM), then tear it down.
	test/e2e/run.sh
