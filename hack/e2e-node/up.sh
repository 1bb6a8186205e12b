#!/usr/bin/env bash
# Starts a real single-node Kubernetes cluster on this machine, built from source by install.sh:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd 2.4 (CRI, NRI enabled with
# the default validator, CNI bridge) and the kubelet. Writes the admin kubeconfig to
# bin/e2e-node/kubeconfig and returns when the Node is Ready and the default ServiceAccount exists.
#
# Changes the host (needs root): processes, mounts, the cni0 bridge, an iptables chain for the
# kubernetes Service, /etc/cni/net.d/10-kubedevice-e2e.conflist, /var/run/nri, the kubelet's sysctls
# and /kubepods cgroups. hack/e2e-node/down.sh undoes all of it, and is safe to run after a failed up.
#
# Idempotent: components already running (recorded PID alive) are left alone.
set -euo pipefail

# shellcheck source=hack/e2e-node/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[ "$(id -u)" -eq 0 ] || die "up.sh must run as root"
for b in "${K8S_BIN}"/{etcd,kube-apiserver,kube-controller-manager,kube-scheduler,kubelet,kubectl} \
  "${NODE_BIN}"/{containerd,containerd-shim-runc-v2,ctr,mkimage,pause}; do
  [ -x "${b}" ] || die "missing ${b}: run hack/e2e-node/install.sh first"
done
for b in runc iptables openssl ip; do
  command -v "${b}" >/dev/null || die "missing ${b}: run hack/e2e-node/install.sh first"
done
[ -x /bin/busybox ] || die "missing /bin/busybox: run hack/e2e-node/install.sh first"
[ -x /usr/lib/cni/bridge ] || die "missing CNI plugins in /usr/lib/cni: run hack/e2e-node/install.sh first"

started=$(date +%s)
NODE_IP=$(node_ip)
[ -n "${NODE_IP}" ] || die "cannot tell the node IP"
log "node ${NODE_NAME}, IP ${NODE_IP}; state in ${WORK}, logs in ${LOGS}"
mkdir -p "${WORK}" "${PKI}" "${LOGS}" "${PIDS}" "${WORK}/host" "${OUT_DIR}" "${KUBELET_ROOT}"
ln -sfn "${LOGS}" "${OUT_DIR}/logs"

# --- what the host had before we changed it (recorded once, restored by down.sh) ----------------
if [ ! -f "${WORK}/host/sysctls" ]; then
  for s in ${KUBELET_SYSCTLS}; do
    echo "${s}=$(sysctl -n "${s}")"
  done >"${WORK}/host/sysctls.tmp"
  mv "${WORK}/host/sysctls.tmp" "${WORK}/host/sysctls"
fi
# The iptables chains that existed, per backend and table: down.sh removes the KUBE-/CNI- chains
# that the kubelet and the CNI plugins add, and only those.
if [ ! -f "${WORK}/host/iptables-chains" ]; then
  for backend in nft legacy; do
    command -v "iptables-${backend}" >/dev/null || continue
    for table in filter nat mangle; do
      "iptables-${backend}" -t "${table}" -S 2>/dev/null | awk -v b="${backend}" -v t="${table}" '$1 == "-N" {print b, t, $2}'
    done
  done >"${WORK}/host/iptables-chains.tmp"
  mv "${WORK}/host/iptables-chains.tmp" "${WORK}/host/iptables-chains"
fi
for d in ${HOST_DIRS_OWNED} ${HOST_DIRS_SHARED}; do
  key=$(echo "${d}" | tr / _)
  if [ ! -e "${WORK}/host/existed${key}" ] && [ ! -e "${WORK}/host/created${key}" ]; then
    if [ -d "${d}" ]; then touch "${WORK}/host/existed${key}"; else touch "${WORK}/host/created${key}"; fi
  fi
done
for d in ${HOST_DIRS_SAVED}; do
  key=$(echo "${d}" | tr / _)
  if [ -e "${WORK}/host/existed${key}" ] && [ -d "${d}" ] && [ ! -e "${WORK}/host/saved${key}" ]; then
    log "moving the existing ${d} aside to ${WORK}/host/saved${key} (down.sh puts it back)"
    mv "${d}" "${WORK}/host/saved${key}.tmp"
    mv "${WORK}/host/saved${key}.tmp" "${WORK}/host/saved${key}"
  fi
done
# What the cluster writes into directories that may already be there (the kubelet's device-plugin
# directory under /var/lib/kubelet, the CDI spec directories) is found by what was not there before:
# the listing is recorded once, and down.sh removes everything else.
for d in ${HOST_DIRS_LISTED}; do
  listing="${WORK}/host/listing$(echo "${d}" | tr / _)"
  [ -e "${listing}" ] && continue
  { [ ! -d "${d}" ] || find "${d}" -xdev -mindepth 1 -print0; } >"${listing}.tmp"
  mv "${listing}.tmp" "${listing}"
done
# A device checkpoint the e2e kubelet did not write (another kubelet's, or a run that did not clean
# up) would make it start with a stale device manager: it goes aside, and down.sh puts it back.
saved_checkpoint="${WORK}/host/saved$(echo "${KUBELET_DEVICE_CHECKPOINT}" | tr / _)"
if [ -e "${KUBELET_DEVICE_CHECKPOINT}" ] && [ ! -e "${saved_checkpoint}" ] && ! running kubelet; then
  log "moving the kubelet device checkpoint ${KUBELET_DEVICE_CHECKPOINT} aside (down.sh puts it back)"
  mv "${KUBELET_DEVICE_CHECKPOINT}" "${saved_checkpoint}"
fi

# --- certificates and credentials ---------------------------------------------------------------
# Made again when the node IP (a SAN of the serving certificate) changed, e.g. on a new machine.
if [ "$(cat "${PKI}/node-ip" 2>/dev/null)" != "${NODE_IP}" ] || [ ! -f "${PKI}/tokens.csv" ]; then
  log "making the CA, certificates, service-account keys and tokens (openssl)"
  rm -rf "${PKI:?}"/*
  openssl ecparam -name prime256v1 -genkey -noout -out "${PKI}/ca.key" 2>/dev/null
  openssl req -x509 -new -key "${PKI}/ca.key" -subj "/CN=kubedevice-e2e-ca" -days 365 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
    -out "${PKI}/ca.crt" 2>/dev/null
  cert apiserver "/CN=kube-apiserver" \
    "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,DNS:${NODE_NAME},IP:127.0.0.1,IP:${SERVICE_IP},IP:${NODE_IP}"
  cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  openssl genrsa -out "${PKI}/sa.key" 2048 2>/dev/null
  openssl rsa -in "${PKI}/sa.key" -pubout -out "${PKI}/sa.pub" 2>/dev/null
  {
    echo "$(openssl rand -hex 16),admin,admin,\"system:masters\""
    echo "$(openssl rand -hex 16),system:node:${NODE_NAME},kubelet-${NODE_NAME},\"system:nodes\""
    echo "$(openssl rand -hex 16),system:kube-controller-manager,kube-controller-manager"
    echo "$(openssl rand -hex 16),system:kube-scheduler,kube-scheduler"
  } >"${PKI}/tokens.csv"
  chmod 600 "${PKI}"/*.key "${PKI}/tokens.csv"
  echo "${NODE_IP}" >"${PKI}/node-ip"
fi

token_of() { awk -F, -v u="$1" '$2 == u {print $1}' "${PKI}/tokens.csv"; }

# kubeconfig FILE USER: a kubeconfig for USER's token, with the CA embedded.
kubeconfig() {
  local file=$1 user=$2
  cat >"${file}.tmp" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: e2e-node
  cluster:
    server: ${APISERVER}
    certificate-authority-data: $(base64 -w0 "${PKI}/ca.crt")
users:
- name: ${user}
  user:
    token: $(token_of "${user}")
contexts:
- name: e2e-node
  context:
    cluster: e2e-node
    user: ${user}
current-context: e2e-node
KUBECONFIG
  chmod 600 "${file}.tmp"
  mv "${file}.tmp" "${file}"
}
kubeconfig "${KUBECONFIG_OUT}" admin
kubeconfig "${WORK}/kubelet.kubeconfig" "system:node:${NODE_NAME}"
kubeconfig "${WORK}/controller-manager.kubeconfig" system:kube-controller-manager
kubeconfig "${WORK}/scheduler.kubeconfig" system:kube-scheduler

# --- processes (start, running, wait_up: lib.sh) ---------------------------------------------
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

if ! running etcd; then
  for p in 2379 2380; do port_free "${p}" || die "port ${p} is in use: is another etcd running?"; done
fi
start etcd "${K8S_BIN}/etcd" --name e2e-node --data-dir "${WORK}/etcd" \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster e2e-node=http://127.0.0.1:2380 --unsafe-no-fsync --log-level warn
wait_up etcd 30 bash -c 'exec 3<>/dev/tcp/127.0.0.1/2379'

if ! running kube-apiserver; then
  port_free 6443 || die "port 6443 is in use: is another kube-apiserver running?"
fi
# Bound on all addresses: 127.0.0.1 for the kubeconfigs, the node IP for pods (through the
# kubernetes Service, below).
start kube-apiserver "${K8S_BIN}/kube-apiserver" \
  --etcd-servers http://127.0.0.1:2379 \
  --bind-address 0.0.0.0 --secure-port 6443 --advertise-address "${NODE_IP}" \
  --tls-cert-file "${PKI}/apiserver.crt" --tls-private-key-file "${PKI}/apiserver.key" \
  --client-ca-file "${PKI}/ca.crt" --token-auth-file "${PKI}/tokens.csv" \
  --kubelet-client-certificate "${PKI}/apiserver-kubelet-client.crt" \
  --kubelet-client-key "${PKI}/apiserver-kubelet-client.key" \
  --kubelet-preferred-address-types InternalIP \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "${PKI}/sa.pub" --service-account-signing-key-file "${PKI}/sa.key" \
  --service-cluster-ip-range "${SERVICE_CIDR}" \
  --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
  --allow-privileged=true --profiling=false --v 1
wait_up kube-apiserver 60 "${K8S_BIN}/kubectl" --kubeconfig "${KUBECONFIG_OUT}" get --raw /readyz
log "kube-apiserver ready"

start kube-controller-manager "${K8S_BIN}/kube-controller-manager" \
  --kubeconfig "${WORK}/controller-manager.kubeconfig" --use-service-account-credentials \
  --service-account-private-key-file "${PKI}/sa.key" --root-ca-file "${PKI}/ca.crt" \
  --cluster-signing-cert-file "${PKI}/ca.crt" --cluster-signing-key-file "${PKI}/ca.key" \
  --controllers '*' --leader-elect=false --bind-address 127.0.0.1 --profiling=false --v 1
start kube-scheduler "${K8S_BIN}/kube-scheduler" \
  --kubeconfig "${WORK}/scheduler.kubeconfig" --leader-elect=false --bind-address 127.0.0.1 \
  --profiling=false --v 1

# --- node: CNI, NRI socket directory, the kubernetes Service ------------------------------------
mkdir -p /etc/cni/net.d /var/run/nri /etc/cdi /var/run/cdi
for f in /etc/cni/net.d/*; do
  [ -e "${f}" ] && [ "${f}" != "${CNI_CONF}" ] && log "warning: ${f} exists; containerd uses the first CNI config by name"
done
cat >"${CNI_CONF}" <<CNI
{
  "cniVersion": "1.0.0",
  "name": "kubedevice-e2e",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "${CNI_BRIDGE}",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "${POD_CIDR}"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "${WORK}/cni-ipam"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
CNI

# No kube-proxy runs here: this chain does for the kubernetes Service what kube-proxy would, so that
# pods (the agent, the controller) reach the API server with their in-cluster configuration.
if ! iptables -t nat -S "${NAT_CHAIN}" >/dev/null 2>&1; then
  log "iptables: ${SERVICE_IP}:443 -> ${NODE_IP}:6443 (chain ${NAT_CHAIN})"
  iptables -t nat -N "${NAT_CHAIN}"
  iptables -t nat -A "${NAT_CHAIN}" -d "${SERVICE_IP}/32" -p tcp --dport 443 -j DNAT --to-destination "${NODE_IP}:6443"
fi
for chain in PREROUTING OUTPUT; do
  iptables -t nat -C "${chain}" -j "${NAT_CHAIN}" 2>/dev/null || iptables -t nat -I "${chain}" -j "${NAT_CHAIN}"
done

# --- containerd ---------------------------------------------------------------------------------
mkdir -p "${CONTAINERD_STATE}" "${CONTAINERD_ROOT}"
cat >"${WORK}/containerd.toml" <<TOML
version = 3
root = "${CONTAINERD_ROOT}"
state = "${CONTAINERD_STATE}"

[grpc]
  address = "${CONTAINERD_SOCK}"

[ttrpc]
  address = "${CONTAINERD_SOCK}.ttrpc"

[plugins]
  # Not /opt/containerd: everything of this containerd stays under its root.
  [plugins.'io.containerd.internal.v1.opt']
    path = "${CONTAINERD_ROOT}/opt"

  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "${IMAGE}"

  [plugins.'io.containerd.cri.v1.runtime']
    # These VMs lack CAP_SYS_RESOURCE: runc cannot lower a sandbox's oom_score_adj to -998, and
    # every sandbox fails without this.
    restrict_oom_score_adj = true
    # Network namespaces under ${CONTAINERD_STATE}/netns, not /var/run/netns: down.sh finds them.
    netns_mounts_under_state_dir = true
    cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = "$(command -v runc)"
          Root = "${CONTAINERD_STATE}/runc"
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["/usr/lib/cni"]
      conf_dir = "/etc/cni/net.d"

  [plugins.'io.containerd.nri.v1.nri']
    disable = false
    socket_path = "${NRI_SOCK}"
    plugin_request_timeout = "2s"
    disable_connections = false
    [plugins.'io.containerd.nri.v1.nri'.default_validator]
      # Makes the required-plugins.noderesource.dev pod annotation hold containers until the named
      # NRI plugins are connected.
      enable = true
TOML
start_containerd
log "containerd ready"

"${ROOT}/hack/e2e-node/image.sh"

# The boot ID the e2e agent reads (lib.sh, BOOT_DIR): the kernel's, until node-event.sh power-on.
mkdir -p "${BOOT_DIR}"
[ -s "${BOOT_DIR}/boot_id" ] || cat /proc/sys/kernel/random/boot_id >"${BOOT_DIR}/boot_id"

# --- kubelet ------------------------------------------------------------------------------------
cat >"${WORK}/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://${CONTAINERD_SOCK}
# Test only: anyone may use the kubelet's API (the API server also presents a client certificate).
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
  x509:
    clientCAFile: ${PKI}/ca.crt
authorization:
  mode: AlwaysAllow
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
evictionHard:
  memory.available: 50Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
podLogsDir: ${WORK}/pod-logs
YAML
start_kubelet
node_ready() {
  [ "$(kubectl get node "${NODE_NAME}" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}
wait_up kubelet 120 node_ready
log "node ${NODE_NAME} Ready"
alive_or_die kube-controller-manager
alive_or_die kube-scheduler
wait_up kube-controller-manager 60 kubectl get serviceaccount default -n default
log "cluster up in $(($(date +%s) - started))s; export KUBECONFIG=${KUBECONFIG_OUT}"
