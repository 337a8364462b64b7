#!/usr/bin/env bash
# test-in-image.sh MAJOR PACKAGE...: runs the Go test packages against pgpilot's PostgreSQL MAJOR
# image's own server binaries, inside its root filesystem (hack/postgres-rootfs.sh), for the
# majors whose packages a host of another Debian release cannot install. The tests are built
# static on the host and run as root in a chroot over a throwaway overlay of the root (the cached
# root is never written), with this clone and the test tools at their own paths, in a private
# mount namespace that takes every mount along when it ends. Servers listen on loopback, as on
# the host. Extra go test flags come from TEST_FLAGS (e.g. TEST_FLAGS='-test.run=TestClone').
set -euo pipefail

MAJOR=$1
shift
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[[ $(id -u) == 0 ]] || { echo "test-in-image: runs as root (chroot, mounts)" >&2; exit 1; }
ROOT=$("$REPO_ROOT/hack/postgres-rootfs.sh" "$MAJOR")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pgpilot-image-tests.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/bin" "$WORK/upper" "$WORK/overlay-work" "$WORK/merged"

for pkg in "$@"; do
  (cd "$REPO_ROOT" && CGO_ENABLED=0 go test -c -o "$WORK/bin/$(basename "$pkg").test" "$pkg")
done

# The major upgrade tests need an older major's server carried in as a major upgrade carries it
# (`agent carry`, run in the old major's own root): the oldest major's, from the host, whose
# packages are that image's; the longest jump pgpilot offers. The result reaches the tests as
# PGPILOT_PG_CARRIED.
OLDEST=$(awk '$1 ~ /^[0-9]+$/ { print $1; exit }' "$REPO_ROOT/images/postgresql/majors")
CARRIED=
if (( MAJOR > OLDEST )); then
  [[ -x /usr/lib/postgresql/$OLDEST/bin/postgres ]] || { echo "test-in-image: the host has no PostgreSQL $OLDEST to carry" >&2; exit 1; }
  (cd "$REPO_ROOT" && CGO_ENABLED=0 go build -o "$WORK/bin/agent" ./cmd/agent)
  CARRIED=$WORK/carried
  "$WORK/bin/agent" carry "$OLDEST" "$CARRIED"
fi

# The paths the tests find outside the root, mounted at the same place inside it.
shared=("$REPO_ROOT" "$WORK/bin")
[[ -z $CARRIED ]] || shared+=("$CARRIED")
[[ -z ${PGPILOT_VERSITYGW:-} ]] || shared+=("$(dirname "$PGPILOT_VERSITYGW")")

# shellcheck disable=SC2016 # expanded by the inner bash
unshare --mount --propagation private --fork -- bash -euo pipefail -c '
  root=$1 work=$2 major=$3 repo=$4 carried=$5 count=$6
  shift 6
  merged=$work/merged
  mount -t overlay overlay -o "lowerdir=$root,upperdir=$work/upper,workdir=$work/overlay-work" "$merged"
  mount -t proc proc "$merged/proc"
  mount --rbind /dev "$merged/dev"
  mount -t tmpfs tmpfs "$merged/tmp"
  for ((i = 0; i < count; i++)); do
    mkdir -p "$merged$1" && mount --bind "$1" "$merged$1"
    shift
  done
  # One package after another: their servers are CPU-bound (initdb, pg_upgrade, restores), and
  # beside each other on 2 cores they took 7-10x their time alone, past the time their tests give
  # a lease or a fence.
  status=0
  for pkg in "$@"; do
    echo "=== PostgreSQL $major: $pkg"
    started=$SECONDS result=0
    chroot "$merged" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TMPDIR=/tmp \
      PGPILOT_PG_BINDIR="/usr/lib/postgresql/$major/bin" PGPILOT_VERSITYGW="${PGPILOT_VERSITYGW:-}" \
      PGPILOT_PG_CARRIED="$carried" \
      sh -c "cd \"$repo/${pkg#./}\" && exec \"$work/bin/$(basename "$pkg").test\" -test.timeout=25m ${TEST_FLAGS:-}" 2>&1 || result=$?
    echo "--- PostgreSQL $major: $pkg: exit status $result after $((SECONDS - started))s"
    ((result == 0)) || status=1
  done
  exit "$status"
' _ "$ROOT" "$WORK" "$MAJOR" "$REPO_ROOT" "$CARRIED" "${#shared[@]}" "${shared[@]}" "$@"
