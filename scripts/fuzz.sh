#!/usr/bin/env bash
# Fuzz with libFuzzer for FUZZ_SECONDS (default 300): FUZZ_TARGET `pipeline` (default: parse,
# then build every tree and emit every file under a small time budget) or `parse` (the front
# end only), seeded with the examples. FUZZ_RUNS, when set, stops after that many executions.
# cargo-fuzz wants nightly for sanitizers; these machines have stable 1.95 only, so this runs
# without a sanitizer (`-s none`: safe Rust needs none) and lets the stable compiler accept the
# unstable flags cargo-fuzz passes (RUSTC_BOOTSTRAP=1).
set -euo pipefail
cd "$(dirname "$0")/.."
target="${FUZZ_TARGET:-pipeline}"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
mkdir -p "fuzz/corpus/$target"
cp examples/*.mf "fuzz/corpus/$target/"
export RUSTC_BOOTSTRAP=1
# -timeout is 60 s, not 20: run at `nice 19` beside builds and nvcc, the target was starved
# into two false timeouts on inputs that take 0.3 s and 3 s alone (bench/RESULTS.md, eleventh
# session); a hang still stops the run, a minute later.
runs=()
[ -n "${FUZZ_RUNS:-}" ] && runs=(-runs="$FUZZ_RUNS")
cargo fuzz run "$target" -s none --release -- \
  -max_total_time="${FUZZ_SECONDS:-300}" "${runs[@]}" -max_len=4096 -timeout=60 -rss_limit_mb=4096 \
  -print_final_stats=1 2>&1 | tee "fuzz/last-run-$target.log" | grep -E "^(Done|stat::|INFO: seed|INFO: Loaded)|panicked|deadly signal|Test unit written|SUMMARY"
