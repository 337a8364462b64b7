# build_once NAME KEY FUNCTION: runs FUNCTION OUTDIR unless $CACHE_ROOT/NAME-KEY is complete,
# and prints the folder. A build goes to a temporary folder first, so an interrupted one is
# never taken for a finished one. Shared by hack/toolchain.sh and hack/localcluster; the caller
# defines CACHE_ROOT and log.
# shellcheck shell=bash

build_once() {
  local name=$1 key=$2 fn=$3
  local out="$CACHE_ROOT/$name-$key"
  if [[ ! -f "$out/.complete" ]]; then
    log "building $name $key into $out (slow the first time; cached afterwards)"
    local start=$SECONDS tmp="$out.partial.$$"
    rm -rf "$tmp" && mkdir -p "$tmp"
    "$fn" "$tmp"
    rm -rf "$out" && mv "$tmp" "$out" && touch "$out/.complete"
    log "built $name $key in $((SECONDS - start))s"
  fi
  echo "$out"
}
