#!/usr/bin/env bash
# Installs what is missing, builds Release into build/, runs every test through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/install_deps.sh
echo "test.sh: dependencies: $(( $(date +%s) - start )) s"
start=$(date +%s)
scripts/build.sh
echo "test.sh: build: $(( $(date +%s) - start )) s"
start=$(date +%s)
ctest --test-dir build --output-on-failure --parallel "$(nproc)" "$@"
echo "test.sh: tests: $(( $(date +%s) - start )) s"
