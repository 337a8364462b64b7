#!/usr/bin/env bash
# postgres-rootfs.sh MAJOR [PACKAGE...]: prints the folder of a cached Debian root filesystem
# made into pgpilot's PostgreSQL MAJOR image by images/postgresql/install.sh, building it first
# when missing: debootstrap of the suite images/postgresql/majors names for MAJOR (with its
# -updates and -security suites, as Debian's own images have them), then install.sh in a chroot.
# The local cluster turns it into the image ghcr.io/pgpilot/postgresql:MAJOR, and the tests run
# their real-server suites inside it for the majors the host has no packages of. PACKAGEs replace
# the recipe's list (the local cluster's stand-in of a third-party image).
#
# A root is cached under ~/.cache/pgpilot/postgresql-rootfs/ by its inputs: the recipe and the
# Release date of the suites it comes from, so a Debian point release or security fix makes a
# new one (the two newest of a major are kept). Runs as root; only apt's mirror is contacted.
set -euo pipefail

MAJOR=$1
shift
EXTRA=("$@")
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RECIPE=$REPO_ROOT/images/postgresql
CACHE=${PGPILOT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pgpilot}/postgresql-rootfs
MIRROR=${DEBIAN_MIRROR:-$(grep -rhoE '^(deb |URIs: )\s*https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null | head -1 | awk '{print $2}' || true)}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
MIRROR=${MIRROR%/}
SECURITY_MIRROR=${MIRROR%/debian}/debian-security

die() { echo "postgres-rootfs: $*" >&2; exit 1; }

SUITE=$(awk -v major="$MAJOR" '$1 == major { print $2 }' "$RECIPE/majors")
[[ -n $SUITE ]] || die "PostgreSQL $MAJOR is not in $RECIPE/majors"

# release_dates: the Date of every suite the root's apt sources name; a new one means new packages.
release_dates() {
  local url
  for url in "$MIRROR/dists/$SUITE" "$MIRROR/dists/$SUITE-updates" "$SECURITY_MIRROR/dists/$SUITE-security"; do
    curl -fsS --max-time 60 "$url/InRelease" | sed -n 's/^Date: //p' | head -1 || die "cannot read $url/InRelease"
  done
}

inputs_key() {
  {
    (cd "$RECIPE" && sha256sum majors install.sh)
    sha256sum <"${BASH_SOURCE[0]}"
    printf '%s\n' "${EXTRA[@]}"
    release_dates
  } | sha256sum | cut -c1-12
}

bootstrap() {
  local root=$1 script=/usr/share/debootstrap/scripts/$SUITE
  # A debootstrap older than the suite knows it as what it is made like: Debian's testing, sid.
  [[ -e $script ]] || script=/usr/share/debootstrap/scripts/sid
  debootstrap --variant=minbase "$SUITE" "$root" "$MIRROR" "$script" >/dev/null || return 1
  cat >"$root/etc/apt/sources.list" <<SOURCES
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb $SECURITY_MIRROR $SUITE-security main
SOURCES
  # The mirror may be a snapshot whose testing suites' Release files are past their Valid-Until
  # (seen here with forky); the packages are still signed. Removed once installed.
  echo 'Acquire::Check-Valid-Until "false";' >"$root/etc/apt/apt.conf.d/99pgpilot-build"
}

install() {
  local root=$1
  mkdir -p "$root/usr/local/share/pgpilot-image"
  cp "$RECIPE/majors" "$RECIPE/install.sh" "$root/usr/local/share/pgpilot-image/"
  # Maintainer scripts need /proc (systemd-tmpfiles); a private mount namespace drops it with
  # the process, whatever happens.
  # shellcheck disable=SC2016 # expanded by the inner bash
  unshare --mount --propagation private --fork -- bash -c 'mount -t proc proc "$1/proc" && shift &&
    exec chroot "$0" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin /usr/local/share/pgpilot-image/install.sh "$@"' \
    "$root" "$root" "$MAJOR" "${EXTRA[@]}" || return 1
  rm "$root/etc/apt/apt.conf.d/99pgpilot-build"
}

# build DIR: the root in DIR.partial, renamed to DIR once complete.
build() {
  local dir=$1 start=$SECONDS log=$1.log
  rm -rf "$dir.partial" && mkdir -p "$dir.partial"
  echo "postgres-rootfs: building PostgreSQL $MAJOR on Debian $SUITE in $dir" >&2
  # (set -e does not apply inside an if's condition: each step says how it went.)
  if ! { bootstrap "$dir.partial" && install "$dir.partial"; } >"$log" 2>&1; then
    tail -20 "$log" >&2
    die "building the PostgreSQL $MAJOR root failed (log: $log)"
  fi
  mv "$dir.partial" "$dir"
  echo "$((SECONDS - start))" >"$dir.build-seconds"
  echo "postgres-rootfs: built PostgreSQL $MAJOR in $((SECONDS - start))s ($(du -sh "$dir" | cut -f1))" >&2
}

main() {
  [[ $(id -u) == 0 ]] || die "runs as root (debootstrap, chroot)"
  mkdir -p "$CACHE"
  local name=$MAJOR
  ((${#EXTRA[@]} == 0)) || name=$MAJOR-$(printf '%s\n' "${EXTRA[@]}" | sha256sum | cut -c1-6)
  local dir
  dir=$CACHE/$name-$(inputs_key)
  # One builder per major at a time: the local cluster and the test suites may ask together.
  exec 9>"$CACHE/$name.lock"
  flock 9
  [[ -d $dir ]] || build "$dir"
  # Keep the two newest roots of this major (with their logs and build times).
  local old
  find "$CACHE" -maxdepth 1 -name "$name-????????????" -printf '%T@ %p\n' | sort -rn | tail -n +3 |
    cut -d' ' -f2- | while read -r old; do rm -rf "$old" "$old.log" "$old.build-seconds"; done
  echo "$dir"
}

main
