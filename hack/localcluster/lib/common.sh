# Settings and helpers shared by every localcluster command. Sourced, never run.
# shellcheck shell=bash disable=SC2034 # the settings are used by the other parts

LC_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REPO_ROOT=$(cd "$LC_DIR/../.." && pwd)

# Builds and image tarballs are cached outside the clone (like hack/toolchain.sh), so fresh
# clones and CI reuse them. The running cluster's state lives in LOCALCLUSTER_STATE and is
# removed by `down`.
CACHE_ROOT=${PGPILOT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pgpilot}
STATE=${LOCALCLUSTER_STATE:-/var/lib/pgpilot-localcluster}
IMAGE_CACHE=$CACHE_ROOT/localcluster-images
# `down` deletes STATE: refuse anything that is not a dedicated folder.
if [[ $STATE != /*/* || $STATE == *..* || $STATE == "$HOME" ]]; then
  echo "localcluster: LOCALCLUSTER_STATE must be a dedicated absolute folder, not '$STATE'" >&2
  exit 2
fi

# Pinned versions. Kubernetes and etcd come from hack/toolchain.sh, which pins them.
COREDNS_VERSION=v1.15.0
LOCAL_PATH_VERSION=v0.0.30

# The whole cluster lives in this network namespace. The node's address is on a veth pair
# whose two ends are both inside it, and there is no default route: nothing reaches the host
# or beyond. 198.51.100.0/24 is TEST-NET-2 (RFC 5737), never routed anywhere.
NETNS=pgpilot-node
NETNS_PATH=/run/netns/$NETNS
NODE_NAME=pgpilot-node
NODE_IP=198.51.100.2
NODE_LINK=pgnode0
CLUSTER_CIDR=10.244.0.0/16
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/16
API_SERVICE_IP=10.96.0.1
DNS_SERVICE_IP=10.96.0.10
CNI_BRIDGE=pgpilot0

# Images are named after the in-namespace registry. The name never needs to resolve: containerd
# maps it to the registry's address (config/hosts.toml) and CoreDNS answers it for pods.
REGISTRY_NAME=registry.pgpilot.test
REGISTRY_HOST=$REGISTRY_NAME:5000
REGISTRY_ADDR=$NODE_IP:5000
# Registries whose images containerd pulls from the in-namespace registry (config/hosts.toml).
MIRRORED_REGISTRIES=("$REGISTRY_HOST" "$REGISTRY_ADDR" ghcr.io quay.io docker.io registry.access.redhat.com)

export KUBECONFIG=$STATE/kubeconfig/admin.kubeconfig
export KUBECACHEDIR=$STATE/kube-cache   # keep kubectl's discovery cache out of ~/.kube
export GOFLAGS=-buildvcs=false GOTOOLCHAIN=local
export LC_ALL=C  # stable sort order for the host snapshots
# containerd finds runc and its shim, kube-proxy iptables and conntrack, in the sbin folders.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH

CTR=(ctr --address "$STATE/run/containerd.sock" --namespace k8s.io)

log() { printf 'localcluster: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ns_exec runs a command in the node's network namespace but stays in the host's mount
# namespace. `ip netns exec` would also unshare the mount namespace and remount /sys, hiding
# the cgroup v1 hierarchies from kubelet and every volume mount from containerd.
ns_exec() { nsenter --net="$NETNS_PATH" -- "$@"; }

netns_exists() { [[ -e $NETNS_PATH ]]; }

in_netns() {
  netns_exists && [[ $(stat -Lc %i /proc/self/ns/net) == "$(stat -Lc %i "$NETNS_PATH")" ]]
}

# kubectl is the cached kubectl against the local cluster, from wherever it is called.
kubectl() {
  local bin
  bin="$(tool_dir kubernetes)/kubectl"
  if in_netns; then "$bin" "$@"; else ns_exec "$bin" "$@"; fi
}

# tool_dir NAME prints the cache folder of a tool built by hack/toolchain.sh, building it once.
tool_dir() { "$REPO_ROOT/hack/toolchain.sh" "$1"; }

cluster_is_up() {
  netns_exists && [[ -f $STATE/run/up ]] && kubectl get --raw /readyz >/dev/null 2>&1
}

# wait_until DESCRIPTION SECONDS COMMAND...: polls COMMAND until it succeeds.
wait_until() {
  local what=$1 timeout=$2 start=$SECONDS
  shift 2
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS - start > timeout)); then
      log "timed out after ${timeout}s waiting for $what"
      return 1
    fi
    sleep 0.3
  done
  log "$what ready after $((SECONDS - start))s"
}

# start_daemon NAME COMMAND...: runs COMMAND inside the namespace (DAEMON_NETNS, by default the
# node's) in its own session, so that it outlives the calling shell and no terminal signal
# reaches it; records its PID.
start_daemon() {
  local name=$1 pidfile=$STATE/run/$1.pid
  shift
  if [[ -f $pidfile ]] && kill -0 "$(<"$pidfile")" 2>/dev/null; then
    log "$name already running"
    return
  fi
  # setsid, nohup and nsenter each exec the next, so $! is the daemon's own PID.
  setsid nohup nsenter --net="${DAEMON_NETNS:-$NETNS_PATH}" -- "$@" >"$STATE/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$pidfile"
}

# stop_daemons [-g GRACE_SECONDS] NAME...: SIGTERM to all at once, then SIGKILL to whichever is
# still there after the grace period (default 10s).
stop_daemons() {
  local grace=10 name pid i
  local -A pids=()
  if [[ $1 == -g ]]; then grace=$2; shift 2; fi
  for name in "$@"; do
    [[ -f $STATE/run/$name.pid ]] || continue
    pid=$(<"$STATE/run/$name.pid")
    rm -f "$STATE/run/$name.pid"
    if kill "$pid" 2>/dev/null; then pids[$name]=$pid; fi
  done
  for ((i = 0; i < grace * 10 && ${#pids[@]} > 0; i++)); do
    for name in "${!pids[@]}"; do
      kill -0 "${pids[$name]}" 2>/dev/null || unset "pids[$name]"
    done
    ((${#pids[@]} == 0)) || sleep 0.1
  done
  for name in "${!pids[@]}"; do
    log "$name ignored SIGTERM for ${grace}s; killing it"
    kill -9 "${pids[$name]}" 2>/dev/null || true
  done
}

daemon_running() {
  [[ -f $STATE/run/$1.pid ]] && kill -0 "$(<"$STATE/run/$1.pid")" 2>/dev/null
}

# render TEMPLATE OUTPUT: substitutes @NAME@ placeholders with the settings above.
render() {
  sed -e "s|@STATE@|$STATE|g" -e "s|@NODE_IP@|$NODE_IP|g" -e "s|@NODE_NAME@|$NODE_NAME|g" \
    -e "s|@CLUSTER_CIDR@|$CLUSTER_CIDR|g" -e "s|@POD_CIDR@|$POD_CIDR|g" \
    -e "s|@SERVICE_CIDR@|$SERVICE_CIDR|g" -e "s|@DNS_SERVICE_IP@|$DNS_SERVICE_IP|g" \
    -e "s|@CNI_BRIDGE@|$CNI_BRIDGE|g" -e "s|@REGISTRY_NAME@|$REGISTRY_NAME|g" \
    -e "s|@REGISTRY_HOST@|$REGISTRY_HOST|g" -e "s|@REGISTRY_ADDR@|$REGISTRY_ADDR|g" \
    -e "s|@IMAGE_PAUSE@|${IMAGE_REF[pause]:-}|g" -e "s|@IMAGE_COREDNS@|${IMAGE_REF[coredns]:-}|g" \
    -e "s|@IMAGE_LOCAL_PATH@|${IMAGE_REF[local-path-provisioner]:-}|g" \
    -e "s|@IMAGE_BUSYBOX@|${IMAGE_REF[busybox]:-}|g" -e "s|@MIRRORED@|${MIRRORED:-}|g" \
    "$1" >"$2"
}

# shellcheck source=../../lib/build-once.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../lib/build-once.sh"

# hash_inputs PATH...: a short content hash of files and folders, to key caches by their inputs.
hash_inputs() {
  local p
  for p in "$@"; do
    if [[ -d $p ]]; then
      (cd "$p" && find . -type f ! -name '*.partial*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
    else
      sha256sum "$p"
    fi
  done | sed 's|  /.*/|  |' | sha256sum | cut -c1-16
}
