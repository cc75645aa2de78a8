#!/usr/bin/env bash
# Prepares the GPU check here, on a machine without a GPU, and prints the one command that runs it
# on a machine with one (a CUDA 13 driver, no Debian packages, no network).
#
#   scripts/gpu_check.sh [--no-build] [--build-dir DIR] [--bundle FILE] [--self-test]
#
# Builds Release into build/ (scripts/build.sh; --no-build uses DIR as it is), then packs FILE
# (default .gpu/tokamax-gpu.tar.gz, git-ignored; under 64 MiB):
#   tokamax-gpu/bin/tokamax     the program, installed with RPATH $ORIGIN/../lib
#   tokamax-gpu/lib/            every shared library it and OpenBLAS (loaded at run time) need
#                               beyond the C/C++ runtime
#   tokamax-gpu/run_checks.sh   scripts/gpu_run_checks.sh: what runs on the GPU machine
#   tokamax-gpu/MANIFEST.txt    commit, date, the files and their sizes
# --self-test then unpacks the bundle and starts it with every Debian copy of the libraries it
# carries hidden (a private mount namespace puts an empty file over each), and runs its check
# script on this machine's CPU, as a CUDA-less rehearsal. Exit status 77: no mount namespace here.
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=build
bundle=.gpu/tokamax-gpu.tar.gz
do_build=1
self_test=0
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) do_build=0 ;;
    --build-dir)
      build_dir="$2"
      shift
      ;;
    --bundle)
      bundle="$2"
      shift
      ;;
    --self-test) self_test=1 ;;
    *)
      echo "gpu_check.sh: unknown argument '$1' (expected --no-build, --build-dir DIR," \
        "--bundle FILE, --self-test)" >&2
      exit 2
      ;;
  esac
  shift
done

if [ "$do_build" -eq 1 ]; then
  scripts/install_deps.sh
  scripts/build.sh
fi
if [ ! -x "$build_dir/tokamax" ]; then
  echo "gpu_check.sh: $build_dir/tokamax is not built" >&2
  exit 2
fi
if ! grep -q '^TOKAMAX_CUDA_BUILD:INTERNAL=nvcc' "$build_dir/CMakeCache.txt"; then
  echo "gpu_check.sh: $build_dir was configured without the CUDA backend:" \
    "$(grep '^TOKAMAX_CUDA_BUILD:INTERNAL=' "$build_dir/CMakeCache.txt" | cut -d= -f2-)" >&2
  exit 2
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
stage="$work/tokamax-gpu"
cmake --install "$build_dir" --prefix "$stage" --component program >/dev/null

# The C/C++ runtime, which the GPU machine has: everything else comes along.
is_runtime() {
  case "$1" in
    linux-vdso.so.* | ld-linux-*.so.* | libc.so.* | libm.so.* | libstdc++.so.* | libgcc_s.so.* | \
      libpthread.so.* | libdl.so.* | librt.so.*) return 0 ;;
  esac
  return 1
}
mkdir -p "$stage/lib"
# copy_with_dependencies FILE: FILE (unless it is the program) and what it needs, by soname.
copy_with_dependencies() {
  local name path
  while read -r name _ path _; do
    if is_runtime "$name"; then continue; fi
    if [ -z "$path" ] || [ ! -e "$path" ]; then
      echo "gpu_check.sh: $1 needs $name, which is not installed here" >&2
      exit 1
    fi
    cp -L "$path" "$stage/lib/$name"
  done < <(ldd "$1" | grep '=>')
}
copy_with_dependencies "$stage/bin/tokamax"
# (awk reads to the end: an early exit would break ldconfig's pipe, a failure under pipefail)
openblas="$(ldconfig -p | awk '!found && /libopenblas\.so\.0 .*x86-64/ {print $NF; found = 1}')"
if [ -n "$openblas" ]; then
  cp -L "$openblas" "$stage/lib/libopenblas.so.0"
  copy_with_dependencies "$openblas"
fi
cp scripts/gpu_run_checks.sh "$stage/run_checks.sh"
{
  echo "commit $(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- . ':!results' || echo -dirty)"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $("$build_dir/tokamax" info --json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["device"]["id"])')"
  grep '^TOKAMAX_CUDA_BUILD:INTERNAL=' "$build_dir/CMakeCache.txt" | cut -d= -f2- |
    sed 's/^/cuda /'
  (cd "$stage" && find . -type f -printf '%10s %p\n' | sort -k2)
} >"$stage/MANIFEST.txt"

mkdir -p "$(dirname "$bundle")"
tar -C "$work" -czf "$bundle" tokamax-gpu
size=$(stat -c %s "$bundle")
limit=$((64 * 1024 * 1024))
if [ "$size" -ge "$limit" ]; then
  echo "gpu_check.sh: $bundle is $((size / 1048576)) MiB, over the 64 MiB a GPU machine takes" >&2
  exit 1
fi
echo "The GPU check is ready: $bundle ($((size / 1048576)) MiB, $(head -n 1 "$stage/MANIFEST.txt"))."
echo "On the GPU machine, in a copy of this checkout with .gpu/ (device tool: carry [\".gpu\"],"
echo "timeout_s 600), run:"
echo
echo "  tar -xzf .gpu/tokamax-gpu.tar.gz -C /tmp && /tmp/tokamax-gpu/run_checks.sh \"\${OUT:-\$PWD/gpu_results}\""
echo
echo "It finishes within 8 minutes; copy its results folder to results/gpu/<device id>/ (the id is"
echo "in its info.json)."

if [ "$self_test" -eq 0 ]; then exit 0; fi

# --- The rehearsal: Debian's copies out of reach, the check script on the CPU. ----------------
if ! unshare -m true 2>/dev/null; then
  echo "gpu_check.sh --self-test: no private mount namespace here (unshare -m)" >&2
  exit 77
fi
unpacked="$work/unpacked"
results="$work/results"
mkdir -p "$unpacked" "$results"
tar -xzf "$bundle" -C "$unpacked"
# Each library the bundle carries, as this machine's loader would find it.
hidden=()
for lib in "$unpacked"/tokamax-gpu/lib/*; do
  system="$(ldconfig -p | awk -v n="$(basename "$lib")" '!found && $1 == n && /x86-64/ {print $NF; found = 1}')"
  if [ -n "$system" ]; then hidden+=("$(readlink -f "$system")"); fi
done
echo
echo "Self-test: the bundle, with these system libraries hidden: ${hidden[*]}"
empty="$work/empty"
: >"$empty"
export TOKAMAX_CHECK_DEVICE=cpu TOKAMAX_CHECK_IMPLS=cpu,onednn,openblas TOKAMAX_CHECK_BENCH_TAG=smoke
unshare -m bash -euo pipefail -c '
  empty="$1"; program="$2"; results="$3"; shift 3
  for lib in "$@"; do mount --bind "$empty" "$lib"; done
  for lib in "$@"; do
    if [ -s "$lib" ]; then echo "still readable: $lib" >&2; exit 1; fi
  done
  # Every library the program loads (OpenBLAS at run time), from where.
  LD_DEBUG=libs "$program/bin/tokamax" verify --op ragged_dot --tag smoke --impl openblas,onednn \
    --isolation none 2>&1 >/dev/null | grep "calling init:" | sed "s/.*calling init: /loaded: /"
  "$program/run_checks.sh" "$results"
' _ "$empty" "$unpacked/tokamax-gpu" "$results" "${hidden[@]}"
# Every step ran and passed.
failed="$(grep '^step ' "$results/summary.txt" | grep -v ': exit 0,' |
  grep -v '^step sanitizer: not run' || true)"
if [ -n "$failed" ]; then
  echo "gpu_check.sh --self-test: failed steps:" >&2
  echo "$failed" >&2
  exit 1
fi
for file in info.json verify_ci_tests.json verify_bench_gpu.json bench_gpu.json; do
  python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$results/$file"
done
echo "gpu_check.sh --self-test: the bundle ran with the system copies hidden; all steps passed."
