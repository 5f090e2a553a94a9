#!/usr/bin/env bash
# The ranking model against every tuning sweep measured so far (bench/measured/*/): for each
# sweep, `metafork tune` at the sweep's sizes on the profile of the GPU that measured it, then
# bench/rank_check.py's row. Usage: bench/rank_all.sh [METAFORK_BINARY] (default
# target/release/metafork): run it with two binaries to compare a model change before/after.
# A sweep's program and sizes come from the table below (the gpu-check names, bench/gpu_check.rs).
set -eu
cd "$(dirname "$0")/.."
bin=${1:-target/release/metafork}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source_of() {
  case $1 in
    polybench-*) echo "examples/polybench/${1#polybench-}.mf" ;;
    nrm2|layernorm_red) echo "examples/reductions/$1.mf" ;;
    *) echo "examples/$1.mf" ;;
  esac
}
echo "| sweep | device | joined | Spearman | fastest's model rank | #1 / fastest | top 10 / fastest |"
echo "|---|---|---|---|---|---|---|"
for tsv in bench/measured/*/tune-*.tsv bench/measured/*/run*/tune/*/all.tsv bench/measured/*/*-all.tsv ; do
  [ -f "$tsv" ] || continue
  case $tsv in
    */tune/*/all.tsv) name=$(basename "$(dirname "$tsv")") ;;
    *-all.tsv) name=$(basename "$tsv" -all.tsv) ;;
    *) name=$(basename "$tsv" .tsv); name=${name#tune-} ;;
  esac
  case $name in *coarsened*) continue ;; esac
  src=$(source_of "$name")
  [ -f "$src" ] || { echo "| $tsv | no program for \`$name\` | | | | | |"; continue; }
  device=$(head -1 "$tsv" | cut -f1)
  case $device in *H100*) profile=h100 ;; *H200*) profile=h200 ;; *) echo "| $tsv | unknown device $device | | | | | |"; continue ;; esac
  sizes=$(head -1 "$tsv" | cut -f3 | tr -d ' ' | tr ',' '\n' | sed 's/:/=/' | sed 's/^/--size /' | tr '\n' ' ')
  # shellcheck disable=SC2086
  "$bin" tune "$src" --device "$profile" $sizes -o "$work/tune.yaml" > /dev/null 2>&1 || { echo "| $tsv | tune failed | | | | | |"; continue; }
  python3 bench/rank_check.py "$tsv" "$work/tune.yaml" | tail -n +3 | sed "s#^| [^ |]*\( ([^)]*)\)\? |#| $name\1 | $profile |#"
done
