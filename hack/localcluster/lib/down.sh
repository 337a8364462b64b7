# Tearing the cluster down and putting the host back as `up` found it. Sourced by localcluster.
# Every step tolerates a half-started or already half-removed cluster, so `down` can always
# be re-run.
# shellcheck shell=bash

LAST_RUN=$CACHE_ROOT/localcluster-last-run

# stop_containers DAEMON CTR: every container and sandbox, killed through containerd (the
# daemon named DAEMON; CTR names the array holding its ctr command) while it still runs.
# Their network namespaces and the pod bridge go away with the node's namespace, so no CNI DEL
# is needed.
stop_containers() {
  daemon_running "$1" || return 0
  local -n ctr=$2
  local id i
  for id in $("${ctr[@]}" tasks ls -q 2>/dev/null); do
    "${ctr[@]}" tasks kill --all --signal SIGKILL "$id" >/dev/null 2>&1 || true
  done
  for ((i = 0; i < 25; i++)); do
    "${ctr[@]}" tasks ls 2>/dev/null | grep -q RUNNING || break
    sleep 0.2
  done
  for id in $("${ctr[@]}" tasks ls -q 2>/dev/null); do
    "${ctr[@]}" tasks delete --force "$id" >/dev/null 2>&1 || true
  done
  for id in $("${ctr[@]}" containers ls -q 2>/dev/null); do
    "${ctr[@]}" containers delete "$id" >/dev/null 2>&1 || true
  done
}

# kill_leftovers: anything of the cluster still running (shims, orphaned container processes).
kill_leftovers() {
  local i pids=()
  for ((i = 0; i < 10; i++)); do
    mapfile -t pids < <(cluster_processes | awk -v self=$$ '$1 != self {print $1}')
    ((${#pids[@]} == 0)) && return 0
    kill -9 "${pids[@]}" 2>/dev/null || true
    sleep 0.3
  done
  log "processes survive SIGKILL: $(cluster_processes | tr '\n' ' ')"
}

# unmount_state: volumes, overlay root filesystems, sandbox shm and network namespace mounts,
# kubelet's shared bind mount of its root: all under $STATE, deepest first. The daemons ran in
# the host's mount namespace, so their mounts are visible here.
unmount_state() {
  local mnt
  awk -v state="$STATE" 'index($5, state) == 1 {print $5}' /proc/self/mountinfo | sort -r |
    while read -r mnt; do
      umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || log "could not unmount $mnt"
    done
}

# remove_cgroups BASELINE: cgroups created since `up` (kubelet's /kubepods tree in every
# hierarchy), deepest first. rmdir only ever removes an empty cgroup.
remove_cgroups() {
  local cg
  find /sys/fs/cgroup -mindepth 1 -type d 2>/dev/null | grep -Ev "$FOREIGN_CGROUPS" | sort |
    comm -13 "$1/cgroups" - | sort -r | while read -r cg; do
      rmdir "$cg" 2>/dev/null || log "could not remove cgroup $cg"
    done
}

# remove_default_locations BASELINE: the default folders that did not exist before `up`.
remove_default_locations() {
  local path
  for path in "${DEFAULT_LOCATIONS[@]}"; do
    [[ -e $path ]] || continue
    grep -qxF "$path" "$1/files" && continue
    # `ip netns add` bind-mounts /run/netns onto itself the first time; `ip netns del` keeps it.
    if awk -v p="$path" '$5 == p {found = 1} END {exit !found}' /proc/self/mountinfo &&
      ! grep -q "^$path " "$1/mounts"; then
      umount "$path" 2>/dev/null || log "could not unmount $path"
    fi
    if [[ $path == /run/netns ]]; then
      rmdir "$path" 2>/dev/null || log "$path is not empty: another namespace was added meanwhile"
    else
      rm -rf "$path"
    fi
  done
}

down() {
  local start=$SECONDS baseline=$STATE/baseline clean=0
  if [[ ! -e $STATE ]] && ! netns_exists && ! worker_exists; then
    log "no local cluster to tear down"
    return 0
  fi
  log "tearing the cluster down"
  rm -f "$STATE/run/up"
  # Nothing may re-create pods while they are being removed.
  stop_daemons -g 20 kube-scheduler kube-controller-manager kubelet
  worker_down
  stop_containers containerd CTR
  log "containers stopped after $((SECONDS - start))s"
  # The API server before etcd: without etcd its shutdown hangs on reconnecting.
  stop_daemons kube-proxy kube-apiserver
  stop_daemons etcd registry containerd
  kill_leftovers
  unmount_state
  log "daemons stopped and state unmounted after $((SECONDS - start))s"
  # Deleting the namespace takes its links, the pod bridge, routes, iptables and nft rules,
  # conntrack entries and per-namespace sysctls with it.
  if netns_exists; then ip netns del "$NETNS" || log "could not delete namespace $NETNS"; fi
  if [[ -f $baseline/cgroups ]]; then
    remove_cgroups "$baseline"
    restore_sysctls "$baseline"
    remove_default_locations "$baseline"
    snapshot_host "$STATE/after"
    compare_host "$baseline" "$STATE/after" || clean=1
  else
    log "no host snapshot from before up: cannot check that the host is as it was"
    clean=1
  fi
  # Keep the logs and snapshots of the last run for a post-mortem; they are not machine state.
  log "host compared with its state before up after $((SECONDS - start))s"
  rm -rf "$LAST_RUN" && mkdir -p "$LAST_RUN"
  cp -r "$STATE/logs" "$STATE/baseline" "$STATE/after" "$LAST_RUN/" 2>/dev/null || true
  rm -rf "$STATE"
  if ((clean == 0)); then
    log "down in $((SECONDS - start))s; host matches its state before up (links, routes, firewall, mounts, sysctls, cgroups, files, processes)"
  else
    log "down in $((SECONDS - start))s, but the host differs from before up (see above; logs in $LAST_RUN)"
  fi
  return $clean
}
