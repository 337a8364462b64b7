# Host packages and component builds. Sourced by localcluster.
# shellcheck shell=bash

# Debian packages the cluster runs on or builds images with.
HOST_PACKAGES=(
  containerd runc containernetworking-plugins # container runtime and pod networking
  iptables conntrack nftables                 # kube-proxy's rules; nft to check the host's
  umoci skopeo docker-registry                # offline images and the in-namespace registry
  debootstrap busybox-static                  # PostgreSQL and helper image root filesystems
  openssl iproute2 util-linux                 # PKI, the namespace, nsenter
)

install_packages() {
  local missing=() pkg guard=""
  for pkg in "${HOST_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  ((${#missing[@]} == 0)) && return
  log "installing Debian packages: ${missing[*]}"
  # Package scripts must not start containerd or the registry on the host: a policy-rc.d
  # that denies every service start, unless the machine has one already.
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    guard=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\nexit 101\n' >"$guard" && chmod +x "$guard"
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
    { [[ -n $guard ]] && rm -f "$guard"; die "apt-get install failed"; }
  [[ -n $guard ]] && rm -f "$guard"
  return 0
}

GO_BUILD=(env CGO_ENABLED=0 go build -ldflags "-s -w") # no -trimpath: see hack/toolchain.sh

build_coredns() { (cd "$LC_DIR/modules/coredns" && "${GO_BUILD[@]}" -o "$1/coredns" .); }

build_local_path() {
  (cd "$LC_DIR/modules/local-path-provisioner" &&
    "${GO_BUILD[@]}" -o "$1/local-path-provisioner" github.com/rancher/local-path-provisioner)
}

build_src() { (cd "$LC_DIR/src" && "${GO_BUILD[@]}" -o "$1/" ./pause ./httpcheck); }

# Cache folders of every component, filled by build_components.
declare -A BIN_DIR

build_components() {
  BIN_DIR[kubernetes]=$(tool_dir kubernetes)
  BIN_DIR[kubernetes-node]=$(tool_dir kubernetes-node)
  BIN_DIR[etcd]=$(tool_dir etcd)
  BIN_DIR[versitygw]=$(tool_dir versitygw)  # the S3 server of `localcluster s3`
  BIN_DIR[prometheus]=$(tool_dir prometheus) # the Prometheus server of the e2e monitoring specs
  BIN_DIR[coredns]=$(build_once coredns "$COREDNS_VERSION-$(hash_inputs "$LC_DIR/modules/coredns")" build_coredns)
  BIN_DIR[local-path]=$(build_once local-path-provisioner \
    "$LOCAL_PATH_VERSION-$(hash_inputs "$LC_DIR/modules/local-path-provisioner")" build_local_path)
  BIN_DIR[src]=$(build_once localcluster-src "$(hash_inputs "$LC_DIR/src")" build_src)
}

# bin NAME prints the path of a built binary.
bin() {
  local dir
  for dir in "${BIN_DIR[@]}"; do
    [[ -x $dir/$1 ]] && { echo "$dir/$1"; return; }
  done
  die "no built binary $1 (run: localcluster build)"
}
