#!/usr/bin/env bash
# Builds the e2e node image (busybox, /pause and the static binaries given as arguments, installed in
# /usr/local/bin) as an OCI image-layout tar, and imports it into the e2e containerd when it runs.
#
# Usage: hack/e2e-node/image.sh [static-binary ...]
# Environment: E2E_IMAGE (default docker.io/local/kubedevice:e2e)
#              E2E_IMAGE_BINARIES  space-separated binaries, used when none are given as arguments
#                                  (so `E2E_IMAGE_BINARIES="bin/kubedevice-agent ..." up.sh` works)
# The binaries of the previous build are kept when none are given, so a later `up.sh` re-imports the
# same image; each image remembers its own (another image does not change the e2e image's). Binaries must be static (CGO_ENABLED=0, as `make build` builds them).
set -euo pipefail

# shellcheck source=hack/e2e-node/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

{ [ -x "${NODE_BIN}/mkimage" ] && [ -x "${NODE_BIN}/pause" ]; } || die "run hack/e2e-node/install.sh first"
mkdir -p "${WORK}"

bins_file=${IMAGE_FILES}.binaries
if [ $# -eq 0 ] && [ -n "${E2E_IMAGE_BINARIES:-}" ]; then
  # shellcheck disable=SC2086 # a list of paths
  set -- ${E2E_IMAGE_BINARIES}
fi
bins=()
if [ $# -gt 0 ]; then
  for b in "$@"; do
    [ -f "${b}" ] || die "no such binary: ${b}"
    bins+=("$(readlink -f "${b}")")
  done
elif [ -f "${bins_file}" ]; then
  mapfile -t bins <"${bins_file}"
fi
args=()
for b in "${bins[@]}"; do
  args+=(-bin "${b}")
done

log "building image ${IMAGE}${bins[*]:+ with ${bins[*]}}"
out=$("${NODE_BIN}/mkimage" -o "${IMAGE_TAR}" -name "${IMAGE}" -busybox /bin/busybox -pause "${NODE_BIN}/pause" "${args[@]}")
digest=${out##* }
# Remembered only once they made an image.
printf '%s\n' "${bins[@]}" | grep -v '^$' >"${bins_file}" || true
log "wrote ${IMAGE_TAR} (manifest ${digest})"

if [ -S "${CONTAINERD_SOCK}" ] && ctr version >/dev/null 2>&1; then
  if ctr images ls -q "name==${IMAGE}" 2>/dev/null | grep -qx "${IMAGE}" &&
    ctr images ls "name==${IMAGE}" 2>/dev/null | awk 'NR > 1 {print $3}' | grep -qx "${digest}"; then
    log "containerd already has ${IMAGE}@${digest}"
  else
    log "importing ${IMAGE} into containerd"
    # (ctr warns on stderr that cgroup v1 is deprecated: shown only when the import fails.)
    out=$(ctr images import --all-platforms "${IMAGE_TAR}" 2>&1) || { echo "${out}" >&2; die "importing ${IMAGE_TAR} failed"; }
    ctr images ls "name==${IMAGE}" 2>/dev/null | awk 'NR > 1 {print $3}' | grep -qx "${digest}" ||
      die "containerd does not list ${IMAGE}@${digest} after the import"
  fi
elif [ "${IMAGE}" = "${DEFAULT_IMAGE}" ]; then
  log "containerd is not running: the image is imported by up.sh"
else
  log "containerd is not running: ${IMAGE} is not imported (run this again once the cluster is up)"
fi
