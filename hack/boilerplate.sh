#!/usr/bin/env bash
# Checks, or with --fix adds, the license header of hack/boilerplate.go.txt at the top of every Go
# file the repository tracks (after a //go:build line and its blank line, where there is one).
# `make verify` runs the check; `hack/boilerplate.sh --fix` adds the header where it is missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

header=hack/boilerplate.go.txt
fix=false
case "${1:-}" in
  --fix) fix=true ;;
  "") ;;
  *) echo "usage: $0 [--fix]" >&2; exit 2 ;;
esac

# has_header FILE: the header's lines appear, in order, as the file's first lines after an
# optional build constraint (the year line is matched as written in the header).
# Nothing here reads a file partly through a pipe: with pipefail, a writer killed by SIGPIPE when
# its reader stops early fails the check at random.
has_header() {
  local f=$1 start=1 lines
  if [[ "$(sed -n 1p "${f}")" == "//go:build "* ]]; then
    start=3
  fi
  lines=$(wc -l <"${header}")
  cmp -s <(sed -n "${start},$((start + lines - 1))p" "${f}") "${header}"
}

missing=()
while IFS= read -r f; do
  [ -f "${f}" ] || continue
  has_header "${f}" || missing+=("${f}")
done < <(git ls-files -co --exclude-standard -- '*.go')

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if ! ${fix}; then
  echo "These Go files lack the license header of ${header} (add it with hack/boilerplate.sh --fix):"
  printf '  %s\n' "${missing[@]}"
  exit 1
fi
for f in "${missing[@]}"; do
  tmp=$(mktemp)
  if head -n 1 "${f}" | grep -q '^//go:build '; then
    { head -n 2 "${f}"; cat "${header}"; echo; tail -n +3 "${f}"; } >"${tmp}"
  else
    { cat "${header}"; echo; cat "${f}"; } >"${tmp}"
  fi
  cat "${tmp}" >"${f}"
  rm -f "${tmp}"
  echo "added the header to ${f}"
done
