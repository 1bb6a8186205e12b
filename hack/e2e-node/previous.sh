#!/usr/bin/env bash
# Builds the previous release of kubedevice (hack/e2e-node/previous-release: a commit of main in
# this clone) for the upgrade suite (test/e2e-node/upgrade_test.go), into bin/e2e-node/previous/:
#
#   bin/                 its static binaries (CGO_ENABLED=0, as the e2e image's)
#   kubedevice.yaml      its overlays/kubedevice (config/default) with the image below
#   kubedevice-dra.yaml  its overlays/kubedevice-dra, the same way (when the commit has one)
#   chart/               its charts/kubedevice
#   commit               the commit all of the above were made from (written last)
#
# and, unless --no-image, puts the binaries into the image docker.io/local/kubedevice:previous
# ($PREVIOUS_IMAGE) with image.sh, which imports it into the e2e containerd when that runs.
# Everything but the image is kept per commit: a second run only rebuilds the image (a second).
#
# Usage: hack/e2e-node/previous.sh [--no-image]
# Environment: PREVIOUS_COMMIT and PREVIOUS_VERSION override the pin, PREVIOUS_IMAGE the image.
# Needs the commit in this clone: a shallow clone lacks it (git fetch --unshallow).
set -euo pipefail

# shellcheck source=hack/e2e-node/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

given_commit=${PREVIOUS_COMMIT:-} given_version=${PREVIOUS_VERSION:-}
# shellcheck source=hack/e2e-node/previous-release
source "${ROOT}/hack/e2e-node/previous-release"
PREVIOUS_COMMIT=${given_commit:-${PREVIOUS_COMMIT}}
PREVIOUS_VERSION=${given_version:-${PREVIOUS_VERSION}}
PREVIOUS_IMAGE=${PREVIOUS_IMAGE:-docker.io/local/kubedevice:previous}
OUT=${OUT_DIR}/previous

with_image=true
case "${1:-}" in
  --no-image) with_image=false ;;
  "") ;;
  *) die "usage: $0 [--no-image]" ;;
esac

# need_commit: the pinned commit is in this clone, or a message that says how to get it.
need_commit() {
  git -C "${ROOT}" cat-file -e "${PREVIOUS_COMMIT}^{commit}" 2>/dev/null && return 0
  # A shallow or partial clone: its origin has the commit (main's history).
  if git -C "${ROOT}" remote get-url origin >/dev/null 2>&1; then
    log "the previous release ${PREVIOUS_COMMIT} is not in this clone: fetching it from origin"
    git -C "${ROOT}" fetch --quiet origin "${PREVIOUS_COMMIT}" 2>/dev/null || true
    git -C "${ROOT}" cat-file -e "${PREVIOUS_COMMIT}^{commit}" 2>/dev/null && return 0
  fi
  local why="this clone does not have it"
  if [ "$(git -C "${ROOT}" rev-parse --is-shallow-repository 2>/dev/null)" = true ]; then
    why="this clone is shallow"
  fi
  die "the previous release, commit ${PREVIOUS_COMMIT} (hack/e2e-node/previous-release), is not in ${ROOT}: ${why}. \
Fetch the history: git -C ${ROOT} fetch --unshallow (or git fetch origin ${PREVIOUS_COMMIT}; on CI, check out with full depth)"
}

# render OVERLAY: the previous tree's hack/e2e-node/overlays/OVERLAY with its image at
# PREVIOUS_IMAGE, into NEW/OVERLAY.yaml, as kubectl renders it for `apply -k`.
render() {
  local name=$1 dir=${NEW}/overlays/$1
  mkdir -p "${dir}"
  cat >"${dir}/kustomization.yaml" <<KUSTOMIZATION
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- ../../src/hack/e2e-node/overlays/${name}
images:
- name: ${PREVIOUS_IMAGE%:*}
  newTag: ${PREVIOUS_IMAGE##*:}
KUSTOMIZATION
  "${K8S_BIN}/kubectl" kustomize "${dir}" >"${NEW}/${name}.yaml"
  grep -q "image: ${PREVIOUS_IMAGE}\$" "${NEW}/${name}.yaml" || die "${name}.yaml does not run ${PREVIOUS_IMAGE}"
}

# build: the commit's tree, binaries, manifests and chart into NEW.
build() {
  local t0 ldflags=""
  t0=$(date +%s)
  mkdir -p "${NEW}/src" "${NEW}/bin"
  git -C "${ROOT}" archive --format=tar "${PREVIOUS_COMMIT}" | tar -x -C "${NEW}/src"
  # Its own version stamp, when it has one (releases from 0.2.0 on): the tree is no clone, so
  # the commit is given.
  if [ -x "${NEW}/src/hack/version.sh" ]; then
    ldflags=$(env -u VERSION GIT_COMMIT="${PREVIOUS_COMMIT:0:12}" "${NEW}/src/hack/version.sh")
  fi
  log "building the previous release's binaries (${PREVIOUS_VERSION}, ${PREVIOUS_COMMIT:0:12})"
  (cd "${NEW}/src" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath -ldflags "-s -w ${ldflags}" -o "${NEW}/bin/" ./cmd/...)
  render kubedevice
  if [ -d "${NEW}/src/hack/e2e-node/overlays/kubedevice-dra" ]; then
    render kubedevice-dra
  fi
  cp -a "${NEW}/src/charts/kubedevice" "${NEW}/chart"
  # The tree (git archive, in src/) is a Go module of the same path nested in this one: not kept,
  # so nothing that walks bin/ meets a second copy of the sources.
  rm -rf "${NEW}/src" "${NEW}/overlays"
  echo "${PREVIOUS_COMMIT}" >"${NEW}/commit"
  log "built the previous release in $(($(date +%s) - t0))s"
}

[ -x "${K8S_BIN}/kubectl" ] || die "missing ${K8S_BIN}/kubectl: run hack/e2e-node/install.sh first"
if ! [[ "${PREVIOUS_COMMIT}" =~ ^[0-9a-f]{40}$ ]]; then
  # A short or symbolic $PREVIOUS_COMMIT: the full commit, which the cache and the suite go by.
  need_commit
  PREVIOUS_COMMIT=$(git -C "${ROOT}" rev-parse --verify "${PREVIOUS_COMMIT}^{commit}")
fi
if [ "$(cat "${OUT}/commit" 2>/dev/null)" = "${PREVIOUS_COMMIT}" ]; then
  log "the previous release ${PREVIOUS_VERSION} (${PREVIOUS_COMMIT:0:12}) is built in ${OUT}"
else
  need_commit
  NEW=${OUT}.new
  rm -rf "${NEW}"
  build
  rm -rf "${OUT}"
  mv "${NEW}" "${OUT}"
fi

if ${with_image}; then
  E2E_IMAGE=${PREVIOUS_IMAGE} "${ROOT}/hack/e2e-node/image.sh" "${OUT}"/bin/*
fi
