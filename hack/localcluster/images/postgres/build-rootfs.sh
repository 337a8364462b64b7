#!/usr/bin/env bash
# build-rootfs.sh ROOTFS [MIRROR]: a Debian bookworm root filesystem with PostgreSQL 15 laid
# out like the official postgres image: user and group postgres with uid/gid 999, binaries in
# /usr/lib/postgresql/15/bin, /var/run/postgresql writable, docker-entrypoint.sh, no cluster
# created at install time, and pgBackRest (bookworm's pgbackrest, run by the instance agent as
# the postgres user). Runs as root (debootstrap, chroot); only apt's mirror is contacted.
set -euo pipefail

ROOTFS=$1
MIRROR=${2:-http://deb.debian.org/debian}
SUITE=bookworm
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

in_root() { chroot "$ROOTFS" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive "$@"; }

bootstrap() {
  debootstrap --variant=minbase "$SUITE" "$ROOTFS" "$MIRROR" >/dev/null
  # Point releases and security fixes, as a current official image would have them.
  cat >"$ROOTFS/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb ${MIRROR%/debian}/debian-security $SUITE-security main
EOF
  # No service may start inside the chroot while packages install.
  printf '#!/bin/sh\nexit 101\n' >"$ROOTFS/usr/sbin/policy-rc.d"
  chmod +x "$ROOTFS/usr/sbin/policy-rc.d"
}

install_postgres() {
  # The official image's ids, created before the package would pick a dynamic one.
  in_root groupadd --system --gid 999 postgres
  in_root useradd --system --uid 999 --gid postgres --home-dir /var/lib/postgresql --shell /bin/bash postgres
  mkdir -p "$ROOTFS/etc/postgresql-common"
  echo 'create_main_cluster = false' >"$ROOTFS/etc/postgresql-common/createcluster.conf"
  in_root apt-get update -qq
  # pgbackrest's postinst gives /var/{log,lib,spool}/pgbackrest and /etc/pgbackrest.conf to the
  # postgres user that exists by then; pgpilot passes its own --config and paths anyway.
  in_root apt-get install -y -qq --no-install-recommends postgresql-15 pgbackrest >/dev/null
  in_root apt-get clean
  # As in the official image: servers initialised from the sample listen on every address.
  sed -ri "s!^#?(listen_addresses)\s*=\s*\S+.*!\1 = '*'!" "$ROOTFS/usr/share/postgresql/15/postgresql.conf.sample"
  grep -q "^listen_addresses = '\*'" "$ROOTFS/usr/share/postgresql/15/postgresql.conf.sample"
}

# check_pgbackrest: the binary runs as the image's user (uid 999), with an empty environment.
check_pgbackrest() {
  local out
  out=$(chroot --userspec=999:999 "$ROOTFS" env -i HOME=/var/lib/postgresql PATH=/usr/bin:/bin \
    /usr/bin/pgbackrest version)
  echo "as uid 999: $out"
  [[ $out == "pgBackRest "* ]]
}

slim_down() {
  rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/* "$ROOTFS"/var/cache/debconf/*-old \
    "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/info/* \
    "$ROOTFS"/var/log/*.log "$ROOTFS"/var/log/apt/* "$ROOTFS/usr/sbin/policy-rc.d"
  # Message catalogues: the server logs in English.
  find "$ROOTFS/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
}

finish_layout() {
  # /run, not /var/run: var/run is an absolute symlink to /run, which outside the chroot is
  # the host's own /run.
  mkdir -p "$ROOTFS/run/postgresql" "$ROOTFS/var/lib/postgresql/data" "$ROOTFS/docker-entrypoint-initdb.d"
  chown -R 999:999 "$ROOTFS/run/postgresql" "$ROOTFS/var/lib/postgresql"
  chmod 3777 "$ROOTFS/run/postgresql"
  chmod 1777 "$ROOTFS/var/lib/postgresql/data"
  install -m 0755 "$HERE/docker-entrypoint.sh" "$ROOTFS/usr/local/bin/docker-entrypoint.sh"
  ln -sf usr/local/bin/docker-entrypoint.sh "$ROOTFS/docker-entrypoint.sh"
  # What the image was made of, for whoever inspects it.
  # shellcheck disable=SC2016 # dpkg-query's format, not shell
  in_root dpkg-query -W -f='${Package} ${Version}\n' postgresql-15 pgbackrest >"$ROOTFS/etc/pgpilot-image-packages"
}

bootstrap
install_postgres
slim_down
finish_layout
check_pgbackrest
