#!/usr/bin/env bash
# Installs what is missing, builds Release into build/, runs `build/tokamax bench` (default: the
# smoke set of every op). Extra arguments go to `tokamax bench`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
exec build/tokamax bench "$@"
