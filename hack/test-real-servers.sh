#!/usr/bin/env bash
# test-real-servers.sh: the suites that run real PostgreSQL servers, on every major pgpilot ships,
# all at once: the agent's on the host's PostgreSQL 15 (go test), and in pgpilot's image of each
# other major (hack/test-in-image.sh) the server, exporter and pgBackRest suites, with the agent's
# on the newest too (the default major's agent runs under every e2e spec; the agent's suite is
# the longest). They spend most of their time waiting on the servers' and the agent's timers
# (leases, fences, archiving), so they share the CPU well. Each one's output is printed when it
# ends; any failure fails. Extra go test flags: GO_TEST_FLAGS (host), TEST_FLAGS (images).
set -euo pipefail
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO_ROOT"

image_packages=(./internal/instance/postgres ./internal/instance/exporter ./internal/instance/pgbackrest)
majors=$(awk '$1 ~ /^[0-9]+$/ && $1 != 15 { print $1 }' images/postgresql/majors)
newest=$(tail -n 1 <<<"$majors")

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
declare -A pid=()
names=()
run() {
  local name=$1
  shift
  ("$@") >"$logs/$name" 2>&1 &
  pid[$name]=$!
  names+=("$name")
}

# shellcheck disable=SC2086 # GO_TEST_FLAGS is a list of flags
run host-15 go test ${GO_TEST_FLAGS:-} ./internal/instance/agent
for major in $majors; do
  packages=("${image_packages[@]}")
  [[ $major != "$newest" ]] || packages+=(./internal/instance/agent)
  run "image-$major" hack/test-in-image.sh "$major" "${packages[@]}"
done

status=0
for name in "${names[@]}"; do
  echo "=== real-server suites: $name"
  result=0
  wait "${pid[$name]}" || result=$?
  cat "$logs/$name"
  if ((result != 0)); then
    status=1
    echo "=== real-server suites: $name FAILED (exit status $result)"
  fi
done
exit "$status"
