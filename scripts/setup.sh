#!/usr/bin/env bash
# Idempotent set-up for metafork: the system packages (LLVM 19 for inkwell, Z3 for the
# constraint engine, Graphviz so that the tests check that tree.dot is valid DOT) and a real CUDA compiler (nvcc + ptxas from NVIDIA's pip wheels) in an
# ignored folder. Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(llvm-19-dev libpolly-19-dev libzstd-dev libxml2-dev libffi-dev zlib1g-dev
              libz3-dev libclang-dev clang g++ pkg-config graphviz)
CUDA_DIR=.toolchain/cuda
# Pinned: ptxas is the ground truth the register model is measured and tested against
# (bench/RESULTS.md, tests/counters.rs); a new release can move its counts.
CUDA_VERSION=13.5.37
CUDA_WHEELS=(nvidia-cuda-nvcc==$CUDA_VERSION nvidia-cuda-runtime==$CUDA_VERSION
             nvidia-nvvm==$CUDA_VERSION nvidia-cuda-crt==$CUDA_VERSION)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing system packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ ! -x "$CUDA_DIR/nvidia/cu13/bin/nvcc" ] || [ ! -x "$CUDA_DIR/nvidia/cu13/bin/ptxas" ] \
   || [ ! -d "$CUDA_DIR/nvidia_cuda_nvcc-$CUDA_VERSION.dist-info" ]; then
  echo "setup: installing the CUDA compiler wheels ($CUDA_VERSION) into $CUDA_DIR"
  # pip --target skips folders that already exist, so a partial install is removed first and
  # all four wheels go in one call (see shared/toolchain.md).
  rm -rf "$CUDA_DIR"
  tmp="$CUDA_DIR.tmp.$$"
  rm -rf "$tmp"
  python3 -m pip install -q --disable-pip-version-check --no-deps --target "$tmp" "${CUDA_WHEELS[@]}"
  mv "$tmp" "$CUDA_DIR"
fi
# cuobjdump and nvdisasm: the tests read the machine code of a register-blocked kernel
# (issue 27.5's targets), `make bench-sass` that of every program's top-ranked one.
SASS_DIR=.toolchain/sass
if [ ! -x "$SASS_DIR/nvidia/cu13/bin/cuobjdump" ] || [ ! -x "$SASS_DIR/nvidia/cu13/bin/nvdisasm" ]; then
  echo "setup: installing cuobjdump and nvdisasm ($CUDA_VERSION) into $SASS_DIR"
  rm -rf "$SASS_DIR"
  tmp="$SASS_DIR.tmp.$$"
  rm -rf "$tmp"
  python3 -m pip install -q --disable-pip-version-check --no-deps --target "$tmp" \
    nvidia-cuda-cuobjdump==$CUDA_VERSION nvidia-cuda-nvdisasm==$CUDA_VERSION
  mv "$tmp" "$SASS_DIR"
fi
"$CUDA_DIR/nvidia/cu13/bin/nvcc" --version | tail -n 2
echo "setup: done"
