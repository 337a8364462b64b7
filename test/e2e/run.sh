#!/usr/bin/env bash
# `make test-e2e`: the e2e specs on a real local cluster (hack/localcluster), in two phases.
#
# 1. The operator as `make deploy` installs it: brings the cluster up (or reuses the one that is
#    up), deploys the operator from this clone's source and runs every spec but the OLM ones.
# 2. The operator as OperatorHub users get it: removes that deployment (CRD included) and runs
#    the specs labelled "olm" against OLM with pgpilot's catalog image (`localcluster olm`,
#    installed beside the first phase's specs).
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
#   E2E_DEPLOY_LABELS    the deploy phase's label filter (default "!olm && !upgrade-bench": the
#                        major upgrade benchmark, `make bench-major-upgrade`, loads gigabytes)
#   E2E_BESIDE_OLM       a command run beside the OLM phase, whose specs mostly wait on OLM and
#                        have no time budget (`make test` runs the unit, envtest and real-server
#                        suites there; beside the deploy phase they starved its failovers past
#                        their budgets). Its output is printed when it ends, and its failure
#                        fails the run. Without an OLM phase it runs after the specs.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export GOFLAGS=-buildvcs=false GOTOOLCHAIN=local
LOCALCLUSTER=$PWD/hack/localcluster/localcluster

# Steps that run beside others, each with its output kept in a file until it is waited for.
declare -A bg_pid=() bg_log=()
# in_background NAME CMD...: start CMD.
in_background() {
  local name=$1
  shift
  bg_log[$name]=$(mktemp)
  "$@" >"${bg_log[$name]}" 2>&1 &
  bg_pid[$name]=$!
}
# wait_background NAME: wait for it, print what it printed and return its status.
wait_background() {
  local name=$1 status=0
  wait "${bg_pid[$name]}" || status=$?
  cat "${bg_log[$name]}"
  rm -f "${bg_log[$name]}"
  unset "bg_pid[$name]" "bg_log[$name]"
  return "$status"
}
wait_all_background() {
  local name status=0
  for name in "${!bg_pid[@]}"; do
    echo "e2e: waiting for $name (exit status below)"
    wait_background "$name" || { echo "e2e: $name failed" >&2; status=1; }
  done
  return "$status"
}

# The images' real-server suites beside the OLM phase (hack/test-real-servers.sh) run in a cgroup
# with a small CPU share, made before the cluster comes up so that the host's state after it
# matches: they are CPU-bound, tolerate waiting, and take the CPU the specs and the suites that
# fail when starved (the agent's, the envtest failovers with real agents, the benchmark budgets)
# leave. With all of them in the root cgroup, each of their processes weighed as much as all the
# cluster's pods together, and the old operator's primary restarted in the middle of an OLM
# upgrade spec. cgroup v1 (this host) or v2; without either, they share the CPU evenly.
beside_cgroup=
make_beside_cgroup() {
  [[ -n ${E2E_BESIDE_OLM:-} ]] || return 0
  local parent=/sys/fs/cgroup/cpu file=cpu.shares share=256
  if [[ ! -w $parent/cgroup.procs ]]; then
    grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || {
      echo "e2e: no cgroup could be made: what runs beside the OLM phase shares the CPU evenly"
      return 0
    }
    parent=/sys/fs/cgroup file=cpu.weight share=25
  fi
  beside_cgroup=$parent/pgpilot-e2e-bulk-$$
  mkdir "$beside_cgroup"
  echo "$share" >"$beside_cgroup/$file"
  export REAL_SERVER_BULK_CGROUP=$beside_cgroup
  echo "e2e: the images' real-server suites get a small CPU share ($beside_cgroup: $file $share)"
}
remove_beside_cgroup() {
  [[ -z $beside_cgroup ]] || rmdir "$beside_cgroup" || { echo "e2e: could not remove $beside_cgroup" >&2; return 1; }
}

start_beside() {
  [[ -n ${E2E_BESIDE_OLM:-} ]] || return 0
  echo "e2e: running beside the OLM phase: $E2E_BESIDE_OLM"
  # shellcheck disable=SC2016 # expanded by the inner bash
  in_background beside bash -c 'started=$SECONDS status=0; bash -c "$1" || status=$?
    echo "e2e: it ran for $((SECONDS - started))s"; exit "$status"' _ "$E2E_BESIDE_OLM"
}
# finish_beside waits for the command, prints what it printed and returns its status.
finish_beside() {
  [[ -n ${bg_pid[beside]:-} ]] || return 0
  local status=0 started=$SECONDS
  echo "e2e: what ran beside the OLM phase printed:"
  wait_background beside || status=$?
  echo "e2e: what ran beside the OLM phase: exit status $status, waited for $((SECONDS - started))s after the specs"
  return "$status"
}

# take_down removes the cluster (once), unless E2E_KEEP_CLUSTER=1, and checks the host.
cluster_taken_down=
take_down() {
  [[ -z $cluster_taken_down ]] || return 0
  cluster_taken_down=1
  if [[ ${E2E_KEEP_CLUSTER:-} == 1 ]]; then
    echo "e2e: E2E_KEEP_CLUSTER=1: leaving the cluster up ($LOCALCLUSTER down to remove it)"
  elif ! "$LOCALCLUSTER" down; then
    echo "e2e: tearing down left the host different from before the cluster came up" >&2
    return 1
  fi
}

# print_digest collects the write checkers' figures into bin/e2e-results.json (hack/figures: a
# run worth recording becomes docs/results/e2e.json) and prints the failures in each phase's
# ginkgo JSON report ($reports), last.
print_digest() {
  local status=0
  if [[ -x bin/e2e-figures ]]; then
    bin/e2e-figures collect -commit "$(git rev-parse HEAD 2>/dev/null || echo unknown)" "$reports"/*.json >bin/e2e-results.json &&
      echo "e2e: the write checkers' figures are in bin/e2e-results.json" || status=$?
  fi
  if [[ -x bin/e2e-digest ]]; then bin/e2e-digest "$reports"/*.json || status=$?; fi
  rm -rf "$reports"
  return "$status"
}

teardown() {
  local status=$?
  finish_beside || status=1
  wait_all_background || status=1
  take_down || status=1
  remove_beside_cgroup || status=1
  print_digest || status=1
  exit "$status"
}

# A compile error should not cost a cluster bring-up.
go vet -tags e2e ./test/e2e/

reports=$(mktemp -d)
make_beside_cgroup
trap teardown EXIT
LOCALCLUSTER_IMAGES=$("$LOCALCLUSTER" images)
image_ref() { awk -v name="$1" '$1 == name {print $2}' <<<"$LOCALCLUSTER_IMAGES"; }
# kubectl finds the plugin on PATH, as it does for users.
export E2E_PLUGIN_DIR=$PWD/bin
export E2E_HTTPCHECK_IMAGE E2E_BUSYBOX_IMAGE E2E_POSTGRES_IMAGE E2E_POSTGRES_SECOND_TAG E2E_PROMETHEUS_IMAGE \
  E2E_THIRD_PARTY_POSTGRES_IMAGE
E2E_HTTPCHECK_IMAGE=$(image_ref httpcheck)
E2E_PROMETHEUS_IMAGE=$(image_ref prometheus)
E2E_BUSYBOX_IMAGE=$(image_ref busybox)
# The default PostgreSQL image (pgpilot's 17, by its real name) under a second tag, for the spec
# that rolls an image change; the stand-in of a third-party image without pgBackRest.
E2E_POSTGRES_IMAGE=$(image_ref postgresql-17)
E2E_POSTGRES_SECOND_TAG=${E2E_POSTGRES_IMAGE%:*}:e2e-second-tag
E2E_THIRD_PARTY_POSTGRES_IMAGE=$(image_ref official-postgres)

# The specs are built on the host (the module proxy is not reachable from the node's namespace)
# and run inside it, where the API server and Services are, by the ginkgo CLI of go.mod's
# version, which runs a precompiled suite in its package's directory.
build_suite() {
  go build -o bin/ginkgo github.com/onsi/ginkgo/v2/ginkgo
  go build -o bin/kubectl-pgpilot ./cmd/kubectl-pgpilot
  go build -o bin/e2e-digest ./test/e2e/digest
  go build -o bin/e2e-figures ./hack/figures
  go test -c -tags e2e -o test/e2e/e2e.test ./test/e2e/
}
run_specs() {
  # shellcheck disable=SC2086 # E2E_GINKGO_FLAGS is a list of flags
  "$LOCALCLUSTER" exec -- "$PWD/bin/ginkgo" --procs="$2" --timeout=40m -v --no-color \
    --label-filter="$1" --json-report="$reports/$3.json" ${E2E_GINKGO_FLAGS:-} "$PWD/test/e2e/e2e.test"
}

wait_olm_images() { [[ -z ${bg_pid[olm-images]:-} ]] || wait_background olm-images; }

phases=${E2E_PHASES:-deploy olm}
start=$SECONDS
# The cluster's daemons mostly start and wait: the suite compiles beside them, and so do the
# OLM phase's images. Those are cached; on a fresh machine they compile the earlier releases'
# operators, which beside the deploy phase took the load to 50 (cold run, 856 s) and starved
# its failovers past their budgets, even at the lowest CPU priority.
in_background suite build_suite
if [[ " $phases " == *" olm "* ]]; then in_background olm-images "$LOCALCLUSTER" olm-images; fi
"$LOCALCLUSTER" up
wait_background suite
"$LOCALCLUSTER" tag-image "$E2E_POSTGRES_IMAGE" "$E2E_POSTGRES_SECOND_TAG"
if [[ " $phases " == *" deploy "* ]]; then
  # A second node, for the spec that cuts the power of the primary's node, and the S3 service
  # of the backup specs, which stop and start it: both mostly wait, so beside the deployment.
  in_background worker "$LOCALCLUSTER" worker add
  in_background s3 "$LOCALCLUSTER" s3 up
  export E2E_LOCALCLUSTER=$LOCALCLUSTER
  # The Prometheus operator's CRDs, as most clusters that run Prometheus have them, before the
  # operator starts: it then manages the PodMonitors the monitoring specs ask for.
  "$LOCALCLUSTER" kubectl apply --server-side -f test/crds/prometheus-operator/ >/dev/null
  "$LOCALCLUSTER" deploy
  wait_background worker
  wait_background s3
  echo "e2e: cluster and operator ready in $((SECONDS - start))s"
  # OLM and pgpilot's catalog come up beside the specs (they touch nothing of pgpilot's until
  # the OLM phase subscribes), so that phase starts at once; built before them (olm-images).
  wait_olm_images
  if [[ " $phases " == *" olm "* ]]; then in_background olm "$LOCALCLUSTER" olm; fi
  run_specs "${E2E_DEPLOY_LABELS:-!olm && !upgrade-bench}" "${E2E_PROCS:-3}" deploy
  "$LOCALCLUSTER" undeploy
fi
if [[ " $phases " == *" olm "* ]]; then
  start=$SECONDS
  if [[ -n ${bg_pid[olm]:-} ]]; then
    wait_background olm
  else
    wait_olm_images
    "$LOCALCLUSTER" olm
  fi
  echo "e2e: OLM and pgpilot's catalog ready $((SECONDS - start))s after the deploy phase"
  start_beside
  # shellcheck source=/dev/null
  source <("$LOCALCLUSTER" registry)
  export E2E_REGISTRY=$REGISTRY_ADDR E2E_REGISTRY_CA=$REGISTRY_CA E2E_INDEX_IMAGE=$OPM_INDEX_IMAGE
  E2E_OPERATOR_SDK=$("$PWD/hack/toolchain.sh" operator-sdk)/operator-sdk
  export E2E_OPERATOR_SDK
  run_specs olm 1 olm
fi
# What runs beside needs no cluster: it gets the CPU the cluster's daemons would take.
take_down
[[ -n ${bg_pid[beside]:-} ]] || start_beside
finish_beside
