#!/usr/bin/env bash
# Stops the real-node e2e cluster started by up.sh and puts the host back as it was: processes
# (recorded PIDs, then leftovers of our components, containerd shims and the pods' processes),
# mounts under our directories (the kubelet's self bind-mount of its root, pod volumes, container
# root file systems, network namespaces), the cni0 bridge, the iptables chains added for the cluster,
# the sysctls the kubelet changed, /kubepods cgroups, and the files and directories up.sh created.
# The logs are kept in bin/e2e-node/logs.
#
# Safe to run twice, and after a failed or partial up.sh. Needs root.
set -euo pipefail

# shellcheck source=hack/e2e-node/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[ "$(id -u)" -eq 0 ] || die "down.sh must run as root"
started=$(date +%s)
problems=0
warn() { log "warning: $*"; problems=$((problems + 1)); }

# 1. The second node, if node-b.sh started it (its namespace, cgroups and bridge go with it); then
# the kubelet, so that it restarts nothing; then the pods and containerd.
"${ROOT}/hack/e2e-node/node-b.sh" down || warn "could not take the second node down"
stop kubelet
kill_pods all || warn "could not kill every pod process"
stop containerd
# Shims and anything else of the node side still running (the control plane is stopped below).
for p in $(our_pids); do
  exe=$(readlink "/proc/${p}/exe" 2>/dev/null || true)
  case "${exe}" in
    "${NODE_BIN}"/* | */kubelet) log "killing leftover ${exe} (pid ${p})"; kill -KILL "${p}" 2>/dev/null || true ;;
  esac
done
kill_pods all || warn "could not kill every pod process"

# 2. The control plane.
stop kube-scheduler kube-controller-manager kube-apiserver
stop etcd
for i in 1 2 3; do
  leftover=$(our_pids)
  [ -z "${leftover}" ] && break
  for p in ${leftover}; do
    log "killing leftover pid ${p}: $(tr '\0' ' ' 2>/dev/null <"/proc/${p}/cmdline" | cut -c1-120)"
    kill -KILL "${p}" 2>/dev/null || true
  done
  sleep 0.5
done
[ -z "$(our_pids)" ] || warn "processes still running: $(our_pids | tr '\n' ' ')"

# 3. Mounts under our directories, deepest first; the kubelet bind-mounts its root dir onto itself
# (rshared), possibly more than once, so repeat until none is left.
unmount_ours
[ -z "$(our_mounts)" ] || warn "mounts left: $(our_mounts | tr '\n' ' ')"

# 4. Network: the bridge (the pods' veths went with their namespaces), the iptables chains.
if ip link show "${CNI_BRIDGE}" >/dev/null 2>&1; then
  log "deleting the ${CNI_BRIDGE} bridge"
  ip link delete "${CNI_BRIDGE}" || warn "could not delete ${CNI_BRIDGE}"
fi
# remove_chain BACKEND TABLE CHAIN: deletes the rules that jump to CHAIN, then CHAIN itself.
remove_chain() {
  local ipt="iptables-$1" table=$2 chain=$3 rule
  while IFS= read -r rule; do
    # shellcheck disable=SC2086
    eval "${ipt} -t ${table} ${rule/#-A/-D}" 2>/dev/null || true
  done < <("${ipt}" -t "${table}" -S 2>/dev/null | grep -E -- "^-A .* -j ${chain}( |\$)" || true)
  "${ipt}" -t "${table}" -F "${chain}" 2>/dev/null || true
  "${ipt}" -t "${table}" -X "${chain}" 2>/dev/null || true
}
for backend in nft legacy; do
  command -v "iptables-${backend}" >/dev/null || continue
  for table in filter nat mangle; do
    # Chains to remove: ours, and the kubelet's (KUBE-) and the CNI plugins' (CNI-) that up.sh did
    # not find on the host.
    for chain in $("iptables-${backend}" -t "${table}" -S 2>/dev/null | awk '$1 == "-N" {print $2}'); do
      case "${chain}" in
        "${NAT_CHAIN}") ;;
        KUBE-* | CNI-*)
          [ -f "${WORK}/host/iptables-chains" ] || continue
          ! grep -qx "${backend} ${table} ${chain}" "${WORK}/host/iptables-chains" || continue
          ;;
        *) continue ;;
      esac
      log "iptables-${backend}: removing ${table} chain ${chain}"
      remove_chain "${backend}" "${table}" "${chain}"
    done
  done
done

# 5. The sysctls the kubelet set.
if [ -f "${WORK}/host/sysctls" ]; then
  while IFS='=' read -r key value; do
    if [ "$(sysctl -n "${key}")" != "${value}" ]; then
      log "sysctl ${key}: $(sysctl -n "${key}") -> ${value}"
      sysctl -q -w "${key}=${value}" || warn "could not restore ${key}=${value}"
    fi
  done <"${WORK}/host/sysctls"
fi

# 6. The kubelet's cgroups.
for i in 1 2 3 4 5; do
  cgroups=$(kubepods_cgroups all)
  [ -z "${cgroups}" ] && break
  [ "${i}" -eq 1 ] && log "removing $(echo "${cgroups}" | wc -l) kubepods cgroups"
  for cg in ${cgroups}; do rmdir "${cg}" 2>/dev/null || true; done
  [ -z "$(kubepods_cgroups all)" ] || { kill_pods all || true; sleep 0.5; }
done
[ -z "$(kubepods_cgroups all)" ] || warn "cgroups left: $(kubepods_cgroups all | head -3 | tr '\n' ' ')..."

# 7. Files: the CNI config, the NRI socket, the container log links, the directories up.sh created,
# and the state (only when nothing is mounted under it any more: rm must never cross a mount).
rm -f "${CNI_CONF}"
if [ -d /var/log/containers ]; then
  find /var/log/containers -maxdepth 1 -type l -lname "${WORK}/*" -delete
fi
# The NRI socket, unless another containerd listens on it.
if [ -S "${NRI_SOCK}" ] && ! ss -xlH 2>/dev/null | grep -qF "${NRI_SOCK} "; then
  rm -f "${NRI_SOCK}"
fi
# containerd shims listen under /run/containerd/s whatever containerd's state dir is; the sockets of
# killed shims stay behind (only dead ones are removed: another containerd may use the directory).
if [ -d /run/containerd/s ]; then
  live=$(ss -xlH 2>/dev/null | awk '{print $5}')
  for s in /run/containerd/s/*; do
    [ -S "${s}" ] || continue
    grep -qxF "${s}" <<<"${live}" || rm -f "${s}"
  done
fi
# containerd's CNI result cache (/var/lib/cni) keeps the results of pods that were killed rather than
# deleted: ours are those of our network and the loopback results of the same sandboxes.
if [ -d /var/lib/cni/results ]; then
  for r in /var/lib/cni/results/kubedevice-e2e-*; do
    [ -e "${r}" ] || continue
    id=${r#/var/lib/cni/results/kubedevice-e2e-}
    id=${id%-*}
    rm -f "${r}" "/var/lib/cni/results/cni-loopback-${id}-lo"
  done
fi
created() { [ -f "${WORK}/host/created$(echo "$1" | tr / _)" ]; }
# mounted_under DIR: whether anything is mounted at DIR or under it.
mounted_under() { awk -v d="$1" 'index($5, d "/") == 1 || $5 == d {found = 1} END {exit !found}' /proc/self/mountinfo; }
if [ -z "$(our_mounts)" ]; then
  for d in ${HOST_DIRS_OWNED}; do
    if created "${d}" && [ -d "${d}" ]; then
      if mounted_under "${d}"; then
        warn "not removing ${d}: something is mounted under it"
      else
        log "removing ${d} (created by the cluster)"
        rm -rf "${d}"
      fi
    fi
  done
fi
saved_left=0
# What the cluster wrote into the listed directories (lib.sh, HOST_DIRS_LISTED), even where they
# were there before: everything up.sh did not find there.
for d in ${HOST_DIRS_LISTED}; do
  listing="${WORK}/host/listing$(echo "${d}" | tr / _)"
  if [ ! -f "${listing}" ] || [ ! -d "${d}" ]; then continue; fi
  if mounted_under "${d}"; then
    warn "not cleaning ${d}: something is mounted under it"
    continue
  fi
  while IFS= read -r -d '' f; do
    grep -qzxF -- "${f}" "${listing}" && continue
    log "removing ${f} (written by the cluster)"
    rm -rf -- "${f}"
  done < <(find "${d}" -xdev -mindepth 1 -depth -print0)
done
saved_checkpoint="${WORK}/host/saved$(echo "${KUBELET_DEVICE_CHECKPOINT}" | tr / _)"
if [ -e "${saved_checkpoint}" ]; then
  log "putting back the kubelet device checkpoint ${KUBELET_DEVICE_CHECKPOINT}"
  mkdir -p "$(dirname "${KUBELET_DEVICE_CHECKPOINT}")"
  mv "${saved_checkpoint}" "${KUBELET_DEVICE_CHECKPOINT}" || { warn "could not put back ${KUBELET_DEVICE_CHECKPOINT}"; saved_left=1; }
fi
# kubedevice's state dir as it was before up.sh: the cluster's goes, the saved one comes back.
for d in ${HOST_DIRS_SAVED}; do
  saved="${WORK}/host/saved$(echo "${d}" | tr / _)"
  [ -e "${saved}" ] || continue
  if [ -n "$(our_mounts)" ] || mounted_under "${d}"; then
    warn "not restoring ${d} from ${saved}: something is still mounted"
    saved_left=1
    continue
  fi
  log "putting back ${d} as it was before the cluster"
  rm -rf "${d}"
  mv "${saved}" "${d}" || { warn "could not put back ${d} from ${saved}"; saved_left=1; }
done
# What the cluster created outside its directories must be gone now: say so when it is not,
# rather than report the host restored.
for d in ${HOST_DIRS_OWNED}; do
  if created "${d}" && [ -e "${d}" ]; then
    warn "${d} was created by the cluster and is still there: $(find "${d}" -mindepth 1 -maxdepth 2 2>/dev/null | head -5 | tr '\n' ' ')"
  fi
done
for d in $(echo "${HOST_DIRS_SHARED}" | tr ' ' '\n' | sort -r); do
  if created "${d}" && [ -d "${d}" ]; then
    rmdir "${d}" 2>/dev/null || warn "${d} was created by up.sh but is not empty: left in place"
  fi
done
if [ -d "${LOGS}" ]; then
  rm -rf "${OUT_DIR}/logs"
  mkdir -p "${OUT_DIR}"
  cp -a "${LOGS}" "${OUT_DIR}/logs"
fi
for d in "${WORK}" "${CONTAINERD_ROOT}" "${CONTAINERD_STATE}"; do
  [ -e "${d}" ] || continue
  if [ "${d}" = "${WORK}" ] && [ "${saved_left}" -ne 0 ]; then
    warn "not removing ${WORK}: it holds a saved directory that could not be put back"
    continue
  fi
  if [ -n "$(our_mounts)" ]; then
    warn "not removing ${d}: mounts are left under our directories"
    continue
  fi
  rm -rf "${d}"
done
rm -f "${KUBECONFIG_OUT}"

if [ "${problems}" -gt 0 ]; then
  log "down finished in $(($(date +%s) - started))s with ${problems} problems"
  exit 1
fi
log "down finished in $(($(date +%s) - started))s; the host is restored (logs in ${OUT_DIR}/logs)"
