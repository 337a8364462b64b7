#!/usr/bin/env bash
# `make test-e2e`: the e2e specs on a real local cluster (hack/localcluster).
#
# Brings the cluster up (or reuses the one that is up), deploys the operator from this clone's
# source as `make deploy` would, runs the specs on the node's network, and always tears the
# cluster down afterwards, failing when the host is not left as it was found.
#
#   E2E_KEEP_CLUSTER=1   leave the cluster up after the run (for debugging; `make demo-down` later)
#   E2E_GO_TEST_FLAGS    extra `go test` flags, e.g. -ginkgo.focus=metrics
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export GOFLAGS=-buildvcs=false GOTOOLCHAIN=local
LOCALCLUSTER=$PWD/hack/localcluster/localcluster

teardown() {
  local status=$?
  if [[ ${E2E_KEEP_CLUSTER:-} == 1 ]]; then
    echo "e2e: E2E_KEEP_CLUSTER=1: leaving the cluster up ($LOCALCLUSTER down to remove it)"
  elif ! "$LOCALCLUSTER" down; then
    echo "e2e: tearing down left the host different from before the cluster came up" >&2
    status=1
  fi
  exit "$status"
}

# A compile error should not cost a cluster bring-up.
go vet -tags e2e ./test/e2e/

trap teardown EXIT
start=$SECONDS
"$LOCALCLUSTER" up
"$LOCALCLUSTER" deploy
echo "e2e: cluster and operator ready in $((SECONDS - start))s"

E2E_HTTPCHECK_IMAGE=$("$LOCALCLUSTER" images | awk '$1 == "httpcheck" {print $2}')
export E2E_HTTPCHECK_IMAGE
# go test builds on the host (the module proxy is not reachable from the node's namespace) and
# -exec runs the test binary inside it, where the API server and Services are.
# shellcheck disable=SC2086 # E2E_GO_TEST_FLAGS is a list of flags
go test -tags e2e -count=1 -timeout 30m -exec "$LOCALCLUSTER exec --" ./test/e2e/ \
  -v -ginkgo.v -ginkgo.no-color ${E2E_GO_TEST_FLAGS:-}
