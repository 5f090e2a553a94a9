#!/usr/bin/env bash
# Time `make test` on a fresh clone (its own empty target/ directory): the build of the whole
# workspace plus every test. The crates.io download cache (~/.cargo) and the CUDA wheels are
# reused, so this measures compiling and testing, not downloading. Prints one table row.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git clone -q . "$tmp/metafork"
cp -r .toolchain "$tmp/metafork/.toolchain"
start=$(date +%s.%N)
if ! make -C "$tmp/metafork" test > "$tmp/log" 2>&1; then
  tail -n 40 "$tmp/log"; echo "make test failed"; exit 1
fi
end=$(date +%s.%N)
tests=$(grep -Eo 'ok\. [0-9]+ passed' "$tmp/log" | awk '{s+=$2} END {print s}')
printf '| clean `make test` (build + %s tests) | %.0f s | %s |\n' "$tests" "$(echo "$end - $start" | bc)" "$(git rev-parse --short HEAD)"
