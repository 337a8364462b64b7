#!/usr/bin/env bash
# `make test-e2e`: the e2e specs on a real local cluster (hack/localcluster), in two phases.
#
# 1. The operator as `make deploy` installs it: brings the cluster up (or reuses the one that is
#    up), deploys the operator from this clone's source and runs every spec but the OLM ones.
# 2. The operator as OperatorHub users get it: removes that deployment (CRD included), installs
#    OLM with pgpilot's catalog image (`localcluster olm`) and runs the specs labelled "olm".
#
# Both run on the node's network. The cluster is always torn down afterwards, and the run fails
# when the host is not left as it was found.
#
#   E2E_KEEP_CLUSTER=1   leave the cluster up after the run (for debugging; `make demo-down` later)
#   E2E_GO_TEST_FLAGS    extra `go test` flags for both phases, e.g. -ginkgo.focus=metrics
#   E2E_PHASES           "deploy olm" (default), or one of them
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
LOCALCLUSTER_IMAGES=$("$LOCALCLUSTER" images)
image_ref() { awk -v name="$1" '$1 == name {print $2}' <<<"$LOCALCLUSTER_IMAGES"; }
export E2E_HTTPCHECK_IMAGE E2E_BUSYBOX_IMAGE E2E_POSTGRES_IMAGE E2E_POSTGRES_SECOND_TAG
E2E_HTTPCHECK_IMAGE=$(image_ref httpcheck)
E2E_BUSYBOX_IMAGE=$(image_ref busybox)
# The same PostgreSQL image under a second tag, for the spec that rolls an image change.
E2E_POSTGRES_IMAGE=$(image_ref postgres)
E2E_POSTGRES_SECOND_TAG=${E2E_POSTGRES_IMAGE%:*}:e2e-second-tag

# go test builds on the host (the module proxy is not reachable from the node's namespace) and
# -exec runs the test binary inside it, where the API server and Services are.
run_specs() {
  # shellcheck disable=SC2086 # E2E_GO_TEST_FLAGS is a list of flags
  go test -tags e2e -count=1 -timeout 40m -exec "$LOCALCLUSTER exec --" ./test/e2e/ \
    -v -ginkgo.v -ginkgo.no-color -ginkgo.label-filter="$1" ${E2E_GO_TEST_FLAGS:-}
}

phases=${E2E_PHASES:-deploy olm}
start=$SECONDS
"$LOCALCLUSTER" up
"$LOCALCLUSTER" tag-image "$E2E_POSTGRES_IMAGE" "$E2E_POSTGRES_SECOND_TAG"
if [[ " $phases " == *" deploy "* ]]; then
  # A second node, for the spec that cuts the power of the primary's node.
  "$LOCALCLUSTER" worker add
  export E2E_LOCALCLUSTER=$LOCALCLUSTER
  "$LOCALCLUSTER" deploy
  # The S3 service of the backup specs, which stop and start it.
  "$LOCALCLUSTER" s3 up
  echo "e2e: cluster and operator ready in $((SECONDS - start))s"
  run_specs '!olm'
  "$LOCALCLUSTER" undeploy
fi
if [[ " $phases " == *" olm "* ]]; then
  start=$SECONDS
  "$LOCALCLUSTER" olm
  echo "e2e: OLM and pgpilot's catalog ready in $((SECONDS - start))s"
  # shellcheck source=/dev/null
  source <("$LOCALCLUSTER" registry)
  export E2E_REGISTRY=$REGISTRY_ADDR E2E_REGISTRY_CA=$REGISTRY_CA E2E_INDEX_IMAGE=$OPM_INDEX_IMAGE
  E2E_OPERATOR_SDK=$("$PWD/hack/toolchain.sh" operator-sdk)/operator-sdk
  export E2E_OPERATOR_SDK
  run_specs olm
fi
