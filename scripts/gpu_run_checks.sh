#!/usr/bin/env bash
# The GPU check, on the machine with the GPU. scripts/gpu_check.sh packs this script into its
# bundle as run_checks.sh, beside bin/tokamax and lib/; run it from the unpacked bundle:
#
#   run_checks.sh [RESULTS_DIR]          the check: at most 8 minutes
#   run_checks.sh --tune [RESULTS_DIR]   tunes the cuda implementation on bench_gpu instead
#
# RESULTS_DIR (default: $OUT, else ./gpu_results) receives at most 10 files, each named in the
# summary: summary.txt (the machine, each step's command, exit status and seconds), log.txt
# (everything the steps printed), info.json, verify_cuda_ci_tests.json, verify_ci_tests.json,
# verify_vjp_ci_tests.json, verify_bench_gpu.json, bench_gpu.json, sanitizer.txt; with --tune,
# tune.json and autotuning.json (the cache to ship).
# Commit it as results/gpu/<device id>/ (info.json's device.id).
#
# The machine needs a CUDA 13 driver; cuBLAS, cuDNN and the shared CUDA runtime (for the cublas
# and cudnn baselines) are looked up in the CUDA toolkit's and pip's folders. Environment, for scripts/gpu_check.sh --self-test,
# which runs this on a CPU:
#   TOKAMAX_CHECK_DEVICE     the device to check           (cuda)
#   TOKAMAX_CHECK_IMPLS      the implementations           (cuda,cublas,cublas_grouped,cudnn)
#   TOKAMAX_CHECK_BENCH_TAG  the benchmark catalog's tag   (bench_gpu)
#   TOKAMAX_CHECK_BUDGET_S   seconds for all steps         (460)
#   TOKAMAX_CHECK_BIN        the tokamax to run            (the bundle's bin/tokamax)
#
# The time plan (a lent GPU machine has about 15 minutes in all, its start-up of about 4 and
# every idle wait included): this first call stays under about 8 minutes, each step under its own
# limit and all of them under the budget (a step that would pass it is cut to what is left, one
# with 5 s or less is skipped); results are written as they come (verify and bench keep their
# finished rows when a limit stops them); call again only if about 3 minutes remain after it.
# --tune's budget is what is left of the same one.
set -uo pipefail

tune=0
if [ "${1:-}" = "--tune" ]; then
  tune=1
  shift
fi
here="$(cd "$(dirname "$0")" && pwd)"
results="${1:-${OUT:-$PWD/gpu_results}}"
mkdir -p "$results"
results="$(cd "$results" && pwd)"
tokamax="${TOKAMAX_CHECK_BIN:-$here/bin/tokamax}"
device="${TOKAMAX_CHECK_DEVICE:-cuda}"
impls="${TOKAMAX_CHECK_IMPLS:-cuda,cublas,cublas_grouped,cudnn}"
bench_tag="${TOKAMAX_CHECK_BENCH_TAG:-bench_gpu}"
budget="${TOKAMAX_CHECK_BUDGET_S:-460}"
summary="$results/summary.txt"
log="$results/log.txt"
: >"$summary"
: >"$log"
start=$SECONDS

# Measured ceilings and caches of this run only.
XDG_CACHE_HOME="$(mktemp -d)"
export XDG_CACHE_HOME

note() { echo "$*" | tee -a "$summary"; }

# cuBLAS, cuDNN (and the shared CUDA runtime cudnn-frontend calls) are loaded at run time: pip's
# copies first (nvidia-cublas, nvidia-cudnn-cu13: cuDNN usually lives only there), then the
# toolkit's; a whole-disk search runs at most once, for every library still missing.
pip_dirs=()
sites="$(python3 -c 'import site; print(*site.getsitepackages(), site.getusersitepackages())' \
  2>/dev/null || true)"
for site in $sites; do
  for dir in "$site"/nvidia/*/lib; do
    if [ -d "$dir" ]; then pip_dirs+=("$dir"); fi
  done
done
libraries=(libcublas.so.13 libcudnn.so.9 libcudart.so.13)
find_in_dirs() {
  local dir
  for dir in "${pip_dirs[@]}" /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
    /usr/local/cuda-13*/lib64 /usr/local/cuda-13*/lib /usr/lib/x86_64-linux-gnu; do
    if [ -e "$dir/$1" ]; then
      echo "$dir"
      return
    fi
  done
}
declare -A library_dirs=()
missing=()
for library in "${libraries[@]}"; do
  dir="$(find_in_dirs "$library")"
  if [ -n "$dir" ]; then library_dirs[$library]="$dir"; else missing+=("$library"); fi
done
if [ "${#missing[@]}" -gt 0 ]; then
  names=()
  for library in "${missing[@]}"; do names+=(-o -name "$library"); done
  searched="$(find / -xdev \( "${names[@]:1}" \) \( -path '*site-packages*' -o -path '/opt/*' \) \
    2>/dev/null || true)"
  for library in "${missing[@]}"; do
    found="$(grep -m 1 "/$library\$" <<<"$searched" || true)"
    library_dirs[$library]="not found"
    if [ -n "$found" ]; then library_dirs[$library]="$(dirname "$found")"; fi
  done
fi
for library in "${libraries[@]}"; do
  dir="${library_dirs[$library]}"
  if [ "$dir" != "not found" ] && [[ ":${LD_LIBRARY_PATH:-}:" != *":$dir:"* ]]; then
    export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$dir"
  fi
done

note "tokamax GPU check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
note "bundle: $(head -n 3 "$here/MANIFEST.txt" 2>/dev/null | tr '\n' ' ')"
note "device: $device; implementations: $impls; benchmark tag: $bench_tag; budget: ${budget}s"
note "plan: every step below within ${budget}s of this call (each under its own limit; verify and \
bench write rows as they finish); run again only if about 3 minutes of the machine remain"
for library in "${!library_dirs[@]}"; do note "$library: ${library_dirs[$library]}"; done
{
  echo "== machine"
  uname -a
  nvidia-smi 2>&1 || echo "nvidia-smi: not available"
  echo "== libraries of bin/tokamax"
  ldd "$tokamax" 2>&1
} >>"$log"

# step NAME SECONDS COMMAND...: runs COMMAND with at most SECONDS (and never past the budget),
# its output appended to the log; its exit status and time go to the summary.
step() {
  local name="$1" limit="$2"
  shift 2
  local left=$((budget - (SECONDS - start)))
  if [ "$limit" -gt "$left" ]; then limit="$left"; fi
  if [ "$limit" -le 5 ]; then
    note "step $name: skipped (the ${budget}s budget is spent): $*"
    return
  fi
  echo "== $name (at most ${limit}s): $*" >>"$log"
  local begin=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1
  local rc=$?
  local verdict="exit $rc"
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then verdict="timed out after ${limit}s"; fi
  note "step $name: $verdict, $((SECONDS - begin))s: $*"
}

step info 45 "$tokamax" info --device "$device"
step info-json 20 sh -c "\"$tokamax\" info --device $device --json >\"$results/info.json\""
step list 20 "$tokamax" list --op ragged_dot --device "$device"

if [ "$tune" -eq 1 ]; then
  # The tuner's own budget: what is left of this call's, less a minute for its last candidate.
  step tune "$budget" "$tokamax" tune --op ragged_dot --tag "$bench_tag" --impl cuda \
    --device "$device" --quiet --time-budget $((budget - (SECONDS - start) - 60)) \
    --cache "$results/autotuning.json" \
    --json "$results/tune.json"
  note "done in $((SECONDS - start))s"
  exit 0
fi

# Numerics on the small cases (our kernel alone first, so its verdict exists even if a vendor
# library hangs), the benchmark, numerics on the full-size cases, then the memory and race
# checkers on one small case: the most telling first, should the budget run out. Each
# implementation's run is limited (--run-timeout) well inside its step, and a step that reaches
# its limit gets SIGTERM first: verify and bench then print and write (--json) every row they
# finished, so a slow step loses only its unfinished rows.
step verify-cuda-ci_tests 45 "$tokamax" verify --op ragged_dot --tag ci_tests --impl cuda \
  --device "$device" --run-timeout 20 --json "$results/verify_cuda_ci_tests.json"

step verify-ci_tests 60 "$tokamax" verify --op ragged_dot --tag ci_tests --impl "$impls" \
  --device "$device" --run-timeout 20 --json "$results/verify_ci_tests.json"

step "bench-$bench_tag" 180 "$tokamax" bench --op ragged_dot --tag "$bench_tag" \
  --impl "$impls" --device "$device" --run-timeout 40 --json "$results/bench_gpu.json"

step "verify-$bench_tag" 120 "$tokamax" verify --op ragged_dot --tag "$bench_tag" \
  --impl "$impls" --device "$device" --max-memory 64 --run-timeout 40 \
  --json "$results/verify_bench_gpu.json"

# The backward's cuBLAS baseline (ragged_dot_vjp), whose GEMM plan is tested on the CPU only.
step verify-vjp-ci_tests 60 "$tokamax" verify --op ragged_dot_vjp --tag ci_tests --impl cublas \
  --device "$device" --run-timeout 20 --json "$results/verify_vjp_ci_tests.json"

sanitizer="$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer \
  /usr/local/cuda*/compute-sanitizer/compute-sanitizer 2>/dev/null | head -n 1)"
if [ "$device" = "cuda" ] && [ -n "$sanitizer" ]; then
  for tool in memcheck racecheck; do
    step "sanitizer-$tool" 45 sh -c "\"$sanitizer\" --tool $tool --error-exitcode 1 \
      --print-limit 20 \"$tokamax\" verify --op ragged_dot --name aligned_empty_groups_bf16 \
      --impl $impls --device $device --isolation none >>\"$results/sanitizer.txt\" 2>&1"
  done
else
  note "step sanitizer: not run (device $device, compute-sanitizer: ${sanitizer:-not found})"
fi

note "done in $((SECONDS - start))s; results in $results"
