#!/usr/bin/env bash
# Installs what is missing, builds Release into build/, runs every test through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
ctest --test-dir build --output-on-failure --parallel "$(nproc)" "$@"
