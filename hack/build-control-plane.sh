#!/usr/bin/env bash
# Builds the test control plane (etcd, kube-apiserver, kube-scheduler and, on request, the node
# components) from the Go module proxy into bin/k8s. Nothing is downloaded from release pages: the
# binaries are compiled from the same modules the Kubernetes release is made of.
# The Makefile also runs it with KUBE_VERSION set to the oldest supported release and K8S_BIN_DIR
# bin/k8s-<minor>, for kube-apiserver alone (make envtest-assets-compat): each version has a
# module of its own in bin/.k8s-build, so the two builds never undo each other's.
#
# Usage: hack/build-control-plane.sh [component ...]
#   components: etcd kube-apiserver kube-scheduler (default), kubelet kube-controller-manager kubectl
# Environment:
#   KUBE_VERSION   Kubernetes version (default v1.37.1; v1.37.2 is not served by the proxy)
#   ETCD_VERSION   etcd version (default v3.7.3)
#   K8S_BIN_DIR    output directory (default <repo>/bin/k8s)
#
# Idempotent: a component whose binary exists and reports the wanted version is skipped.
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-v1.37.1}
ETCD_VERSION=${ETCD_VERSION:-v3.7.3}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
K8S_BIN_DIR=${K8S_BIN_DIR:-${ROOT}/bin/k8s}
WORK_DIR=${ROOT}/bin/.k8s-build

components=("$@")
if [ ${#components[@]} -eq 0 ]; then
  components=(etcd kube-apiserver kube-scheduler)
fi

log() { printf '[control-plane] %s\n' "$*" >&2; }

# quiet runs a command, showing its output only when it fails.
quiet() {
  local out
  if ! out=$("$@" 2>&1); then
    printf '%s\n' "${out}" >&2
    log "failed: $*"
    return 1
  fi
}

mkdir -p "${K8S_BIN_DIR}"
stamp="${K8S_BIN_DIR}/.versions"
touch "${stamp}"

wanted_version() {
  case "$1" in
    etcd) echo "${ETCD_VERSION}" ;;
    *) echo "${KUBE_VERSION}" ;;
  esac
}

# built COMPONENT: true when the binary exists and was built at the wanted version.
built() {
  [ -x "${K8S_BIN_DIR}/$1" ] && grep -qx "$1 $(wanted_version "$1")" "${stamp}"
}

record() {
  local tmp
  tmp=$(mktemp)
  grep -v "^$1 " "${stamp}" >"${tmp}" || true
  echo "$1 $(wanted_version "$1")" >>"${tmp}"
  mv "${tmp}" "${stamp}"
}

todo=()
for c in "${components[@]}"; do
  case "$c" in
    etcd | kube-apiserver | kube-scheduler | kubelet | kube-controller-manager | kubectl) ;;
    *) log "unknown component: $c"; exit 2 ;;
  esac
  if built "$c"; then
    log "$c $(wanted_version "$c") already built"
  else
    todo+=("$c")
  fi
done
[ ${#todo[@]} -eq 0 ] && exit 0

export CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOTOOLCHAIN=local

build_etcd() {
  log "building etcd ${ETCD_VERSION} from go.etcd.io/etcd/server/v3 (about 1 minute cold)"
  local dir="${WORK_DIR}/etcd"
  mkdir -p "${dir}"
  cat >"${dir}/go.mod" <<GOMOD
module kubedevice.local/etcd-build

go 1.26
GOMOD
  cat >"${dir}/tools.go" <<'GO'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
GO
  (cd "${dir}" && quiet go get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}" && quiet go mod tidy &&
    go build -trimpath -ldflags "-s -w" -o "${K8S_BIN_DIR}/etcd" go.etcd.io/etcd/server/v3)
  record etcd
  log "etcd done"
}

# The throw-away module imports every component it can build, so that `go mod tidy` records all the
# go.sum entries they need (kube-controller-manager and kubectl need more than the others).
kube_tools_go() {
  cat <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
}

# kube_module_dir is the throw-away module of KUBE_VERSION.
kube_module_dir() {
  echo "${WORK_DIR}/kubernetes-${KUBE_VERSION}"
}

prepare_kube_module() {
  local dir
  dir=$(kube_module_dir)
  # Ready when it was prepared for this version with the same imports (a module prepared before a
  # component was added lacks that component's go.sum entries and is prepared again).
  if [ -f "${dir}/.ready-${KUBE_VERSION}" ] && [ "$(cat "${dir}/tools.go" 2>/dev/null)" = "$(kube_tools_go)" ]; then
    return
  fi
  log "preparing a module that requires k8s.io/kubernetes ${KUBE_VERSION}"
  rm -rf "${dir}"
  mkdir -p "${dir}"
  local gomod
  gomod=$(go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  local staging_version="v0.${KUBE_VERSION#v1.}"
  {
    echo "module kubedevice.local/kubernetes-build"
    echo
    echo "go 1.26"
    echo
    echo "require k8s.io/kubernetes ${KUBE_VERSION}"
    echo
    echo "replace ("
    # Every staging module (k8s.io/api => ./staging/src/k8s.io/api, ...) becomes its published release.
    sed -n 's#^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/src/.*#\t\1 => \1 '"${staging_version}"'#p' "${gomod}"
    echo ")"
  } >"${dir}/go.mod"
  local n
  n=$(grep -c '=> k8s.io/' "${dir}/go.mod")
  log "replacing ${n} staging modules with ${staging_version}"
  kube_tools_go >"${dir}/tools.go"
  log "resolving dependencies (go mod tidy; downloads the modules the first time)"
  (cd "${dir}" && quiet go mod tidy)
  touch "${dir}/.ready-${KUBE_VERSION}"
}

build_kube() {
  local c=$1
  prepare_kube_module
  local minor=${KUBE_VERSION#v1.}
  minor=${minor%%.*}
  local ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${KUBE_VERSION}"
  ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor}"
  ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
  log "building ${c} ${KUBE_VERSION} (a few minutes cold on 2 cores)"
  local t0
  t0=$(date +%s)
  (cd "$(kube_module_dir)" && go build -trimpath -ldflags "${ldflags}" -o "${K8S_BIN_DIR}/${c}" "k8s.io/kubernetes/cmd/${c}")
  record "${c}"
  log "${c} done in $(($(date +%s) - t0))s"
}

start=$(date +%s)
for c in "${todo[@]}"; do
  case "$c" in
    etcd) build_etcd ;;
    *) build_kube "$c" ;;
  esac
done
log "built ${todo[*]} into ${K8S_BIN_DIR} in $(($(date +%s) - start))s"
