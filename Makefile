# metafork: `make demo` (set-up, build, then the main job on an example) and `make test`
# (set-up, then every test of the workspace, with a real nvcc/ptxas required).
SHELL := /bin/bash
CUDA_BIN := $(CURDIR)/.toolchain/cuda/nvidia/cu13/bin
SASS_BIN := $(CURDIR)/.toolchain/sass/nvidia/cu13/bin
export LLVM_SYS_191_PREFIX := /usr/lib/llvm-19
export PATH := $(CUDA_BIN):$(SASS_BIN):$(HOME)/.cargo/bin:$(PATH)

FUZZ_SECONDS ?= 300

.PHONY: setup build demo test fuzz bench-build bench-counters bench-replay bench-pipeline bench-expansions bench-gen bench-spaces bench-verify bench-ppcg bench-polybench bench-sass gpu-check clean

setup:
	@bash scripts/setup.sh

build: setup
	cargo build --release

demo: build
	./target/release/metafork gen --emit-cuda examples/matmul.mf -o out/matmul
	@echo; echo "Wrote: $$(ls out/matmul | tr '\n' ' ')"

# A fresh ptxas cache per run (llvm-passes/src/compile_cache.rs): the tests share nvcc's reports
# within a run, and every run compiles for real at least once.
test: setup
	@cache=$$(mktemp -d) && trap 'rm -rf "$$cache"' EXIT && \
	echo "METAFORK_CACHE_DIR=$$cache METAFORK_REQUIRE_NVCC=1 cargo test --workspace" && \
	METAFORK_CACHE_DIR="$$cache" METAFORK_REQUIRE_NVCC=1 cargo test --workspace

# libFuzzer on the whole pipeline (FUZZ_TARGET=parse: the front end only); needs cargo-fuzz,
# see scripts/fuzz.sh. Not part of `make test`.
FUZZ_TARGET ?= pipeline
fuzz: setup
	FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_TARGET=$(FUZZ_TARGET) bash scripts/fuzz.sh

# Register estimate against ptxas over every example kernel (the table in bench/RESULTS.md).
bench-counters: setup
	cargo bench --bench counters

# The register model replayed on the IR and ptxas counts a `bench-counters` run saved
# (COUNTERS_IR=DIR COUNTERS_DUMP=FILE): REPLAY_IR=DIR REPLAY_DUMP=FILE make bench-replay.
bench-replay:
	cargo bench -p llvm-passes --bench replay

# The counters' pipeline against `default<O2>`: identical IR on every code of the corpus,
# and the time each takes per module.
bench-pipeline: setup
	cargo bench --bench pipeline

# Registers ptxas's expansions of division hold (the register model's expansion table).
bench-expansions: setup
	python3 bench/expansions.py

# Decision-tree generation time, Z3 queries, nodes and leaves per example.
bench-gen: setup
	cargo bench --bench gen

# Whole `gen --emit-cuda` processes on the PolyBench kernels against PPCG's times (issue 25).
bench-ppcg: build
	cargo bench --bench ppcg

# Every PolyBench program through gen, nvcc (sm_75/80/90) and verify: one table (issue 26.3).
bench-polybench: build
	cargo bench --bench polybench

# The machine code of each program's top-ranked kernel at sm_90 (issue 27.5): hot-loop
# instructions, FMA share, loads per FMA, 64-bit integer operations; cuobjdump and nvdisasm
# come as NVIDIA's pip wheels (see ../shared/toolchain.md), installed into .toolchain/sass
# by `make setup`.
bench-sass: setup
	cargo bench --bench sass

# The generated kernels on a real GPU (issue 27.6): prepares gpu-check/ here (every distinct
# leaf kernel at two sizes against the serial program, compute-sanitizer, the tuner against an
# exhaustive sweep, matmul against cuBLAS) and runs it when this machine has a GPU; elsewhere,
# copy the folder to a GPU machine and run `bash gpu-check/run.sh` there (nvcc, python3).
# GPU_CHECK_DEVICE: the device profile the tuner ranks with (h100, h200, a100, ... or a file).
GPU_CHECK_DEVICE ?= h100
gpu-check: build
	GPU_CHECK_DEVICE=$(GPU_CHECK_DEVICE) cargo bench --bench gpu_check -- $(CURDIR)/gpu-check
	@if nvidia-smi -L >/dev/null 2>&1; then bash gpu-check/run.sh; else echo "No GPU here: run 'bash gpu-check/run.sh' on a GPU machine; it writes gpu-check/results.md"; fi

# Search-space construction against Kernel Tuner's times (bench/tuning-spaces.yaml).
bench-spaces: setup
	cargo bench --bench spaces

# Verifying every leaf of the paper's four examples (Z3 checks and differential runs).
bench-verify: setup
	cargo bench --bench verify

# Time a clean build and test run (the figure recorded in bench/RESULTS.md).
bench-build: setup
	bash bench/build_time.sh

clean:
	cargo clean
