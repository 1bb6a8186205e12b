#!/usr/bin/env bash
# The second node of the real-node cluster (NODE_B_NAME, lib.sh), beside the one up.sh started, on
# the same host: its own containerd (NRI, CDI, CNI) and kubelet, for the two-node specs of the suite
# (test/e2e-node/twonodes_test.go). Needs up.sh's cluster; each command returns once it is done:
#   up             the node: its mount namespace, containerd with the e2e image, the kubelet; returns
#                  when the Node is Ready
#   kubelet-stop   its kubelet stopped (SIGTERM, then SIGKILL after 10 s); its pods keep running
#   kubelet-start  its kubelet started again; returns when its healthz answers
#   agent-kill     the kubedevice agent's processes on node B killed (SIGKILL); with the kubelet
#                  stopped, nothing restarts them until it starts again
#   down           everything of the node gone: kubelet, pods, containerd, shims, mounts, cgroups,
#                  the bridge, its state (the Node object is the caller's: the suite deletes it)
#
# The kubelet always uses /var/lib/kubelet/device-plugins whatever its --root-dir, and the agent,
# the Gopher plugin, containerd's NRI socket and the CDI directories are host paths: two nodes on
# one host would share them. So node B runs in a mount namespace of its own (private propagation),
# in which the paths both nodes name are bind mounts of node B's own directories (NODE_B_DIR/root/
# <path>): the same manifests, containerd configuration and kubelet root then mean node B's
# directories on node B, and nothing node B mounts is seen by node A. What the nodes cannot share
# is outside the file system and kept apart otherwise: the cgroup root (NODE_B_CGROUP_ROOT), the CNI
# bridge and pod subnet (NODE_B_BRIDGE, NODE_B_POD_CIDR: both bridges are on the host, so pods of the
# two nodes reach each other and the API server), and the kubelet's ports. The kubelet authenticates
# with a client certificate of system:node:NODE_B_NAME (the API server reads its token file once).
set -euo pipefail

# shellcheck source=hack/e2e-node/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[ "$(id -u)" -eq 0 ] || die "node-b.sh must run as root"

# The paths node B has to itself, bound in its namespace (/var/run is /run).
NODE_B_PATHS="/var/lib/kubelet ${KUBELET_ROOT} ${WORK}/pod-logs ${WORK}/cni-ipam ${WORK}/gophers
${CONTAINERD_ROOT} ${CONTAINERD_STATE} /run/containerd /var/lib/kubedevice /run/nri /etc/cdi /run/cdi
/etc/cni/net.d /var/lib/cni /var/log/containers"

in_ns() { nsenter --mount="${NODE_B_NS}" -- "$@"; }
ctr_b() { in_ns "${NODE_BIN}/ctr" -a "${CONTAINERD_SOCK}" -n k8s.io "$@"; }

# make_namespace: the mount namespace, persistent as a bind mount of its file (whose directory must
# be a private mount), with node B's directories bound over the shared paths. What the host had
# mounted under those paths when the namespace was made (node A's pod volumes, root file systems,
# network namespaces) is unmounted in it first, so node B holds none of node A's mounts.
make_namespace() {
  local d src
  [ -e "${NODE_B_NS}" ] && mountpoint -q "${NODE_B_NS}" && return 0
  mkdir -p "$(dirname "${NODE_B_NS}")"
  if ! mountpoint -q "$(dirname "${NODE_B_NS}")"; then
    mount --bind "$(dirname "${NODE_B_NS}")" "$(dirname "${NODE_B_NS}")"
    mount --make-private "$(dirname "${NODE_B_NS}")"
  fi
  touch "${NODE_B_NS}"
  unshare --mount="${NODE_B_NS}" --propagation private true
  for d in ${NODE_B_PATHS}; do
    src=${NODE_B_DIR}/root${d}
    mkdir -p "${src}" "${d}"
    in_ns cat /proc/self/mountinfo | awk -v d="${d}" 'index($5, d "/") == 1 || $5 == d {print length($5), $5}' |
      sort -rn | cut -d' ' -f2- | while read -r m; do in_ns umount -l "${m}" 2>/dev/null || true; done
    in_ns mount --bind "${src}" "${d}"
  done
  log "node ${NODE_B_NAME}: mount namespace ${NODE_B_NS} with its own $(echo "${NODE_B_PATHS}" | wc -w) paths"
}

# configure: containerd's configuration is up.sh's (the same paths, bound; a copy, so that its
# command line names node B); the CNI configuration, the kubelet's configuration (ports, cgroup
# root) and credentials are node B's.
configure() {
  cp "${WORK}/containerd.toml" "${NODE_B_DIR}/containerd-b.toml"
  sed -e "s/\"name\": \"kubedevice-e2e\"/\"name\": \"kubedevice-e2e-node-b\"/" \
    -e "s/\"bridge\": \"${CNI_BRIDGE}\"/\"bridge\": \"${NODE_B_BRIDGE}\"/" \
    -e "s#\"subnet\": \"${POD_CIDR}\"#\"subnet\": \"${NODE_B_POD_CIDR}\"#" \
    "${CNI_CONF}" >"${NODE_B_DIR}/root${CNI_CONF}"
  grep -q "${NODE_B_BRIDGE}" "${NODE_B_DIR}/root${CNI_CONF}" || die "could not write node B's CNI configuration"
  sed -e "s/^healthzPort: .*/healthzPort: ${NODE_B_HEALTHZ_PORT}/" "${WORK}/kubelet.yaml" >"${NODE_B_DIR}/kubelet-b.yaml"
  printf 'port: %s\ncgroupRoot: /%s\n' "${NODE_B_KUBELET_PORT}" "${NODE_B_CGROUP_ROOT}" >>"${NODE_B_DIR}/kubelet-b.yaml"
  local cg
  for cg in /sys/fs/cgroup/*/; do
    [ -e "${cg}cgroup.procs" ] && mkdir -p "${cg}${NODE_B_CGROUP_ROOT}"
  done
  [ -f "${PKI}/${NODE_B_NAME}.crt" ] || cert "${NODE_B_NAME}" "/O=system:nodes/CN=system:node:${NODE_B_NAME}"
  cat >"${NODE_B_DIR}/kubelet-b.kubeconfig" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: e2e-node
  cluster:
    server: ${APISERVER}
    certificate-authority: ${PKI}/ca.crt
users:
- name: system:node:${NODE_B_NAME}
  user:
    client-certificate: ${PKI}/${NODE_B_NAME}.crt
    client-key: ${PKI}/${NODE_B_NAME}.key
contexts:
- name: e2e-node
  context:
    cluster: e2e-node
    user: system:node:${NODE_B_NAME}
current-context: e2e-node
KUBECONFIG
}

start_containerd_b() {
  start containerd-b nsenter --mount="${NODE_B_NS}" -- env PATH="${NODE_BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    "${NODE_BIN}/containerd" --config "${NODE_B_DIR}/containerd-b.toml"
  wait_up containerd-b 60 ctr_b version
}

# import_images: the e2e image (image.sh built it for node A), with the pause image it carries.
import_images() {
  [ -f "${IMAGE_TAR}" ] || die "no ${IMAGE_TAR}: run image.sh (up.sh does) first"
  local out
  out=$(ctr_b images import --all-platforms "${IMAGE_TAR}" 2>&1) || { echo "${out}" >&2; die "importing ${IMAGE_TAR} into node B's containerd failed"; }
}

start_kubelet_b() {
  start kubelet-b nsenter --mount="${NODE_B_NS}" -- "${K8S_BIN}/kubelet" --config "${NODE_B_DIR}/kubelet-b.yaml" \
    --kubeconfig "${NODE_B_DIR}/kubelet-b.kubeconfig" --root-dir "${KUBELET_ROOT}" \
    --cert-dir "${KUBELET_ROOT}/pki" --hostname-override "${NODE_B_NAME}" --v 1
  wait_up kubelet-b 60 kubelet_healthy "${NODE_B_HEALTHZ_PORT}"
}

up() {
  local started
  started=$(date +%s)
  running kubelet || die "node ${NODE_NAME} is not up: run up.sh first"
  mkdir -p "${NODE_B_DIR}"
  make_namespace
  configure
  start_containerd_b
  import_images
  start_kubelet_b
  node_b_ready() {
    [ "$(kubectl get node "${NODE_B_NAME}" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
  }
  wait_up kubelet-b 120 node_b_ready
  log "node ${NODE_B_NAME} Ready in $(($(date +%s) - started))s"
}

# down: the kubelet, the pods (node B's cgroups), containerd and its shims (the processes in node B's
# namespace), then the namespace and everything under NODE_B_DIR.
down() {
  local p ns cg
  stop kubelet-b
  if [ -e "${NODE_B_NS}" ] && mountpoint -q "${NODE_B_NS}"; then
    ns=$(in_ns readlink /proc/self/ns/mnt)
    for cg in $(kubepods_cgroups all | grep -F "/${NODE_B_CGROUP_ROOT}"); do
      cat "${cg}/cgroup.procs" 2>/dev/null
    done | sort -u | xargs -r kill -KILL 2>/dev/null || true
    stop containerd-b
    for p in /proc/[0-9]*; do
      if [ "$(readlink "${p}/ns/mnt" 2>/dev/null)" = "${ns}" ]; then kill -KILL "${p#/proc/}" 2>/dev/null || true; fi
    done
    sleep 0.5
    umount "${NODE_B_NS}" || umount -l "${NODE_B_NS}"
  fi
  stop containerd-b
  mountpoint -q "$(dirname "${NODE_B_NS}")" 2>/dev/null && umount -l "$(dirname "${NODE_B_NS}")"
  for _ in 1 2 3 4 5; do
    for cg in $(kubepods_cgroups all | grep -F "/${NODE_B_CGROUP_ROOT}"); do rmdir "${cg}" 2>/dev/null || true; done
    kubepods_cgroups all | grep -qF "/${NODE_B_CGROUP_ROOT}" || break
    sleep 0.5
  done
  ip link delete "${NODE_B_BRIDGE}" 2>/dev/null || true
  rm -rf "${NODE_B_DIR}"
  log "node ${NODE_B_NAME} down"
}

# agent_kill: SIGKILL to the kubedevice-agent processes in node B's cgroups.
agent_kill() {
  local p n=0
  # The pids first, once each (a process is in every hierarchy), as killing empties cgroups.
  for p in $(for cg in $(kubepods_cgroups all | grep -F "/${NODE_B_CGROUP_ROOT}"); do
    cat "${cg}/cgroup.procs" 2>/dev/null || true
  done | sort -un); do
    [ "$(basename "$(readlink "/proc/${p}/exe" 2>/dev/null)")" = kubedevice-agent ] || continue
    kill -KILL "${p}" 2>/dev/null && n=$((n + 1))
  done
  [ "${n}" -gt 0 ] || die "no kubedevice-agent process on node ${NODE_B_NAME}"
  log "killed ${n} kubedevice-agent processes on node ${NODE_B_NAME}"
}

case "${1:-}" in
  up) up ;;
  kubelet-stop) stop kubelet-b ;;
  kubelet-start) start_kubelet_b ;;
  agent-kill) agent_kill ;;
  down) down ;;
  *) die "usage: $0 up|kubelet-stop|kubelet-start|agent-kill|down" ;;
esac
