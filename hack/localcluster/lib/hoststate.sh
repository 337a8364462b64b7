# What the local cluster could leave behind on the host, snapshotted before `up` and compared
# after `down`: links, addresses, routes, policy rules, iptables/ip6tables/nft rulesets, mounts,
# sysctls, cgroups, the places kubelet and containerd write to by default, and processes that
# belong to the cluster. Sourced.
# shellcheck shell=bash

# Sysctls that change by themselves (counters, random values).
VOLATILE_SYSCTLS='^(fs\.(dentry-state|file-nr|inode-nr|inode-state|aio-nr|quota\.)|kernel\.(ns_last_pid|random\.|pty\.nr)|net\.netfilter\.nf_conntrack_count)'
# Cgroups this machine's own process accounting creates and removes with every command.
FOREIGN_CGROUPS='/process_api(/|$)'
# Where kubelet, containerd, libcni and `ip netns` write by default, whatever their
# configuration says. Only these are compared, so a package installed meanwhile is no
# difference.
DEFAULT_LOCATIONS=(/var/lib/kubelet /var/lib/cni /var/lib/containerd /run/containerd /run/nri
  /etc/cni /opt/cni /opt/containerd /var/log/pods /var/log/containers /run/netns)

# snapshot_host DIR: writes one file per aspect of the host into DIR.
snapshot_host() {
  local dir=$1
  mkdir -p "$dir"
  ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | sort >"$dir/links"
  ip -o addr show | awk '{print $2, $3, $4}' | sort >"$dir/addresses"
  { ip route show table all; ip -6 route show table all; } 2>/dev/null | sort >"$dir/routes"
  { ip rule show; ip -6 rule show; } 2>/dev/null >"$dir/rules"
  ip netns list 2>/dev/null | sort >"$dir/netns"
  rulesets >"$dir/firewall"
  awk '{print $5, $(NF-2)}' /proc/self/mountinfo | sort >"$dir/mounts"
  sysctl -a 2>/dev/null | grep -Ev "$VOLATILE_SYSCTLS" | sort >"$dir/sysctls"
  find /sys/fs/cgroup -mindepth 1 -type d 2>/dev/null | grep -Ev "$FOREIGN_CGROUPS" | sort >"$dir/cgroups"
  local path
  for path in "${DEFAULT_LOCATIONS[@]}"; do
    if [[ -e $path ]]; then echo "$path"; find "$path/" -mindepth 1 -maxdepth 1 2>/dev/null; fi
  done | sort >"$dir/files"
  cluster_processes >"$dir/processes"
}

# rulesets: the root namespace's firewall, without counters.
rulesets() {
  local cmd
  for cmd in iptables-save ip6tables-save; do
    if command -v "$cmd" >/dev/null; then
      "$cmd" 2>/dev/null | { grep -v '^#' || true; } | sed 's/\[[0-9]*:[0-9]*\]//'
    fi
  done
  if command -v nft >/dev/null; then nft list ruleset 2>/dev/null || true; fi
}

# cluster_processes: processes in the nodes' namespaces, in kubelets' pod cgroups, running from
# the state folder, or running the container runtime and registry binaries.
cluster_processes() {
  local node_ns="" worker_ns="" p exe net
  netns_exists && node_ns=$(stat -Lc %i "$NETNS_PATH")
  [[ -z $node_ns && -f $STATE/run/netns.inode ]] && node_ns=$(<"$STATE/run/netns.inode")
  worker_exists && worker_ns=$(stat -Lc %i "$WORKER_NETNS_PATH")
  [[ -z $worker_ns && -f $STATE/run/worker-netns.inode ]] && worker_ns=$(<"$STATE/run/worker-netns.inode")
  for p in /proc/[0-9]*; do
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    net=$(stat -Lc %i "$p/ns/net" 2>/dev/null) || continue
    if [[ -n $node_ns && $net == "$node_ns" ]] || [[ -n $worker_ns && $net == "$worker_ns" ]] ||
      grep -Eq ":/(kubepods|$WORKER_CGROUP)(/|$)" "$p/cgroup" 2>/dev/null ||
      [[ $exe == "$STATE"/* || $exe =~ /(containerd|containerd-shim-runc-v2|runc|docker-registry)$ ]]; then
      echo "${p#/proc/} $exe"
    fi
  done
}

# compare_host BEFORE AFTER: prints the differences; fails when there are any.
compare_host() {
  local before=$1 after=$2 aspect clean=0
  for aspect in links addresses routes rules netns firewall mounts sysctls cgroups files; do
    if ! diff -q "$before/$aspect" "$after/$aspect" >/dev/null; then
      log "host $aspect differ from before up:"
      diff "$before/$aspect" "$after/$aspect" | grep '^[<>]' | head -20 >&2
      clean=1
    fi
  done
  if [[ -s $after/processes ]]; then
    log "cluster processes still running:"
    cat "$after/processes" >&2
    clean=1
  fi
  return $clean
}

# Host-wide sysctls kubelet sets at start (its container manager's kernel defaults).
KUBELET_SYSCTLS='^(vm\.(overcommit_memory|panic_on_oom)|kernel\.(panic|panic_on_oops|keys\.root_max(keys|bytes))) '

# restore_sysctls BEFORE: puts back the host-wide sysctls kubelet changed. The namespace's own
# (ip_forward, bridge-nf-call-*, route_localnet) went away with it; any other change is left
# for compare_host to report rather than silently undone.
restore_sysctls() {
  local key value line
  while IFS= read -r line; do
    key=${line%% = *}
    value=${line#* = }
    sysctl -qw "$key=$value" 2>/dev/null || log "could not restore sysctl $key"
  done < <(comm -23 "$1/sysctls" <(sysctl -a 2>/dev/null | grep -Ev "$VOLATILE_SYSCTLS" | sort) |
    grep -E "$KUBELET_SYSCTLS")
}
