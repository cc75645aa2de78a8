#!/usr/bin/env bash
# Configures and builds Release into build/ (used by run.sh and test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --parallel "$(nproc)"
