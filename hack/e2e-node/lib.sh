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
