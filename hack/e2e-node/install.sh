#!/usr/bin/env bash
# Installs everything the real-node e2e cluster needs, from Debian and the Go module proxy only:
#   - Debian: runc, busybox-static, containernetworking-plugins (CNI in /usr/lib/cni), iptables, openssl
#   - containerd, containerd-shim-runc-v2 and ctr v2.4.2 (go install) into bin/node
#   - kubelet, kube-controller-manager and kubectl from k8s.io/kubernetes (hack/build-control-plane.sh),
#     with etcd, kube-apiserver and kube-scheduler, into bin/k8s
#   - helm into bin (make helm, at the Makefile's pinned version), for the suite's Helm install
#   - prometheus into bin (make prometheus, at the Makefile's pinned version), for the suite's real Prometheus
#   - the image builder hack/e2e-node/mkimage and the pause binary into bin/node
# Idempotent: what is present at the wanted version is skipped. Needs root (apt-get).
set -euo pipefail

# shellcheck source=hack/e2e-node/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[ "$(id -u)" -eq 0 ] || die "install.sh must run as root (apt-get install)"

step_start=$(date +%s)
timed() { # timed NAME: prints how long the step since the last call took
  local now
  now=$(date +%s)
  log "$1 took $((now - step_start))s"
  step_start=${now}
}

# --- Debian packages ----------------------------------------------------------------------------
missing=()
for p in ${APT_PACKAGES}; do
  if ! dpkg-query -W -f='${Status}' "${p}" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("${p}")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  log "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  log "Debian packages present: ${APT_PACKAGES}"
fi
timed "Debian packages"

# --- containerd ---------------------------------------------------------------------------------
mkdir -p "${NODE_BIN}"
if [ -x "${NODE_BIN}/containerd" ] && [ -x "${NODE_BIN}/containerd-shim-runc-v2" ] && [ -x "${NODE_BIN}/ctr" ] &&
  grep -qx "containerd ${CONTAINERD_VERSION}" "${NODE_BIN}/.versions" 2>/dev/null; then
  log "containerd ${CONTAINERD_VERSION} already built"
else
  log "building containerd ${CONTAINERD_VERSION} (go install; about 3.5 minutes cold on 2 cores)"
  rm -f "${NODE_BIN}/.versions"
  (
    cd "${NODE_BIN}"
    CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOTOOLCHAIN=local GOBIN="${NODE_BIN}" go install -trimpath \
      -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=${CONTAINERD_VERSION}" \
      "github.com/containerd/containerd/v2/cmd/containerd@${CONTAINERD_VERSION}" \
      "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@${CONTAINERD_VERSION}" \
      "github.com/containerd/containerd/v2/cmd/ctr@${CONTAINERD_VERSION}"
  )
  echo "containerd ${CONTAINERD_VERSION}" >"${NODE_BIN}/.versions"
fi
timed "containerd"

# --- Kubernetes ---------------------------------------------------------------------------------
"${ROOT}/hack/build-control-plane.sh" etcd kube-apiserver kube-scheduler kube-controller-manager kubelet kubectl
timed "Kubernetes components"

# --- helm ---------------------------------------------------------------------------------------
# The suite installs kubedevice with the chart too; the Makefile pins helm's version.
make -C "${ROOT}" --no-print-directory helm
timed "helm"

# --- prometheus ---------------------------------------------------------------------------------
# The suite's prometheus specs run a real Prometheus server scraping the agent and the controller;
# the Makefile pins its version (go install, about 6 minutes cold on 2 cores).
make -C "${ROOT}" --no-print-directory prometheus
timed "prometheus"

# --- image builder and pause --------------------------------------------------------------------
log "building the image builder and the pause binary"
(
  cd "${ROOT}"
  CGO_ENABLED=0 go build -trimpath -o "${NODE_BIN}/mkimage" ./hack/e2e-node/mkimage
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${NODE_BIN}/pause" ./hack/e2e-node/pause
)
timed "image builder"
log "installed into ${NODE_BIN} and ${K8S_BIN}"
