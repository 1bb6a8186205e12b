#!/usr/bin/env bash
# Prints the Go linker flags that give a kubedevice binary its version and commit
# (internal/version), for every build path: the Makefile, hack/e2e-node/e2e.sh, the real-node
# suite's image, hack/e2e-node/previous.sh.
#
#   go build -ldflags "-s -w $(hack/version.sh)" ./cmd/...
#
# The version is $VERSION, else the appVersion of charts/kubedevice/Chart.yaml (the release: the
# image tag config/default and the chart deploy). The commit is $GIT_COMMIT, else the clone's HEAD
# (12 hex digits) with "-dirty" when a tracked file differs from it, else nothing: the binary then
# says "unknown". `hack/version.sh --version` prints the version alone.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

pkg=github.com/kubedevice/kubedevice/internal/version

version=${VERSION:-$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' charts/kubedevice/Chart.yaml)}
[ -n "${version}" ] || { echo "hack/version.sh: no appVersion in charts/kubedevice/Chart.yaml" >&2; exit 1; }
if [ "${1:-}" = --version ]; then
  echo "${version}"
  exit 0
fi

commit=${GIT_COMMIT:-}
if [ -z "${commit}" ] && commit=$(git rev-parse --short=12 HEAD 2>/dev/null); then
  # Refresh the index first, so a file touched but unchanged does not count as a change.
  git update-index -q --refresh >/dev/null 2>&1 || true
  git diff-index --quiet HEAD -- 2>/dev/null || commit="${commit}-dirty"
fi
echo "-X ${pkg}.version=${version}${commit:+ -X ${pkg}.commit=${commit}}"
