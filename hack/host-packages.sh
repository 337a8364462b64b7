#!/usr/bin/env bash
# The Debian packages `make test` needs on the host, installed when missing: PostgreSQL 15's
# server binaries and pgBackRest (the instance agent's tests run real servers), shellcheck
# (make lint-shell), prometheus for its promtool (the alert rules' unit tests). No service is
# started and no default PostgreSQL cluster is created: the tests start their own servers on
# loopback, and nothing may be left running.
set -euo pipefail

PACKAGES=(postgresql-15 pgbackrest shellcheck prometheus)

missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
((${#missing[@]} == 0)) && exit 0
if [[ $(id -u) != 0 ]]; then
  echo "host-packages: missing ${missing[*]}; install them as root: apt-get install --no-install-recommends ${missing[*]}" >&2
  exit 1
fi
echo "host-packages: installing ${missing[*]}" >&2
mkdir -p /etc/postgresql-common
echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.conf
guard=""
if [[ ! -e /usr/sbin/policy-rc.d ]]; then
  guard=/usr/sbin/policy-rc.d
  printf '#!/bin/sh\nexit 101\n' >"$guard" && chmod +x "$guard"
fi
trap '[[ -z $guard ]] || rm -f "$guard"' EXIT
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
