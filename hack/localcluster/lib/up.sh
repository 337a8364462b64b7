# Bringing the cluster up: the namespace, the daemons, the add-ons. Sourced by localcluster.
# shellcheck shell=bash

# render_node_configs: one node's containerd, CNI, kubelet and kube-proxy configuration under
# $STATE, for NODE_NAME, NODE_IP, POD_CIDR and CNI_BRIDGE (the worker renders its own with its
# settings, lib/worker.sh).
render_node_configs() {
  local etc=$STATE/etc host
  mkdir -p "$etc/cni" "$STATE/cni/ipam" "$STATE/logs/pods" "$STATE/kubelet"
  render "$LC_DIR/config/containerd.toml" "$etc/containerd.toml"
  for host in "${MIRRORED_REGISTRIES[@]}"; do
    mkdir -p "$etc/containerd/certs.d/$host"
    MIRRORED=$host render "$LC_DIR/config/hosts.toml" "$etc/containerd/certs.d/$host/hosts.toml"
  done
  render "$LC_DIR/config/cni.conflist" "$etc/cni/10-pgpilot.conflist"
  render "$LC_DIR/config/kubelet.yaml" "$etc/kubelet.yaml"
  render "$LC_DIR/config/kube-proxy.yaml" "$etc/kube-proxy.yaml"
}

render_configs() {
  local etc=$STATE/etc
  mkdir -p "$STATE/volumes" "$STATE/registry"
  render_node_configs
  render "$LC_DIR/config/registry.yml" "$etc/registry.yml"
  render "$LC_DIR/manifests/coredns.yaml" "$etc/coredns.yaml"
  render "$LC_DIR/manifests/local-path-storage.yaml" "$etc/local-path-storage.yaml"
}

# create_netns: the only change `up` makes to the host's network is /run/netns/$NETNS; every
# link, address, route, firewall rule and per-namespace sysctl is made inside it.
create_netns() {
  ip netns add "$NETNS"
  stat -Lc %i "$NETNS_PATH" >"$STATE/run/netns.inode"
  ip -n "$NETNS" link set lo up
  # The node's address needs a link. This kernel has no dummy driver, so a veth pair whose
  # peer stays inside the namespace too: a closed loop that leads nowhere.
  ip -n "$NETNS" link add "$NODE_LINK" type veth peer name "${NODE_LINK}p"
  ip -n "$NETNS" addr add "$NODE_IP/32" dev "$NODE_LINK"
  ip -n "$NETNS" link set "$NODE_LINK" up
  ip -n "$NETNS" link set "${NODE_LINK}p" up
  # Processes on the node's network (kubectl, the e2e suite) reach Services through
  # kube-proxy's DNAT, which needs a route for the Service range to exist at all.
  ip -n "$NETNS" route add "$SERVICE_CIDR" dev "$NODE_LINK"
  # Forwarding for the pod bridge, bridged traffic through iptables for Service DNAT. Both are
  # per-namespace: the host's own values are untouched.
  ns_exec sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1 \
    net.bridge.bridge-nf-call-ip6tables=1
  if [[ -n $(ip -n "$NETNS" route show default) || -n $(ip -n "$NETNS" -6 route show default) ]]; then
    die "namespace $NETNS has a default route"
  fi
}

start_containerd() {
  start_daemon containerd containerd --config "$STATE/etc/containerd.toml"
  wait_until containerd 30 "${CTR[@]}" version
  start_daemon registry docker-registry serve "$STATE/etc/registry.yml"
  wait_until registry 30 ns_exec curl -fsS --cacert "$PKI/ca.crt" "https://$REGISTRY_ADDR/v2/"
}

start_control_plane() {
  local k8s=${BIN_DIR[kubernetes]} pki=$STATE/pki kc=$STATE/kubeconfig
  start_daemon etcd "${BIN_DIR[etcd]}/etcd" --name "$NODE_NAME" --data-dir "$STATE/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster "$NODE_NAME=http://127.0.0.1:2380" --unsafe-no-fsync --log-level warn
  wait_until etcd 60 ns_exec curl -fsS http://127.0.0.1:2379/health
  start_daemon kube-apiserver "$k8s/kube-apiserver" \
    --etcd-servers=http://127.0.0.1:2379 --advertise-address="$NODE_IP" --secure-port=6443 \
    --service-cluster-ip-range="$SERVICE_CIDR" --allow-privileged=true \
    --client-ca-file="$pki/ca.crt" --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
    --kubelet-client-certificate="$pki/apiserver-kubelet-client.crt" --kubelet-client-key="$pki/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types=InternalIP,Hostname \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --requestheader-client-ca-file="$pki/front-proxy-ca.crt" --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --proxy-client-cert-file="$pki/front-proxy-client.crt" --proxy-client-key-file="$pki/front-proxy-client.key" \
    --profiling=false --v=1
  wait_until kube-apiserver 120 kubectl get --raw /readyz
  start_daemon kube-controller-manager "$k8s/kube-controller-manager" \
    --kubeconfig="$kc/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$kc/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$kc/controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --leader-elect=false --use-service-account-credentials=true \
    --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
    --cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" \
    --allocate-node-cidrs=true --cluster-cidr="$CLUSTER_CIDR" --node-cidr-mask-size=24 \
    --service-cluster-ip-range="$SERVICE_CIDR" --controllers='*,bootstrapsigner,tokencleaner' --v=1
  start_daemon kube-scheduler "${BIN_DIR[kubernetes-node]}/kube-scheduler" \
    --kubeconfig="$kc/scheduler.kubeconfig" --authentication-kubeconfig="$kc/scheduler.kubeconfig" \
    --authorization-kubeconfig="$kc/scheduler.kubeconfig" --bind-address=127.0.0.1 --leader-elect=false --v=1
}

start_node() {
  local node=${BIN_DIR[kubernetes-node]}
  start_daemon kubelet "$node/kubelet" --config="$STATE/etc/kubelet.yaml" \
    --kubeconfig="$STATE/kubeconfig/kubelet.kubeconfig" --root-dir="$STATE/kubelet" \
    --cert-dir="$STATE/kubelet/pki" --node-ip="$NODE_IP" --hostname-override="$NODE_NAME" --v=1
  start_daemon kube-proxy "$node/kube-proxy" --config="$STATE/etc/kube-proxy.yaml" --v=1
}

install_addons() {
  kubectl apply -f "$STATE/etc/coredns.yaml" -f "$STATE/etc/local-path-storage.yaml" >/dev/null
  kubectl -n kube-system rollout status deploy/coredns --timeout=180s >/dev/null
  kubectl -n local-path-storage rollout status deploy/local-path-provisioner --timeout=180s >/dev/null
}

up() {
  local start=$SECONDS
  if cluster_is_up; then
    log "the cluster is already up (localcluster status)"
    return
  fi
  install_packages
  build_components
  build_images
  if [[ -e $STATE ]] || netns_exists || worker_exists; then
    log "leftovers of an earlier cluster found; tearing them down first"
    down
  fi
  log "starting the cluster in network namespace $NETNS ($NODE_IP)"
  mkdir -p "$STATE/run" "$STATE/logs"
  snapshot_host "$STATE/baseline"
  make_pki
  render_configs
  create_netns
  start_containerd
  # The sandbox image must be there before kubelet starts its first pod; the others load while
  # the control plane boots.
  load_images pause
  load_images coredns local-path-provisioner busybox httpcheck versitygw "${POSTGRES_IMAGES[@]}" official-postgres prometheus >"$STATE/logs/load-images.log" 2>&1 &
  local loader=$!
  start_control_plane
  start_node
  wait_until "node $NODE_NAME Ready" 180 kubectl wait --for=condition=Ready "node/$NODE_NAME" --timeout=2s
  wait_until "default service account" 60 kubectl get serviceaccount default
  wait "$loader" || die "loading images failed: $(tail -5 "$STATE/logs/load-images.log")"
  install_addons
  touch "$STATE/run/up"
  log "cluster up in $((SECONDS - start))s; try: hack/localcluster/localcluster kubectl get pods -A"
}
