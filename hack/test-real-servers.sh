#!/usr/bin/env bash
# test-real-servers.sh: the suites that run real PostgreSQL servers, on every major pgpilot ships:
# the agent's on the host's PostgreSQL 15 (go test), and in pgpilot's image of each other major
# (hack/test-in-image.sh) the server, exporter and pgBackRest suites, with the agent's on the
# newest too (the default major's agent runs under every e2e spec).
#
# The agent's suites mostly wait on their agents' timers (leases, fences, holds) and fail when
# starved of the CPU within them: both run at once, from the start. The images' server, exporter
# and pgBackRest suites are CPU-bound (initdb, pg_upgrade, restores) and tolerate waiting: one
# image's beside the other's, each package after the other, in the cgroup REAL_SERVER_BULK_CGROUP
# names when it is set (test/e2e/run.sh gives it a small CPU share, so that they take only the
# CPU nothing else asks for). All of them at once in one cgroup, on 2 cores, each took 7-10x its
# time alone and the run ended no sooner. Each one's output is printed when it ends; any failure
# fails. Extra go test flags: GO_TEST_FLAGS (host), TEST_FLAGS (images).
set -euo pipefail
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO_ROOT"

image_packages=(./internal/instance/postgres ./internal/instance/exporter ./internal/instance/pgbackrest)
majors=$(awk '$1 ~ /^[0-9]+$/ && $1 != 15 { print $1 }' images/postgresql/majors)
newest=$(tail -n 1 <<<"$majors")

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
declare -A name_of=()
# run NAME CGROUP CMD...: start CMD in the background in CGROUP (none: this one), its output kept.
run() {
  local name=$1 cgroup=$2
  shift 2
  (
    [[ -z $cgroup ]] || echo "$BASHPID" >"$cgroup/cgroup.procs"
    exec "$@"
  ) >"$logs/$name" 2>&1 &
  name_of[$!]=$name
}

# shellcheck disable=SC2086 # GO_TEST_FLAGS is a list of flags
run agent-15 "" go test ${GO_TEST_FLAGS:-} ./internal/instance/agent
run "agent-$newest" "" hack/test-in-image.sh "$newest" ./internal/instance/agent
while read -r major; do
  run "image-$major" "${REAL_SERVER_BULK_CGROUP:-}" hack/test-in-image.sh "$major" "${image_packages[@]}"
done <<<"$(sort -rn <<<"$majors")"

status=0
while ((${#name_of[@]} > 0)); do
  pid='' result=0
  wait -n -p pid || result=$?
  name=${name_of[$pid]}
  unset "name_of[$pid]"
  echo "=== real-server suites: $name"
  cat "$logs/$name"
  if ((result != 0)); then
    status=1
    echo "=== real-server suites: $name FAILED (exit status $result)"
  fi
done
exit "$status"
