#!/usr/bin/env bash
# Installs the Debian packages Tokamax builds and tests with, skipping those already present, the
# pinned oneMKL libraries of scripts/mkl_deps.txt and (with the CUDA toolkit) the pinned CUDA
# header libraries and tools of scripts/cuda_deps.txt.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build git pkg-config
  libcli11-dev libyaml-cpp-dev nlohmann-json3-dev libbenchmark-dev catch2
  libhwy-dev libopenblas-dev libdnnl-dev
  # Debian's oneDNN CMake config asks for OpenCL (its GPU runtime) even for a CPU-only build.
  ocl-icd-opencl-dev
  python3 python3-numpy python3-matplotlib
  # The sanitizer and fuzzing builds (scripts/test_sanitized.sh): clang with its runtimes
  # (ASan, UBSan, TSan, libFuzzer).
  clang libclang-rt-dev
)

missing=()
for package in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The CUDA backend's header libraries and tools (pinned wheels, unpacked into .deps/), when the
# CUDA toolkit is installed: `nvcc` on PATH or in /usr/local/cuda.
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  python3 "$(dirname "$0")/install_wheels.py" "$(dirname "$0")/cuda_deps.txt"
fi

# oneMKL's libraries for the `mkl` baselines (pinned wheel, unpacked into .deps/mkl), on x86-64
# Linux, the only platform its wheel exists for.
if [ "$(uname -m)" = "x86_64" ]; then
  python3 "$(dirname "$0")/install_wheels.py" "$(dirname "$0")/mkl_deps.txt"
fi
