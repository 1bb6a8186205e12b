#!/usr/bin/env bash
# The node's days that hurt, on the cluster up.sh started, for the node-event specs of the real-node
# suite (test/e2e-node/nodeevents_test.go); each step returns once it is done:
#   kubelet-stop        the kubelet stopped as systemd stops it (SIGTERM, then SIGKILL after 10 s)
#   kubelet-start       the kubelet started again with up.sh's flags; returns when its healthz answers
#   containerd-restart  containerd stopped (SIGTERM) and started again; shims and containers run on
#   power-off           a power loss: the kubelet, containerd, every shim and every pod's process
#                       killed (SIGKILL), then what a reboot takes away: the mounts under the node's
#                       directories (pod volumes, root file systems, network namespaces), the
#                       runtime's volatile state (${CONTAINERD_STATE}, shim sockets, the NRI socket,
#                       the CDI specs in /var/run/cdi: /run is a tmpfs), the kubepods cgroups and
#                       the cni0 bridge. What lives on disk stays: the kubelet's root and
#                       checkpoints, containerd's root (the images), kubedevice's state directory.
#   power-on            the boot after it: a fresh boot ID in ${BOOT_DIR}/boot_id (the e2e agent
#                       reads it there), containerd, then the kubelet
# The control plane keeps running, as it does when a worker node reboots.
set -euo pipefail

# shellcheck source=hack/e2e-node/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[ "$(id -u)" -eq 0 ] || die "node-event.sh must run as root"

# kill_now NAME: SIGKILL to the recorded process.
kill_now() {
  local pid
  pid=$(cat "${PIDS}/$1.pid" 2>/dev/null) || return 0
  [ -n "${pid}" ] && kill -KILL "${pid}" 2>/dev/null && log "killed $1 (pid ${pid})"
  rm -f "${PIDS}/$1.pid"
}

power_off() {
  local p exe cg
  kill_now kubelet
  kill_now containerd
  for p in $(our_pids); do
    exe=$(readlink "/proc/${p}/exe" 2>/dev/null || true)
    case "${exe}" in "${NODE_BIN}"/containerd-shim*) kill -KILL "${p}" 2>/dev/null || true ;; esac
  done
  kill_pods node-a
  unmount_ours
  [ -z "$(our_mounts)" ] || die "mounts left after power-off: $(our_mounts | tr '\n' ' ')"
  # What a reboot takes away: /run is a tmpfs.
  rm -rf "${CONTAINERD_STATE}"
  rm -f "${NRI_SOCK}" /var/run/cdi/*
  if [ -d /run/containerd/s ]; then
    live=$(ss -xlH 2>/dev/null | awk '{print $5}')
    for p in /run/containerd/s/*; do
      [ -S "${p}" ] && ! grep -qxF "${p}" <<<"${live}" && rm -f "${p}"
    done
  fi
  for cg in $(kubepods_cgroups node-a); do rmdir "${cg}" 2>/dev/null || true; done
  ip link delete "${CNI_BRIDGE}" 2>/dev/null || true
  log "power-off done"
}

power_on() {
  mkdir -p "${BOOT_DIR}"
  cat /proc/sys/kernel/random/uuid >"${BOOT_DIR}/boot_id.tmp"
  mv "${BOOT_DIR}/boot_id.tmp" "${BOOT_DIR}/boot_id"
  log "boot ID $(cat "${BOOT_DIR}/boot_id")"
  start_containerd
  start_kubelet
}

case "${1:-}" in
  kubelet-stop) stop kubelet ;;
  kubelet-start) start_kubelet ;;
  containerd-restart) stop containerd && start_containerd ;;
  power-off) power_off ;;
  power-on) power_on ;;
  *) die "usage: $0 kubelet-stop|kubelet-start|containerd-restart|power-off|power-on" ;;
esac
