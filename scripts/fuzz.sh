#!/usr/bin/env bash
# Fuzz the parser with libFuzzer for FUZZ_SECONDS (default 300), seeded with the examples.
# cargo-fuzz wants nightly for sanitizers; these machines have stable 1.95 only, so this runs
# without a sanitizer (`-s none`: safe Rust needs none) and lets the stable compiler accept the
# unstable flags cargo-fuzz passes (RUSTC_BOOTSTRAP=1).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
mkdir -p fuzz/corpus/parse
cp examples/*.mf fuzz/corpus/parse/
export RUSTC_BOOTSTRAP=1
cargo fuzz run parse -s none --release -- \
  -max_total_time="${FUZZ_SECONDS:-300}" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 2>&1 | tee fuzz/last-run.log | grep -E "^(Done|stat::|INFO: seed|INFO: Loaded)|panicked|deadly signal|Test unit written|SUMMARY"
