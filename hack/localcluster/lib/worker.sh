# A second node, the worker: its own network namespace, containerd, kubelet and kube-proxy, on
# the same machine, joined to the control plane through a veth pair. It exists so that a node
# can be lost (`worker stop` is a power cut) while the control plane lives on. Sourced by
# localcluster.
# shellcheck shell=bash

WORKER_NETNS=pgpilot-worker
WORKER_NETNS_PATH=/run/netns/$WORKER_NETNS
WORKER_NAME=pgpilot-worker
WORKER_IP=198.51.100.3
WORKER_POD_CIDR=10.244.1.0/24
WORKER_BRIDGE=pgpilot1
# The link between the two namespaces: pgwork0 on the node's side, pgwork1 on the worker's.
WORKER_LINK=pgwork
WORKER_STATE=$STATE/worker
# kubelet's cgroups live under their own root, apart from the first node's /kubepods: each
# kubelet removes the pod cgroups it does not know.
WORKER_CGROUP=pgpilot-worker
# Only pods that tolerate this taint run on the worker; the rest of the cluster is unchanged.
WORKER_TAINT=pgpilot.test/worker
WORKER_DAEMONS=(worker-containerd worker-kubelet worker-kube-proxy)
WORKER_CTR=(ctr --address "$WORKER_STATE/run/containerd.sock" --namespace k8s.io)

worker_exists() { [[ -e $WORKER_NETNS_PATH ]]; }

# worker_node_configs: render_node_configs with the worker's name, address, pod range and
# state folder.
worker_node_configs() {
  # shellcheck disable=SC2034 # read by render
  local STATE=$WORKER_STATE NODE_NAME=$WORKER_NAME NODE_IP=$WORKER_IP POD_CIDR=$WORKER_POD_CIDR
  # shellcheck disable=SC2034 # read by render
  local CNI_BRIDGE=$WORKER_BRIDGE
  render_node_configs
}

# worker_configs: the worker's configuration; its state links to the node's PKI and kubeconfigs.
worker_configs() {
  mkdir -p "$WORKER_STATE/run"
  ln -sfn "$STATE/pki" "$WORKER_STATE/pki"
  ln -sfn "$STATE/kubeconfig" "$WORKER_STATE/kubeconfig"
  worker_node_configs
  cat >>"$WORKER_STATE/etc/kubelet.yaml" <<EOF
cgroupRoot: /$WORKER_CGROUP
registerWithTaints: [{key: $WORKER_TAINT, value: "true", effect: NoSchedule}]
EOF
  new_cert kubelet-worker ca "/O=system:nodes/CN=system:node:$WORKER_NAME"
  rm -f "$PKI"/*.srl
  kubeconfig kubelet-worker kubelet-worker
}

# worker_netns: the worker's namespace, joined to the node's by one veth pair; each side routes
# the other's address and pod range through it. Still no default route anywhere.
worker_netns() {
  ip netns add "$WORKER_NETNS"
  stat -Lc %i "$WORKER_NETNS_PATH" >"$STATE/run/worker-netns.inode"
  ip -n "$WORKER_NETNS" link set lo up
  ip -n "$NETNS" link add "${WORKER_LINK}0" type veth peer name "${WORKER_LINK}1" netns "$WORKER_NETNS"
  ip -n "$NETNS" link set "${WORKER_LINK}0" up
  ip -n "$NETNS" route add "$WORKER_IP/32" dev "${WORKER_LINK}0"
  ip -n "$NETNS" route add "$WORKER_POD_CIDR" via "$WORKER_IP" dev "${WORKER_LINK}0"
  ip -n "$WORKER_NETNS" addr add "$WORKER_IP/32" dev "${WORKER_LINK}1"
  ip -n "$WORKER_NETNS" link set "${WORKER_LINK}1" up
  ip -n "$WORKER_NETNS" route add "$NODE_IP/32" dev "${WORKER_LINK}1"
  ip -n "$WORKER_NETNS" route add "$POD_CIDR" via "$NODE_IP" dev "${WORKER_LINK}1"
  ip -n "$WORKER_NETNS" route add "$SERVICE_CIDR" dev "${WORKER_LINK}1"
  nsenter --net="$WORKER_NETNS_PATH" -- sysctl -qw net.ipv4.ip_forward=1 \
    net.bridge.bridge-nf-call-iptables=1 net.bridge.bridge-nf-call-ip6tables=1
  if [[ -n $(ip -n "$WORKER_NETNS" route show default) ]]; then
    die "namespace $WORKER_NETNS has a default route"
  fi
}

# worker_cgroups: kubelet insists that its cgroup root exists in every hierarchy.
worker_cgroups() {
  local hierarchy
  for hierarchy in /sys/fs/cgroup/*/; do
    [[ -L ${hierarchy%/} ]] || mkdir -p "$hierarchy$WORKER_CGROUP"
  done
}

worker_start_containerd() {
  DAEMON_NETNS=$WORKER_NETNS_PATH start_daemon worker-containerd containerd --config "$WORKER_STATE/etc/containerd.toml"
  wait_until "worker containerd" 30 "${WORKER_CTR[@]}" version
}

worker_start_node() {
  [[ -n ${BIN_DIR[kubernetes-node]:-} ]] || build_components >/dev/null
  local node=${BIN_DIR[kubernetes-node]}
  worker_cgroups
  DAEMON_NETNS=$WORKER_NETNS_PATH start_daemon worker-kubelet "$node/kubelet" --config="$WORKER_STATE/etc/kubelet.yaml" \
    --kubeconfig="$STATE/kubeconfig/kubelet-worker.kubeconfig" --root-dir="$WORKER_STATE/kubelet" \
    --cert-dir="$WORKER_STATE/kubelet/pki" --node-ip="$WORKER_IP" --hostname-override="$WORKER_NAME" --v=1
  DAEMON_NETNS=$WORKER_NETNS_PATH start_daemon worker-kube-proxy "$node/kube-proxy" --config="$WORKER_STATE/etc/kube-proxy.yaml" --v=1
  wait_until "node $WORKER_NAME Ready" 120 kubectl wait --for=condition=Ready "node/$WORKER_NAME" --timeout=2s
}

# worker_import NAME: the cached image NAME into the worker's containerd, under its upstream
# name too when it has one (pgpilot's PostgreSQL images).
worker_import() {
  "${WORKER_CTR[@]}" images import "${IMAGE_TAR[$1]}" >/dev/null
  [[ -z ${IMAGE_ALIAS[$1]:-} ]] || "${WORKER_CTR[@]}" images tag --force "${IMAGE_REF[$1]}" "${IMAGE_ALIAS[$1]}" >/dev/null
}

# worker_add: the second node, Ready, with the images pods on it need already imported.
worker_add() {
  cluster_is_up || die "the cluster is not up (localcluster up)"
  if worker_exists; then
    log "the worker is already there"
    return
  fi
  local start=$SECONDS name pids=() failed=0
  build_components >/dev/null
  build_images
  worker_configs
  worker_netns
  worker_start_containerd
  for name in pause busybox "${POSTGRES_IMAGES[@]}"; do
    worker_import "$name" &
    pids+=($!)
  done
  for name in "${pids[@]}"; do wait "$name" || failed=1; done
  ((failed == 0)) || die "importing images into the worker's containerd failed"
  worker_start_node
  kubectl label --overwrite "node/$WORKER_NAME" "$WORKER_TAINT=true" >/dev/null
  log "worker $WORKER_NAME ($WORKER_IP) up in $((SECONDS - start))s; pods need a toleration of $WORKER_TAINT"
}

# worker_processes: the worker's daemons and shims (in its namespace) and its containers (in
# its cgroups).
worker_processes() {
  local p line
  for p in /proc/[0-9]*; do
    # Builtins only: a fork per process made one pass over a busy host's thousand processes
    # take seconds, and the power cut late by as much.
    if worker_exists && [[ $p/ns/net -ef $WORKER_NETNS_PATH ]]; then
      echo "${p#/proc/}"
      continue
    fi
    { while IFS= read -r line; do
      if [[ $line == *":/$WORKER_CGROUP/"* ]]; then
        echo "${p#/proc/}"
        break
      fi
    done <"$p/cgroup"; } 2>/dev/null || true
  done
}

# worker_stop: a power cut. Every process of the worker is killed at once, without a shutdown,
# and what a reboot loses (the runtime's state, mounts) goes; the disks (volumes, images) stay.
worker_stop() {
  worker_exists || die "there is no worker (localcluster worker add)"
  local i pids=() name
  for ((i = 0; i < 20; i++)); do
    mapfile -t pids < <(worker_processes)
    ((${#pids[@]} == 0)) && break
    kill -9 "${pids[@]}" 2>/dev/null || true
    sleep 0.2
  done
  ((${#pids[@]} == 0)) || die "worker processes survive SIGKILL: ${pids[*]}"
  for name in "${WORKER_DAEMONS[@]}"; do rm -f "$STATE/run/$name.pid"; done
  awk -v dir="$WORKER_STATE/" 'index($5, dir) == 1 {print $5}' /proc/self/mountinfo | sort -r |
    while read -r mnt; do umount "$mnt" 2>/dev/null || umount -l "$mnt"; done
  rm -rf "$WORKER_STATE/containerd/state" "$WORKER_STATE/runc" "$WORKER_STATE/run"
  mkdir -p "$WORKER_STATE/run"
  log "worker $WORKER_NAME powered off"
}

# worker_start: the worker boots again; kubelet restarts the pods bound to it.
worker_start() {
  worker_exists || die "there is no worker (localcluster worker add)"
  worker_start_containerd
  worker_start_node
  log "worker $WORKER_NAME powered on"
}

# worker_down: part of `down`, before the node's own daemons stop.
worker_down() {
  stop_daemons -g 20 worker-kubelet
  stop_containers worker-containerd WORKER_CTR
  stop_daemons worker-kube-proxy worker-containerd
  local pids=()
  mapfile -t pids < <(worker_processes)
  ((${#pids[@]} == 0)) || kill -9 "${pids[@]}" 2>/dev/null || true
  if worker_exists; then ip netns del "$WORKER_NETNS" || log "could not delete namespace $WORKER_NETNS"; fi
}

worker() {
  local cmd=${1:-}
  case "$cmd" in
    add) worker_add ;;
    stop) worker_stop ;;
    start) worker_start ;;
    *) die "usage: localcluster worker add|stop|start" ;;
  esac
}
