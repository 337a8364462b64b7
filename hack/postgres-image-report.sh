#!/usr/bin/env bash
# postgres-image-report.sh: a Markdown table of pgpilot's PostgreSQL images as this machine last
# built them (docs/benchmarks.md takes it as it is): the versions inside, the root filesystem's
# size, the image's size as a tarball and compressed (gzip -6, as registries store layers), and
# the time the root took to build. Reads the caches of hack/postgres-rootfs.sh and the local
# cluster; builds nothing.
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${PGPILOT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pgpilot}
mib() { awk -v b="$1" 'BEGIN { printf "%.0f MiB", b / 1048576 }'; }

echo "| image | server, pgBackRest | root filesystem | image tarball | compressed (gzip -6) | root built in |"
echo "|---|---|---|---|---|---|"
# shellcheck disable=SC2013 # one major per line, no spaces
for major in $(awk '$1 ~ /^[0-9]+$/ { print $1 }' "$REPO_ROOT/images/postgresql/majors"); do
  root=$(find "$CACHE/postgresql-rootfs" -maxdepth 1 -name "$major-????????????" -printf '%T@ %p\n' | sort -rn | head -1 | cut -d' ' -f2-)
  tar=$(find "$CACHE/localcluster-images" -maxdepth 1 -name "postgresql-$major-????????????.tar" -printf '%T@ %p\n' | sort -rn | head -1 | cut -d' ' -f2-)
  [[ -n $root && -n $tar ]] || { echo "postgres-image-report: PostgreSQL $major has not been built here (make test or make demo builds it)" >&2; exit 1; }
  versions=$(awk -v major="$major" '$1 == "postgresql-" major { server = $2 } $1 == "pgbackrest" { backrest = $2 }
    END { print server ", " backrest }' "$root/etc/pgpilot-image-packages")
  # shellcheck disable=SC2016 # backquotes are Markdown
  printf '| `ghcr.io/pgpilot/postgresql:%s` | %s | %s | %s | %s | %s s |\n' "$major" "$versions" \
    "$(mib "$(du -sb "$root" | cut -f1)")" "$(mib "$(stat -c %s "$tar")")" "$(mib "$(gzip -6 -c "$tar" | wc -c)")" \
    "$(cat "$root.build-seconds" 2>/dev/null || echo '?')"
done
