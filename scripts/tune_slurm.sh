#!/bin/bash
# Tunes the selection in parallel as a Slurm job array: task I of N runs `tokamax tune --shard I/N`.
#
# Every task writes its own cache (shard-<I>.json), so tasks never contend for one file, and a
# requeued or resubmitted task resumes: entries already in its cache are skipped (--force
# re-tunes). Shards take every N-th (op, spec, implementation) item in sorted order, identical on
# every node, so the N shards partition the selection exactly. Nodes must be the same kind of
# machine as the one the results are for: cache entries are keyed by device id.
#
#   sbatch scripts/tune_slurm.sh                         # 8 tasks (the --array below)
#   sbatch --array=0-31 scripts/tune_slurm.sh --tag primary
#   sbatch --dependency=afterok:<jobid> --wrap \
#     'build/tokamax export-cache --cache shard-*.json --out-dir results/autotuning'
#
# Arguments are passed to `tokamax tune` (the selection: --op, --tag, --from calls.jsonl, ...).
#SBATCH --job-name=tokamax-tune
#SBATCH --array=0-7
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --exclusive
#SBATCH --time=04:00:00
#SBATCH --output=tune-%A_%a.log
set -euo pipefail

TOKAMAX="${TOKAMAX:-build/tokamax}"
ID="${SLURM_ARRAY_TASK_ID:?run through sbatch (a job array)}"
COUNT="${SLURM_ARRAY_TASK_COUNT:?run through sbatch (a job array)}"
OUT_DIR="${TOKAMAX_SHARD_DIR:-.}"
mkdir -p "$OUT_DIR"

# Exit 1 (a case without a verified winner) still leaves every other entry in the cache.
"$TOKAMAX" tune --shard "$ID/$COUNT" --cache "$OUT_DIR/shard-$ID.json" --quiet \
  --json "$OUT_DIR/report-$ID.json" "$@"

# Merge step, once every task is done (a job depending on this array, or by hand):
#   build/tokamax export-cache --cache shard-*.json --out-dir results/autotuning
