#!/usr/bin/env bash
# Installs the Debian packages Tokamax builds and tests with, skipping those already present.
set -euo pipefail

PACKAGES=(
  build-essential cmake git pkg-config
  libcli11-dev libyaml-cpp-dev nlohmann-json3-dev libbenchmark-dev catch2
  libhwy-dev libopenblas-dev libdnnl-dev
  # Debian's oneDNN CMake config asks for OpenCL (its GPU runtime) even for a CPU-only build.
  ocl-icd-opencl-dev
  python3 python3-numpy python3-matplotlib
)

missing=()
for package in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "installing: ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
