#!/usr/bin/env bash
# The whole real-node run behind `make e2e-node`: install -> up -> the e2e suite -> down.
# down.sh always runs (also on failure or interrupt); the exit status is the first failure's.
# Prints how long each step took, for CI's budget.
#
# Environment: E2E_NODE_TEST_FLAGS  extra flags for `go test` (e.g. -ginkgo.focus=gated)
#              E2E_NODE_KEEP=1      leave the cluster up after the suite (run down.sh yourself)
set -euo pipefail

# shellcheck source=hack/e2e-node/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[ "$(id -u)" -eq 0 ] || die "make e2e-node needs root: it starts a kubelet and containerd and changes the host"

timings=()
status=0
current=""

step() { # step NAME COMMAND...: runs a step and records its duration and status
  local name=$1 t0 rc=0
  shift
  current=${name}
  t0=$(date +%s)
  log "=== ${name}"
  "$@" || rc=$?
  timings+=("${name} $(($(date +%s) - t0))s$([ "${rc}" -eq 0 ] || echo " (failed: ${rc})")")
  current=""
  return "${rc}"
}

report() {
  log "=== timings"
  local t
  for t in "${timings[@]}"; do
    log "  ${t}"
  done
}

dump_cluster() {
  [ -f "${KUBECONFIG_OUT}" ] || return 0
  log "cluster state after the failure (also in ${OUT_DIR}/logs/cluster-state.txt):"
  {
    kubectl get nodes,pods -A -o wide
    kubectl get events -A --sort-by=.lastTimestamp
  } 2>&1 | tee "${LOGS}/cluster-state.txt" | tail -n 60 >&2 || true
}

finish() {
  local rc=$?
  trap - EXIT INT TERM
  [ "${status}" -ne 0 ] || status=${rc}
  if [ -n "${current}" ]; then
    timings+=("${current} interrupted")
  fi
  if [ "${E2E_NODE_KEEP:-}" = 1 ]; then
    log "E2E_NODE_KEEP=1: the cluster stays up; KUBECONFIG=${KUBECONFIG_OUT}; stop it with hack/e2e-node/down.sh"
  else
    step down "${ROOT}/hack/e2e-node/down.sh" || { [ "${status}" -ne 0 ] || status=1; }
  fi
  report
  if [ "${status}" -eq 0 ]; then log "e2e-node passed"; else log "e2e-node failed (${status})"; fi
  exit "${status}"
}
trap finish EXIT
trap 'status=130; exit 130' INT TERM

step install "${ROOT}/hack/e2e-node/install.sh"
# The suite builds the image's static binaries inside its first spec, under that spec's timeout;
# built here first (same flags, version stamp included, same output), the suite's build is a cache
# hit, so a cold build cache on a busy machine costs time, not a spec timeout.
version_ldflags=$("${ROOT}/hack/version.sh")
step build-binaries env CGO_ENABLED=0 go -C "${ROOT}" build -trimpath -ldflags "-s -w ${version_ldflags}" -o "${OUT_DIR}/image-bin/" \
  ./cmd/kubedevice-agent ./cmd/kubedevice-controller ./cmd/gopher-device-plugin ./cmd/kubedevice
# The previous release, which the upgrade suite installs and upgrades from: built and rendered here
# for the same reason (kept per commit in bin/e2e-node/previous); the suite runs previous.sh again,
# which then only imports its image.
step previous "${ROOT}/hack/e2e-node/previous.sh" --no-image
# A cluster left behind by an interrupted run is taken down first.
step down-stale "${ROOT}/hack/e2e-node/down.sh"
step up "${ROOT}/hack/e2e-node/up.sh"
# shellcheck disable=SC2086
if ! step test env KUBECONFIG="${KUBECONFIG_OUT}" E2E_KUBECTL="${K8S_BIN}/kubectl" E2E_HELM="${ROOT}/bin/helm" E2E_IMAGE="${IMAGE}" \
  go -C "${ROOT}" test -v -tags e2enode -count=1 -timeout 50m ./test/e2e-node/ -ginkgo.v ${E2E_NODE_TEST_FLAGS:-}; then
  status=1
  dump_cluster
fi
