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
#   E2E_GINKGO_FLAGS     extra ginkgo flags for both phases, e.g. --focus=metrics
#   E2E_PROCS            parallel ginkgo processes of the deploy phase (default 3); specs that
#                        stop what others need (the operator's pod, a node) are Serial and run
#                        alone at the end. The OLM phase runs on one: its specs share the CRDs.
#   E2E_PHASES           "deploy olm" (default), or one of them
#   E2E_BESIDE_OLM       a command run beside the OLM phase, whose specs mostly wait on OLM
#                        (`make test` runs the unit and envtest suites there); its output is
#                        printed when it ends, and its failure fails the run. Without an OLM
#                        phase it runs after the specs.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export GOFLAGS=-buildvcs=false GOTOOLCHAIN=local
LOCALCLUSTER=$PWD/hack/localcluster/localcluster

beside_pid=
beside_log=
start_beside() {
  [[ -n ${E2E_BESIDE_OLM:-} ]] || return 0
  beside_log=$(mktemp)
  echo "e2e: running beside the OLM phase: $E2E_BESIDE_OLM"
  bash -c "$E2E_BESIDE_OLM" >"$beside_log" 2>&1 &
  beside_pid=$!
}
# finish_beside waits for the command, prints what it printed and returns its status.
finish_beside() {
  [[ -n $beside_pid ]] || return 0
  local status=0
  wait "$beside_pid" || status=$?
  beside_pid=
  echo "e2e: what ran beside the OLM phase printed (exit status $status):"
  cat "$beside_log"
  rm -f "$beside_log"
  return "$status"
}

teardown() {
  local status=$?
  finish_beside || status=1
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

# The specs are built on the host (the module proxy is not reachable from the node's namespace)
# and run inside it, where the API server and Services are, by the ginkgo CLI of go.mod's
# version, which runs a precompiled suite in its package's directory.
go build -o bin/ginkgo github.com/onsi/ginkgo/v2/ginkgo
go test -c -tags e2e -o test/e2e/e2e.test ./test/e2e/
run_specs() {
  # shellcheck disable=SC2086 # E2E_GINKGO_FLAGS is a list of flags
  "$LOCALCLUSTER" exec -- "$PWD/bin/ginkgo" --procs="$2" --timeout=40m -v --no-color \
    --label-filter="$1" ${E2E_GINKGO_FLAGS:-} "$PWD/test/e2e/e2e.test"
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
  run_specs '!olm' "${E2E_PROCS:-3}"
  "$LOCALCLUSTER" undeploy
fi
if [[ " $phases " == *" olm "* ]]; then
  start=$SECONDS
  start_beside
  "$LOCALCLUSTER" olm
  echo "e2e: OLM and pgpilot's catalog ready in $((SECONDS - start))s"
  # shellcheck source=/dev/null
  source <("$LOCALCLUSTER" registry)
  export E2E_REGISTRY=$REGISTRY_ADDR E2E_REGISTRY_CA=$REGISTRY_CA E2E_INDEX_IMAGE=$OPM_INDEX_IMAGE
  E2E_OPERATOR_SDK=$("$PWD/hack/toolchain.sh" operator-sdk)/operator-sdk
  export E2E_OPERATOR_SDK
  run_specs olm 1
fi
[[ -n $beside_pid ]] || start_beside
finish_beside
