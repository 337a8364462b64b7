#!/usr/bin/env bash
# Builds pgpilot's pinned tools from the Go module proxy into a cache outside the clone,
# so fresh clones (CI) and later sessions reuse them. Prints the tool's cache directory.
#
#   hack/toolchain.sh kubernetes     kube-apiserver, kube-controller-manager, kubectl
#   hack/toolchain.sh kubernetes-node  kubelet, kube-scheduler, kube-proxy (hack/localcluster)
#   hack/toolchain.sh etcd           etcd
#   hack/toolchain.sh operator-sdk   operator-sdk, scorecard-test
#   hack/toolchain.sh opm            opm (file-based catalogs only: built without cgo/sqlite)
#   hack/toolchain.sh olm            olm, catalog, package-server, copy-content, cpb (OLM's image)
#   hack/toolchain.sh grpc-health-probe  grpc_health_probe (the opm image's catalog pod probe)
#   hack/toolchain.sh envtest        a KUBEBUILDER_ASSETS folder (kube-apiserver, etcd, kubectl)
#   hack/toolchain.sh versitygw      VersityGW, the S3 server of the backup tests
#   hack/toolchain.sh prometheus     the Prometheus server of the e2e monitoring specs
#   hack/toolchain.sh golangci-lint  golangci-lint (`make lint`, part of `make test`)
set -euo pipefail

KUBERNETES_VERSION=v1.37.2
ETCD_VERSION=v3.7.3
OPERATOR_SDK_VERSION=v1.42.2
OLM_VERSION=v0.38.0
# opm is the operator-registry OLM v0.38.0 requires (hack/toolchain/olm/go.mod), so the catalog
# is rendered by the opm that OLM's unpack Jobs and catalog pods run.
OPM_VERSION=v1.61.0
GRPC_HEALTH_PROBE_VERSION=v0.4.62
VERSITYGW_VERSION=v1.8.0
GOLANGCI_LINT_VERSION=v2.15.0

HACK_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE_ROOT=${PGPILOT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pgpilot}
export GOFLAGS=-buildvcs=false GOTOOLCHAIN=local CGO_ENABLED=0

log() { echo "toolchain: $*" >&2; }

# The tools build without -trimpath, with CGO off, as the Makefile's tests and vet do: on a cold
# cache each package (the standard library first) is compiled once for all of them. The
# Kubernetes wrapper module also requires the versions of pgpilot's go.mod for every module both
# use, so the tests reuse its client-go, apimachinery, grpc... (about 850 packages) as they are.

# shellcheck source=lib/build-once.sh
source "$HACK_DIR/lib/build-once.sh"

# kubernetes_key: the version and the wrapper module's dependencies (their versions are pgpilot's).
kubernetes_key() { echo "$KUBERNETES_VERSION-$(sha256sum <"$HACK_DIR/toolchain/kubernetes/go.sum" | cut -c1-8)"; }

kube_ldflags() {
  local minor ld="-s -w"
  minor=$(cut -d. -f2 <<<"$KUBERNETES_VERSION")
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$KUBERNETES_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ld+=" -X $p.gitTreeState=clean -X $p.gitCommit=$KUBERNETES_VERSION-goproxy"
  done
  echo "$ld"
}

build_kubernetes() {
  (cd "$HACK_DIR/toolchain/kubernetes" && go build -ldflags "$(kube_ldflags)" -o "$1/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kubectl)
}

# The node components share the wrapper module and link flags of build_kubernetes, so they
# reuse its compiled packages; they get their own cache folder so the control plane's key stays.
build_kubernetes_node() {
  (cd "$HACK_DIR/toolchain/kubernetes" && go build -ldflags "$(kube_ldflags)" -o "$1/" \
    k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-proxy)
}

build_etcd() {
  (cd "$HACK_DIR/toolchain/etcd" && go build -ldflags "-s -w" -o "$1/etcd" go.etcd.io/etcd/server/v3)
}

build_operator_sdk() {
  local v=github.com/operator-framework/operator-sdk/internal/version
  local ld="-s -w -X $v.Version=$OPERATOR_SDK_VERSION -X $v.GitVersion=$OPERATOR_SDK_VERSION"
  ld+=" -X $v.KubernetesVersion=v1.33.1 -X $v.ImageVersion=$OPERATOR_SDK_VERSION"
  (cd "$HACK_DIR/toolchain/operator-sdk" && go build -tags containers_image_openpgp \
    -ldflags "$ld" -o "$1/" github.com/operator-framework/operator-sdk/cmd/operator-sdk \
    github.com/operator-framework/operator-sdk/images/scorecard-test)
}

# CGO stays off (the sqlite index commands are unavailable then; pgpilot uses file-based
# catalogs); json1 and containers_image_openpgp avoid the sqlite and gpgme C dependencies.
build_opm() {
  local v=github.com/operator-framework/operator-registry/cmd/opm/version
  (cd "$HACK_DIR/toolchain/olm" && go build -tags json1,containers_image_openpgp \
    -ldflags "-s -w -X $v.opmVersion=$OPM_VERSION -X $v.gitCommit=$OPM_VERSION-goproxy" \
    -o "$1/opm" github.com/operator-framework/operator-registry/cmd/opm)
}

# The binaries of OLM's own image (its Dockerfile copies exactly these into /bin).
build_olm() {
  (cd "$HACK_DIR/toolchain/olm" && go build -ldflags "-s -w" -o "$1/" \
    github.com/operator-framework/operator-lifecycle-manager/cmd/olm \
    github.com/operator-framework/operator-lifecycle-manager/cmd/catalog \
    github.com/operator-framework/operator-lifecycle-manager/cmd/package-server \
    github.com/operator-framework/operator-lifecycle-manager/cmd/copy-content \
    github.com/operator-framework/operator-lifecycle-manager/util/cpb)
}

build_grpc_health_probe() {
  (cd "$HACK_DIR/toolchain/grpc-health-probe" && go build -ldflags "-s -w" \
    -o "$1/grpc_health_probe" github.com/grpc-ecosystem/grpc-health-probe)
}

build_versitygw() {
  (cd "$HACK_DIR/toolchain/versitygw" && go build -ldflags "-s -w" -o "$1/versitygw" \
    github.com/versity/versitygw/cmd/versitygw)
}

build_golangci_lint() {
  (cd "$HACK_DIR/toolchain/golangci-lint" && go build -ldflags "-s -w" -o "$1/golangci-lint" \
    github.com/golangci/golangci-lint/v2/cmd/golangci-lint)
}

# Prometheus at the version of go.mod (the one whose PromQL parser checks the dashboard), built
# with pgpilot's own go.mod, so with the versions of the modules the tests compile, and without
# -trimpath: it shares their compiled packages. A copy of go.mod and go.sum (-modfile) takes the
# sums of the modules only the server needs, so the clone stays as it is. Kubernetes is its only
# service discovery: the others pull in every cloud's SDK.
build_prometheus() {
  local modfile
  modfile=$(mktemp -d)
  cp "$HACK_DIR/../go.mod" "$HACK_DIR/../go.sum" "$modfile/"
  (cd "$HACK_DIR/.." && go build -mod=mod -modfile="$modfile/go.mod" -tags remove_all_sd,enable_kubernetes_sd \
    -ldflags "-s -w" -o "$1/prometheus" github.com/prometheus/prometheus/cmd/prometheus)
  rm -rf "$modfile"
}

# envtest wants one folder with kube-apiserver, etcd and kubectl; link them from their caches.
build_envtest() {
  local k8s etcd
  k8s=$(build_once kubernetes "$(kubernetes_key)" build_kubernetes)
  etcd=$(build_once etcd "$ETCD_VERSION" build_etcd)
  ln -s "$k8s/kube-apiserver" "$k8s/kube-controller-manager" "$k8s/kubectl" "$etcd/etcd" "$1/"
}

case "${1:-}" in
  kubernetes) build_once kubernetes "$(kubernetes_key)" build_kubernetes ;;
  kubernetes-node) build_once kubernetes-node "$(kubernetes_key)" build_kubernetes_node ;;
  etcd) build_once etcd "$ETCD_VERSION" build_etcd ;;
  operator-sdk) build_once operator-sdk "$OPERATOR_SDK_VERSION" build_operator_sdk ;;
  opm) build_once opm "$OPM_VERSION" build_opm ;;
  olm) build_once olm "$OLM_VERSION" build_olm ;;
  grpc-health-probe) build_once grpc-health-probe "$GRPC_HEALTH_PROBE_VERSION" build_grpc_health_probe ;;
  versitygw) build_once versitygw "$VERSITYGW_VERSION" build_versitygw ;;
  prometheus) build_once prometheus "$(cd "$HACK_DIR/.." && go list -m -f '{{.Version}}' github.com/prometheus/prometheus)" build_prometheus ;;
  golangci-lint) build_once golangci-lint "$GOLANGCI_LINT_VERSION" build_golangci_lint ;;
  envtest) build_once envtest "$(kubernetes_key)-etcd-$ETCD_VERSION" build_envtest ;;
  *) echo "usage: $0 kubernetes|kubernetes-node|etcd|operator-sdk|opm|olm|grpc-health-probe|versitygw|prometheus|golangci-lint|envtest" >&2; exit 2 ;;
esac
