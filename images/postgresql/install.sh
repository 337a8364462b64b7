#!/usr/bin/env bash
# install.sh MAJOR [PACKAGE...]: makes the Debian root it runs in (a container build's, or a
# debootstrapped folder's under chroot) into pgpilot's PostgreSQL MAJOR image: the packages
# `majors` lists for MAJOR (or the PACKAGEs given: the local cluster's stand-in of a third-party
# image installs the server alone), the postgres user and group with uid/gid 999, no cluster created at install time, and
# the folders the instance agent writes to owned by that user. Run as root; only apt's
# configured sources are contacted.
set -euo pipefail

MAJOR=$1
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PACKAGES=("${@:2}")
((${#PACKAGES[@]} > 0)) ||
  read -r -a PACKAGES <<<"$(awk -v major="$MAJOR" '$1 == major { $1 = ""; $2 = ""; print }' "$HERE/majors")"
((${#PACKAGES[@]} > 0)) || { echo "install.sh: PostgreSQL $MAJOR is not in $HERE/majors" >&2; exit 1; }
export DEBIAN_FRONTEND=noninteractive

create_user() {
  # Fixed ids, created before the packages would pick dynamic ones: the operator's pods run as
  # 999 (runAsUser, fsGroup), as with the official image.
  getent group postgres >/dev/null || groupadd --system --gid 999 postgres
  getent passwd postgres >/dev/null ||
    useradd --system --uid 999 --gid postgres --home-dir /var/lib/postgresql --shell /usr/sbin/nologin postgres
}

install_packages() {
  mkdir -p /etc/postgresql-common
  echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.conf
  # No service may start while packages install (a chroot shares the host's init).
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null
  rm -f /usr/sbin/policy-rc.d
}

slim_down() {
  apt-get clean
  rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old /usr/share/doc/* \
    /usr/share/man/* /usr/share/info/* /var/log/*.log /var/log/apt/*
  # Message catalogues: the server logs in English.
  find /usr/share/locale -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
}

lay_out() {
  mkdir -p /run/postgresql /var/lib/postgresql/data
  chown -R postgres:postgres /run/postgresql /var/lib/postgresql
  chmod 3777 /run/postgresql
  # What the image was made of, for whoever inspects it (and the image's build inputs).
  # shellcheck disable=SC2016 # dpkg-query's format, not shell
  dpkg-query -W -f='${Package} ${Version}\n' "${PACKAGES[@]}" >/etc/pgpilot-image-packages
}

# check: the server and pgBackRest (when installed) run as the image's user with an empty
# environment.
check() {
  local as_postgres=(setpriv --reuid=999 --regid=999 --clear-groups env -i HOME=/var/lib/postgresql PATH=/usr/bin:/bin)
  "${as_postgres[@]}" "/usr/lib/postgresql/$MAJOR/bin/postgres" --version
  if [[ " ${PACKAGES[*]} " == *" pgbackrest "* ]]; then
    "${as_postgres[@]}" pgbackrest version
  fi
}

create_user
install_packages
slim_down
lay_out
check
