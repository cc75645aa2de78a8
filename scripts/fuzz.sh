#!/usr/bin/env bash
# Replays every fuzz target's corpus and regressions, then fuzzes each for a bounded time.
#   scripts/fuzz.sh [--build-dir DIR] [--seconds N | --budget N] [TARGET...]
# --seconds: each target's fuzzing time (default 60); --budget: the whole run's, split evenly
# over the targets (at least 5 s each).
# DIR is a build with -DTOKAMAX_BUILD_FUZZERS=ON (scripts/test_sanitized.sh makes build-asan/);
# TARGET names from DIR/fuzz/targets.txt (default: all). New corpus entries go to
# DIR/fuzz/corpus/<target>/ (the committed seeds are only read); a finding (crash, sanitizer
# report, leak, timeout, out of memory) is saved in DIR/fuzz/findings/<target>/ and fails the run:
# fix it, then copy the input into tests/fuzz/regressions/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=build-asan
seconds=60
budget=""
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --budget) budget="$2"; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if [ ! -f "$build_dir/fuzz/targets.txt" ]; then
  echo "fuzz.sh: $build_dir/fuzz/targets.txt is missing: configure $build_dir with" \
       "-DTOKAMAX_BUILD_FUZZERS=ON (scripts/test_sanitized.sh does)" >&2
  exit 2
fi
if [ ${#targets[@]} -eq 0 ]; then
  IFS=';' read -r -a targets < "$build_dir/fuzz/targets.txt"
fi
if [ -n "$budget" ]; then
  seconds=$(( budget / ${#targets[@]} ))
  if [ "$seconds" -lt 5 ]; then seconds=5; fi
fi

# The limits every finding is judged by: a hang is an input that takes over 10 s, a huge
# allocation one malloc over 512 MiB or a process over 2 GiB.
limits=(-timeout=10 -malloc_limit_mb=512 -rss_limit_mb=2048)
# A fixed seed (FUZZ_SEED): a run, and what it finds, can be repeated.
seed="${FUZZ_SEED:-1}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

status=0
printf '%-16s %12s %10s %8s  %s\n' target executions "exec/s" corpus findings
for target in "${targets[@]}"; do
  binary="$build_dir/fuzz/${target}_fuzz"
  seeds="tests/fuzz/corpus/$target"
  regressions="tests/fuzz/regressions/$target"
  corpus="$build_dir/fuzz/corpus/$target"
  findings="$build_dir/fuzz/findings/$target"
  log="$build_dir/fuzz/$target.log"
  mkdir -p "$corpus" "$findings" "$regressions"
  if [ ! -x "$binary" ]; then
    echo "fuzz.sh: no fuzz target $binary" >&2
    exit 2
  fi
  # Replay: every committed input once.
  if ! "$binary" "${limits[@]}" -runs=0 "$seeds" "$regressions" > "$log.replay" 2>&1; then
    echo "$target: replaying the corpus and regressions failed (log: $log.replay):" >&2
    tail -n 30 "$log.replay" >&2
    status=1
    continue
  fi
  # Bounded fuzzing from the seeds, the regressions and what earlier runs found.
  run_status=0
  "$binary" "${limits[@]}" -seed="$seed" -max_total_time="$seconds" -print_final_stats=1 \
            -artifact_prefix="$findings/" "$corpus" "$seeds" "$regressions" > "$log" 2>&1 ||
    run_status=$?
  executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
  found=$(find "$findings" -type f | wc -l)
  printf '%-16s %12s %10s %8s  %s\n' "$target" "${executions:-?}" "${rate:-?}" \
         "$(find "$corpus" -type f | wc -l)" "$found"
  if [ "$run_status" -ne 0 ] || [ "$found" -ne 0 ]; then
    echo "$target: a finding (exit $run_status; inputs in $findings/, log: $log):" >&2
    grep -m 5 -E "ERROR|runtime error|SUMMARY|Test unit written" "$log" >&2 || tail -n 20 "$log" >&2
    status=1
  fi
done
exit "$status"
