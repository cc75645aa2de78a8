#!/usr/bin/env bash
# The suite under sanitizers, then the fuzz targets (.ci/run runs this after scripts/test.sh).
#
#   build-asan/  clang, AddressSanitizer + UndefinedBehaviorSanitizer (-fno-sanitize-recover):
#                the library, the CLI, every test, and the libFuzzer targets. ctest runs the
#                whole suite but the tests listed in ASAN_EXCLUDE below (the fuzz targets'
#                corpus and regression replays included), then scripts/fuzz.sh fuzzes every
#                target, FUZZ_BUDGET seconds split over the targets.
#   build-tsan/  clang, ThreadSanitizer: the tests of the thread pool, the worker protocol and
#                processes, the verifier and the cache's locking (tokamax_thread_tests: the test
#                files with the tags tests/CMakeLists.txt lists).
#
# Both builds leave the CUDA backend out (its host code is compiled by nvcc, not instrumented)
# and use -O1. Options: --asan-only, --tsan-only, --no-fuzz; FUZZ_BUDGET=90 by default.
set -euo pipefail
cd "$(dirname "$0")/.."

run_asan=1
run_tsan=1
run_fuzz=1
for arg in "$@"; do
  case "$arg" in
    --asan-only) run_tsan=0 ;;
    --tsan-only) run_asan=0; run_fuzz=0 ;;
    --no-fuzz) run_fuzz=0 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "test_sanitized.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done

scripts/install_deps.sh

# Not run under ASan: the installed-package build (an outside project that links the
# instrumented library without the sanitizer runtime), the statistics of bench's cold-cache
# sampling through the CLI (every smoke case and implementation sampled to a 2 s timeout: over
# three minutes under ASan; "run_benchmarks in cold mode cycles through copies of the inputs"
# runs the cold-cache code under ASan), and the two tests of verify's skip of a reference
# estimated to outlast --run-timeout (they time real reference runs to calibrate the estimate:
# 95 s under ASan; the estimate's arithmetic has tests of its own that do run).
ASAN_EXCLUDE="installed package|bench --cache-mode cold writes every sample"
ASAN_EXCLUDE+="|verify skips a (portable )?reference that would outlast"


configure() {  # build dir, sanitizers, extra cmake arguments...
  local dir="$1" sanitize="$2"
  shift 2
  local generator=()
  if [ ! -f "$dir/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then
    generator=(-G Ninja)
  fi
  cmake -S . -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1" \
        -DCMAKE_CXX_COMPILER=clang++ -DTOKAMAX_CUDA=OFF -DTOKAMAX_SANITIZE="$sanitize" "$@" \
        > /dev/null
}

elapsed() { echo "$(( $(date +%s) - $1 )) s"; }

if [ "$run_asan" -eq 1 ]; then
  start=$(date +%s)
  configure build-asan address,undefined -DTOKAMAX_BUILD_FUZZERS=ON
  cmake --build build-asan --parallel "$(nproc)"
  echo "test_sanitized: ASan+UBSan build: $(elapsed "$start")"
  start=$(date +%s)
  # Leaks fail a test too; halt_on_error makes a UBSan report fatal (with -fno-sanitize-recover).
  # oneMKL sequential: with its OpenMP threads alive at exit, LeakSanitizer's tracer crashes
  # (signal 11) on a bogus dynamic-TLS range of one of them in about a quarter of the processes
  # that ran MKL's bf16 gemm (a plain bf16 ragged_dot of K = 288 reproduces it; MKL is not
  # instrumented, and the same runs pass under ASan with one core).
  TOKAMAX_MKL_THREADING=sequential \
  ASAN_OPTIONS="detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
    ctest --test-dir build-asan --output-on-failure --parallel "$(nproc)" -E "$ASAN_EXCLUDE"
  echo "test_sanitized: ASan+UBSan suite: $(elapsed "$start")"
fi

if [ "$run_fuzz" -eq 1 ]; then
  start=$(date +%s)
  # Every target of build-asan/fuzz/targets.txt.
  scripts/fuzz.sh --build-dir build-asan --budget "${FUZZ_BUDGET:-90}"
  echo "test_sanitized: fuzzing: $(elapsed "$start")"
fi

if [ "$run_tsan" -eq 1 ]; then
  start=$(date +%s)
  # One SIMD target (Highway's static one) instead of every one: a third of the compile time, and
  # the threads and processes under test are the same.
  configure build-tsan thread -DCMAKE_CXX_FLAGS=-DHWY_COMPILE_ONLY_STATIC=1
  cmake --build build-tsan --parallel "$(nproc)" --target tokamax_thread_tests
  echo "test_sanitized: TSan build: $(elapsed "$start")"
  start=$(date +%s)
  # The Catch2 tags the binary was built from (any of).
  tsan_tags="$(cat build-tsan/thread_test_tags.txt)"
  (cd build-tsan && XDG_CACHE_HOME="$PWD/test-cache-home" \
     TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1" \
       ./tokamax_thread_tests --warn NoTests "$tsan_tags")
  echo "test_sanitized: TSan suite: $(elapsed "$start")"
fi
