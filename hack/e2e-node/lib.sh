# shellcheck shell=bash disable=SC2034  # sourced: the variables are used by the scripts
# Shared settings of the real-node e2e scripts (sourced, not run).
# Everything a script starts or changes lives under the paths below, so down.sh can find it again.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export ROOT

KUBE_VERSION=${KUBE_VERSION:-v1.37.1}
ETCD_VERSION=${ETCD_VERSION:-v3.7.3}
CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.4.2}
APT_PACKAGES="runc busybox-static containernetworking-plugins iptables openssl"

K8S_BIN=${K8S_BIN_DIR:-${ROOT}/bin/k8s}
NODE_BIN=${ROOT}/bin/node
# What the user of the cluster needs: the admin kubeconfig (and a link to the logs).
OUT_DIR=${ROOT}/bin/e2e-node
KUBECONFIG_OUT=${OUT_DIR}/kubeconfig

# State of the cluster: certificates, etcd data, kubelet root, logs, PIDs, recorded host settings.
WORK=${E2E_NODE_DIR:-/var/lib/kubedevice-e2e}
PKI=${WORK}/pki
LOGS=${WORK}/logs
PIDS=${WORK}/pids
KUBELET_ROOT=${WORK}/kubelet
# containerd keeps its own root and state, apart from any other containerd on the machine.
CONTAINERD_ROOT=/var/lib/containerd2
CONTAINERD_STATE=/run/containerd2
CONTAINERD_SOCK=${CONTAINERD_STATE}/containerd.sock
NRI_SOCK=/var/run/nri/nri.sock
CNI_CONF=/etc/cni/net.d/10-kubedevice-e2e.conflist
CNI_BRIDGE=cni0
POD_CIDR=10.88.0.0/16
SERVICE_CIDR=10.96.0.0/16
SERVICE_IP=10.96.0.1
# The iptables chain that stands in for kube-proxy for the one service pods need: kubernetes.
NAT_CHAIN=KUBEDEVICE-E2E-APISERVER

NODE_NAME=${NODE_NAME:-$(hostname | tr '[:upper:]' '[:lower:]')}
DEFAULT_IMAGE=docker.io/local/kubedevice:e2e
IMAGE=${E2E_IMAGE:-${DEFAULT_IMAGE}}
# Each image has an archive of its own (and image.sh remembers each one's binaries): image.tar
# for the e2e image, image-<name>.tar for another (the previous release's, hack/e2e-node/previous.sh).
IMAGE_FILES=${WORK}/image
if [ "${IMAGE}" != "${DEFAULT_IMAGE}" ]; then
  IMAGE_FILES=${WORK}/image-$(echo "${IMAGE##*/}" | tr -c 'A-Za-z0-9._\n-' '_')
fi
IMAGE_TAR=${IMAGE_FILES}.tar
APISERVER=https://127.0.0.1:6443
# Host directories the cluster creates outside its own directories when they are missing. up.sh
# records which existed; down.sh removes the others: HOST_DIRS_OWNED with their contents (only the
# cluster writes there: the kubelet's device-plugin socket, which it always puts under
# /var/lib/kubelet whatever its root dir; containerd's CNI result cache; the kubedevice agent's
# hostPath state; libmount's utab), HOST_DIRS_SHARED only when empty, deepest first.
HOST_DIRS_OWNED="/var/lib/kubelet /var/lib/cni /var/lib/kubedevice /run/mount"
# kubedevice's own host state (the agent's plugin sockets and checkpoint, plugins_registry,
# pod-resources): the e2e agent must start from nothing, and must neither restore nor overwrite
# the state of an earlier run or of another install, so up.sh moves a directory that is already
# there into the state dir and down.sh removes the cluster's and puts it back.
HOST_DIRS_SAVED="/var/lib/kubedevice"
# Directories the cluster writes into whether or not they were there: up.sh records what they held,
# down.sh removes the rest (the kubelet's device checkpoint and sockets, kubedevice's CDI specs).
HOST_DIRS_LISTED="/var/lib/kubelet/device-plugins /etc/cdi /var/run/cdi"
# The kubelet's device manager checkpoint: always here, whatever the kubelet's --root-dir.
KUBELET_DEVICE_CHECKPOINT=/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint
HOST_DIRS_SHARED="/etc/cni /etc/cni/net.d /var/run/nri /etc/cdi /var/run/cdi /var/log/containers /run/containerd /run/containerd/s"
# The sysctls the kubelet sets (up.sh records the values it found; down.sh puts them back).
KUBELET_SYSCTLS="vm.overcommit_memory kernel.panic kernel.panic_on_oops"

log() { printf '[e2e-node %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# kubectl's discovery and HTTP caches go to the state dir, not ~/.kube/cache.
export KUBECACHEDIR=${WORK}/kube-cache
kubectl() { "${K8S_BIN}/kubectl" --kubeconfig "${KUBECONFIG_OUT}" "$@"; }
ctr() { "${NODE_BIN}/ctr" -a "${CONTAINERD_SOCK}" -n k8s.io "$@"; }

# node_ip: the IPv4 address of the interface of the default route, as the kubelet detects it.
node_ip() {
  local dev
  dev=$(ip -4 route show default | awk '{for (i = 1; i < NF; i++) if ($i == "dev") { print $(i + 1); exit }}')
  [ -n "${dev}" ] || { log "no default route: cannot tell the node IP"; return 1; }
  ip -4 -o addr show dev "${dev}" scope global | awk '{split($4, a, "/"); print a[1]; exit}'
}

# wait_for DESCRIPTION TIMEOUT_SECONDS COMMAND...: polls COMMAND every half second.
wait_for() {
  local what=$1 timeout=$2
  shift 2
  local deadline=$(($(date +%s) + timeout))
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "${deadline}" ]; then
      log "timed out after ${timeout}s waiting for ${what}"
      return 1
    fi
    sleep 0.5
  done
}

# --- processes --------------------------------------------------------------------------------
running() { # running NAME: the recorded process is alive
  local pid
  pid=$(cat "${PIDS}/$1.pid" 2>/dev/null) || return 1
  [ -n "${pid}" ] && kill -0 "${pid}" 2>/dev/null
}

# start NAME COMMAND...: starts COMMAND in its own session, output to logs/NAME.log, PID recorded.
start() {
  local name=$1
  shift
  if running "${name}"; then
    log "${name} already running (pid $(cat "${PIDS}/${name}.pid"))"
    return
  fi
  log "starting ${name}"
  echo "--- $(date -Is) $*" >>"${LOGS}/${name}.log"
  setsid "$@" >>"${LOGS}/${name}.log" 2>&1 </dev/null &
  echo $! >"${PIDS}/${name}.pid"
}

# alive_or_die NAME: fails with the end of NAME's log when it exited.
alive_or_die() {
  running "$1" && return 0
  log "$1 exited; the end of ${LOGS}/$1.log:"
  tail -n 30 "${LOGS}/$1.log" >&2
  exit 1
}

# wait_up NAME TIMEOUT COMMAND...: waits for COMMAND to succeed while NAME stays alive.
wait_up() {
  local name=$1 timeout=$2
  shift 2
  local deadline=$(($(date +%s) + timeout))
  until "$@" >/dev/null 2>&1; do
    alive_or_die "${name}"
    if [ "$(date +%s)" -ge "${deadline}" ]; then
      log "timed out after ${timeout}s waiting for ${name}; the end of ${LOGS}/${name}.log:"
      tail -n 30 "${LOGS}/${name}.log" >&2
      exit 1
    fi
    sleep 0.5
  done
}

# Process IDs whose command line mentions one of our directories (our components all name a file
# under ${WORK}; containerd shims name ${CONTAINERD_STATE}), never processes of other users of the
# same binaries (e.g. envtest's kube-apiserver and etcd from bin/k8s).
our_pids() {
  local p cmdline
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [ "${p}" = "$$" ] && continue
    cmdline=$(tr '\0' ' ' 2>/dev/null <"/proc/${p}/cmdline") || continue
    case "${cmdline}" in
      *" ${WORK}/"* | *"=${WORK}/"* | *" ${CONTAINERD_STATE}/"* | *" ${CONTAINERD_SOCK}"*) echo "${p}" ;;
    esac
  done
}

# stop NAME...: SIGTERM to the recorded processes, SIGKILL to those still running after 10 s.
stop() {
  local name pid alive pids=()
  for name in "$@"; do
    pid=$(cat "${PIDS}/${name}.pid" 2>/dev/null) || continue
    if [ -n "${pid}" ] && kill -0 "${pid}" 2>/dev/null &&
      tr '\0' ' ' 2>/dev/null <"/proc/${pid}/cmdline" | grep -q -- "${name}"; then
      log "stopping ${name} (pid ${pid})"
      kill -TERM "${pid}" 2>/dev/null || true
      pids+=("${pid}")
    fi
    rm -f "${PIDS}/${name}.pid"
  done
  for _ in $(seq 1 40); do
    alive=0
    for pid in "${pids[@]}"; do
      kill -0 "${pid}" 2>/dev/null && alive=1
    done
    [ "${alive}" -eq 0 ] && return 0
    sleep 0.25
  done
  for pid in "${pids[@]}"; do
    if kill -0 "${pid}" 2>/dev/null; then
      log "pid ${pid} did not stop in 10s: SIGKILL"
      kill -KILL "${pid}" 2>/dev/null || true
    fi
  done
}

# kubepods_cgroups [node-a|all]: the kubelet's cgroups in every hierarchy, deepest first; with "all", the
# second node's too (node-b.sh: its cgroup root, NODE_B_CGROUP_ROOT, and everything under it).
kubepods_cgroups() {
  local top tops=(/sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods)
  [ "${1:-}" = all ] && tops+=(/sys/fs/cgroup/*/"${NODE_B_CGROUP_ROOT}" /sys/fs/cgroup/"${NODE_B_CGROUP_ROOT}")
  for top in "${tops[@]}"; do
    [ -d "${top}" ] && find "${top}" -depth -type d
  done
  return 0
}

# kill_pods [node-a|all]: SIGKILL every process in the kubelet's cgroups (the pods' processes), until none is
# left; with "all", the second node's pods too.
kill_pods() {
  local i cg pids
  for i in $(seq 1 20); do
    pids=$(for cg in $(kubepods_cgroups "${1:-}"); do cat "${cg}/cgroup.procs" 2>/dev/null; done | sort -u)
    [ -z "${pids}" ] && return 0
    [ "${i}" -eq 1 ] && log "killing the pods' processes: $(echo "${pids}" | wc -l)"
    # shellcheck disable=SC2086
    kill -KILL ${pids} 2>/dev/null || true
    sleep 0.25
  done
  log "processes left in kubepods cgroups: $(echo "${pids}" | tr '\n' ' ')"
  return 1
}

# our_mounts: the mounts under our directories (the state dir, containerd's root and state), deepest
# first.
our_mounts() {
  awk -v a="${WORK}" -v b="${CONTAINERD_ROOT}" -v c="${CONTAINERD_STATE}" '
    { m = $5; gsub(/\\040/, " ", m) }
    m == a || index(m, a "/") == 1 || m == b || index(m, b "/") == 1 || m == c || index(m, c "/") == 1 { print length(m), m }
  ' /proc/self/mountinfo | sort -rn | cut -d' ' -f2- | uniq
}

# unmount_ours: unmounts them all; the kubelet bind-mounts its root dir onto itself (rshared),
# possibly more than once, so it repeats until none is left.
unmount_ours() {
  local i m mounts
  for i in $(seq 1 10); do
    mounts=$(our_mounts)
    [ -z "${mounts}" ] && return 0
    [ "${i}" -eq 1 ] && log "unmounting $(echo "${mounts}" | wc -l) mounts"
    while IFS= read -r m; do
      umount "${m}" 2>/dev/null || umount -l "${m}" 2>/dev/null || true
    done <<<"${mounts}"
  done
}

# The second node (node-b.sh), beside the first on the same host: its name, its state, the mount
# namespace it runs in (a file bind-mounted under NODE_B_DIR/ns), its cgroup root, its CNI bridge
# and pod subnet, and the kubelet's ports (the nodes share the host's network namespace).
NODE_B_NAME=${NODE_NAME}-b
NODE_B_DIR=${WORK}/node-b
NODE_B_NS=${NODE_B_DIR}/ns/mnt
NODE_B_CGROUP_ROOT=kubedevice-e2e-node-b
NODE_B_BRIDGE=cni1
NODE_B_POD_CIDR=10.89.0.0/16
NODE_B_KUBELET_PORT=10251
NODE_B_HEALTHZ_PORT=10258

# BOOT_DIR/boot_id is the node's boot ID as the e2e agent reads it (--boot-id-path, through
# overlays/kubedevice): up.sh writes the kernel's, node-event.sh power-on a fresh one, so a simulated
# reboot takes the agent's real reboot path.
BOOT_DIR=${WORK}/boot

# start_containerd: containerd with up.sh's configuration (${WORK}/containerd.toml), its own bin
# directory first on PATH so it starts our shim; returns when it answers.
start_containerd() {
  start containerd env PATH="${NODE_BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    "${NODE_BIN}/containerd" --config "${WORK}/containerd.toml"
  wait_up containerd 60 "${NODE_BIN}/ctr" -a "${CONTAINERD_SOCK}" version
}

# start_kubelet: the kubelet with up.sh's configuration (${WORK}/kubelet.yaml); returns when its
# healthz answers. The node IP is detected (--node-ip=127.0.0.1 is refused): the address of the
# default route's interface, which kubectl logs/exec reach.
start_kubelet() {
  start kubelet "${K8S_BIN}/kubelet" --config "${WORK}/kubelet.yaml" \
    --kubeconfig "${WORK}/kubelet.kubeconfig" --root-dir "${KUBELET_ROOT}" \
    --cert-dir "${KUBELET_ROOT}/pki" --hostname-override "${NODE_NAME}" --v 1
  wait_up kubelet 60 kubelet_healthy
}

# kubelet_healthy [PORT]: the kubelet's healthz (127.0.0.1:10248 by default, plain HTTP) answers ok.
kubelet_healthy() {
  local reply port=${1:-10248}
  reply=$(exec 3<>/dev/tcp/127.0.0.1/"${port}" && printf 'GET /healthz HTTP/1.0\r\n\r\n' >&3 && cat <&3) || return 1
  [ "${reply##*$'\n'}" = ok ]
}

# cert NAME SUBJECT [SAN]: a key and a certificate signed by the CA, for one year.
cert() {
  local name=$1 subj=$2 san=${3:-}
  local ext="${PKI}/${name}.ext"
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [ -n "${san}" ]; then
      echo "extendedKeyUsage=serverAuth"
      echo "subjectAltName=${san}"
    else
      echo "extendedKeyUsage=clientAuth"
    fi
  } >"${ext}"
  openssl ecparam -name prime256v1 -genkey -noout -out "${PKI}/${name}.key" 2>/dev/null
  openssl req -new -key "${PKI}/${name}.key" -subj "${subj}" -out "${PKI}/${name}.csr" 2>/dev/null
  openssl x509 -req -in "${PKI}/${name}.csr" -CA "${PKI}/ca.crt" -CAkey "${PKI}/ca.key" -CAcreateserial \
    -days 365 -extfile "${ext}" -out "${PKI}/${name}.crt" 2>/dev/null
  rm -f "${PKI}/${name}.csr" "${ext}"
}
