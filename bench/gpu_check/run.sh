#!/usr/bin/env bash
# gpu-check, the GPU part (issue 27.6): run on a machine with an NVIDIA GPU, nvcc,
# compute-sanitizer and python3 (PyTorch for the cuBLAS reference). Prepared by `make gpu-check`.
#   1. builds every programs/<name>/check*.cu with its kernels (-fmad=false: see check.cu's
#      header for the tolerance) and runs it: every distinct kernel at two sizes against the
#      serial program, compiled by nvcc's host compiler;
#   2. runs each check again, small sizes only, under compute-sanitizer memcheck and racecheck
#      (every distinct kernel once under each tool);
#   3. times cuBLAS SGEMM (PyTorch, TF32 off) at the matmul harness's size;
#   4. builds and runs each tune/<name>/ harness: every admissible configuration at a realistic
#      size, the model's first choice against the fastest (median of 7 timed runs each, every
#      answer checked against the serial program), then the default search (top 10 + local);
#   5. writes results.md (one table per part) and prints it.
# Environment: ARCH (default native), JOBS (default nproc), QUICK=1 (parts 1 and 2 only: the
# correctness runs and the sanitizers, a few minutes for 46 programs), SKIP_CHECKS=1 (parts 3-5
# only, keeping logs/ from an earlier QUICK=1 run: so that each half fits a 10-minute command),
# TUNE="transpose matvec" (part 4 for these tuning programs only, in this order; default all of
# tune/),
# TUNE_S (seconds for each harness's --all run, default 500; its search gets 300 or TUNE_S,
# whichever is less; both append to their cache as candidates finish, so a stopped run keeps
# what it measured), SAVE_TO=DIR (also pack results.md, logs/ and every tuning cache and
# output into DIR/gpu-check-results.tgz, one file: a device runner that returns only what a
# command leaves in one folder, and only so many files, loses the rest).
set -u
cd "$(dirname "$0")"
save_results() {
  if [ -n "${SAVE_TO:-}" ]; then
    tar czf "$SAVE_TO/gpu-check-results.tgz" results.md logs $(ls tune/profile.txt tune/*/*.tsv tune/*/*.txt tune/*/*.yaml 2>/dev/null) \
      && echo "results packed into $SAVE_TO/gpu-check-results.tgz"
  fi
}
export ARCH=${ARCH:-native}
JOBS=${JOBS:-$(nproc)}
if [ "${SKIP_CHECKS:-0}" != 1 ]; then rm -rf logs; fi
mkdir -p logs
nvidia-smi -L > logs/device.txt 2>&1 || echo "nvidia-smi failed" > logs/device.txt
nvcc --version | tail -1 >> logs/device.txt
if [ "${SKIP_CHECKS:-0}" != 1 ]; then

build_program() {
  local dir=$1 name
  name=$(basename "$dir")
  (
    cd "$dir" || exit 1
    kernels=$(ls *.cu | grep -v '^check')
    for c in check*.cu; do
      nvcc -O2 -fmad=false -Xcompiler -ffp-contract=off,-fwrapv -arch="$ARCH" -o "${c%.cu}" "$c" $kernels || exit 1
    done
  ) > "logs/build-$name.log" 2>&1 || echo "BUILD\t$name\tFAIL" >> logs/build-failures.tsv
}
export -f build_program
echo "[1/5] ($(date +%T)) building $(ls -d programs/* | wc -l) check programs ($JOBS at a time)"
ls -d programs/* | xargs -P "$JOBS" -I{} bash -c 'build_program {}'

# Each check program in its own process, JOBS at a time (they share the GPU; nothing here is
# timed). A program's lines go to its own file, joined in order at the end; its exit status is
# taken before anything else runs (a command substitution would overwrite `$?`).
run_check() {
  local exe=$1 program check status
  program=$(basename "$(dirname "$exe")")
  check=$(basename "$exe")
  timeout 300 "$exe" > "logs/cases-$program-$check.part" 2> "logs/run-$program-$check.err"
  status=$?
  printf 'RUN\t%s\t%s\t%s\n' "$program" "$check" "$status" > "logs/runs-$program-$check.part"
}
export -f run_check
echo "[1/5] running them ($(date +%T))"
for exe in programs/*/check programs/*/check_*; do
  [ -x "$exe" ] && echo "$exe"
done | xargs -P "$JOBS" -I{} bash -c 'run_check {}'
cat logs/cases-*.part > logs/cases.tsv 2>/dev/null
cat logs/runs-*.part > logs/runs.tsv 2>/dev/null
rm -f logs/*.part

sanitize() {
  local exe=$1 tool=$2 name status
  name="$(basename "$(dirname "$exe")")/$(basename "$exe")"
  timeout 600 compute-sanitizer --tool "$tool" --error-exitcode 9 "$exe" --small > "logs/san-$tool-${name//\//-}.log" 2>&1
  status=$?
  summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "logs/san-$tool-${name//\//-}.log" | tail -1)
  echo -e "SAN\t$name\t$tool\t$status\t$summary"
}
export -f sanitize
echo "[2/5] compute-sanitizer memcheck and racecheck ($(date +%T))"
for exe in programs/*/check programs/*/check_*; do
  [ -x "$exe" ] || continue
  for tool in memcheck racecheck; do echo "$exe $tool"; done
done | xargs -P 4 -n 2 bash -c 'sanitize "$0" "$1"' > logs/sanitizer.tsv
fi

if [ "${QUICK:-0}" = 1 ]; then
  echo "[5/5] report, parts 1-2 only ($(date +%T))"
  python3 report.py > results.md
  cat results.md
  save_results
  exit 0
fi

echo "[3/5] cuBLAS SGEMM ($(date +%T))"
n=$(sed -n 's/.*n=\([0-9]*\).*/\1/p' tune/matmul/sizes.txt)
timeout 120 python3 cublas.py "${n:-2048}" > logs/cublas.txt 2>&1 || echo "cublas.py failed" >> logs/cublas.txt

echo "[4/5] tuning harnesses ($(date +%T))"
TUNE_S=${TUNE_S:-500}
SEARCH_S=$(( TUNE_S < 300 ? TUNE_S : 300 ))
tune_dirs=$(ls -d tune/*/)
if [ -n "${TUNE:-}" ]; then tune_dirs=$(for name in $TUNE; do echo "tune/$name"; done); fi
# One harness per schedule (`<schedule>_harness.cu` with its `<schedule>_leaf*.cu`), all built
# first, JOBS at a time, then timed one at a time (they would disturb each other's timings). The
# caches key every line by schedule, so the schedules of a program share them.
harnesses=()
for dir in $tune_dirs; do
  if [ ! -d "$dir" ]; then echo "  no tuning program $(basename "$dir") in tune/"; continue; fi
  for h in "$dir"/*_harness.cu; do harnesses+=("$h"); done
done
build_harness() {
  local dir schedule
  dir=$(dirname "$1"); schedule=$(basename "$1" _harness.cu)
  cd "$dir" && nvcc -O3 -arch="$ARCH" -o "harness-$schedule" "${schedule}_harness.cu" "${schedule}"_leaf*.cu > "build-$schedule.log" 2>&1
}
export -f build_harness
echo "  building ${#harnesses[@]} harnesses ($(date +%T))"
printf '%s\n' "${harnesses[@]}" | xargs -P "$JOBS" -I{} bash -c 'build_harness {}'
for h in "${harnesses[@]}"; do
  dir=$(dirname "$h"); schedule=$(basename "$h" _harness.cu)
  echo "  $(basename "$dir"): $schedule ($(date +%T))"
  ( cd "$dir" && [ -x "harness-$schedule" ] && timeout "$TUNE_S" "./harness-$schedule" --all --cache all.tsv "wisdom-$schedule.yaml" > "harness-$schedule.txt" 2> "harness-$schedule.err"; echo $? > "status-$schedule.txt"
    [ -x "harness-$schedule" ] && timeout "$SEARCH_S" "./harness-$schedule" --cache search.tsv "wisdom-search-$schedule.yaml" > "search-$schedule.txt" 2> "search-$schedule.err"; echo $? > "search-status-$schedule.txt" )
done

echo "[5/5] report ($(date +%T))"
python3 report.py > results.md
cat results.md
save_results
