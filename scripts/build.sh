#!/usr/bin/env bash
# Configures and builds Release into build/ (used by run.sh and test.sh). A new build folder
# uses Ninja (it keeps both cores busy through the links and the long CUDA compiles); an existing
# one keeps the generator it was configured with.
set -euo pipefail
cd "$(dirname "$0")/.."
generator=()
if [ ! -f build/CMakeCache.txt ] && command -v ninja >/dev/null 2>&1; then
  generator=(-G Ninja)
fi
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --parallel "$(nproc)"
