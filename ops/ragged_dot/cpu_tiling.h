// ragged_dot on CPU: tiling math in plain integers (micro-tile shapes, work list, cache budgets).
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens), split into consecutive groups by group_sizes
//   K      contraction extent
//   N      output features
//   rows   sum(group_sizes) <= M; output rows past it are zero
//   tm     rows of one task (never straddling two groups, so a task multiplies by one rhs[g])
//   tn     columns of one packed rhs panel [tk, tn]; a multiple of nr
//   task_n columns of one task: a multiple of tn, or all of N
//   tk     K block: the depth of the packed panels
//   mr, nr the register-blocked micro-tile: mr rows x nr columns of f32 accumulators
//   nm     M tiles summed over the groups: sum_g ceil(group_sizes[g] / tm)
//   nn     task column ranges: ceil(N / task_n);  nk = ceil(K / tk)
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ops/common/cpu_gemm/micro_tile.h"

namespace tokamax {

// Rows padded to whole micro-panels, summed over the groups: the multiply-adds a kernel with
// this mr really issues per column (zero rows included). Picks the shape that wastes least.
int64_t padded_rows(std::span<const int64_t> group_sizes, int64_t mr);

// How well `threads` threads balance the tasks of (tm, task_n) when the pool hands them out
// largest first (greedy longest-processing-time, what the dynamic scheduler does with the
// work list's order): total work / (threads * the busiest thread's work), in (0, 1]. Task cost
// is rows x columns; task_n <= 0 means all of N.
double schedule_efficiency(std::span<const int64_t> group_sizes, int64_t N, int64_t tm,
                           int64_t task_n, int threads);

// The `group` of a task that writes zeros to output rows past the group sum.
inline constexpr int64_t kZeroRowsTask = -1;

// One task: output rows [m_start, m_end) x columns [n_start, n_end), all in one group.
struct RaggedDotTask {
  int64_t group = 0;  // index into rhs [G, K, N], or kZeroRowsTask
  int64_t m_start = 0, m_end = 0;
  int64_t n_start = 0, n_end = 0;
  bool operator==(const RaggedDotTask&) const = default;
};

struct RaggedDotWorkList {
  int64_t tm = 1, tn = 1, tk = 1, task_n = 1;
  int64_t nm = 0, nn = 0, nk = 0;
  int64_t num_zero_tasks = 0;
  // nm * nn compute tasks, largest first (then in (group, column range, row range) order), then
  // num_zero_tasks zeroing tasks.
  std::vector<RaggedDotTask> tasks;
};

// sum_g ceil(group_sizes[g] / tm): empty groups contribute no tile.
int64_t count_m_tiles(std::span<const int64_t> group_sizes, int64_t tm);

// The tasks of one ragged_dot call. `group_starts` is [G + 1] (the groups' first rows, last =
// rows; rows before group_starts[0] and from rows on are zeroed). N is the output's columns. Tiles
// must be >= 1; a task spans `task_n` columns (rounded up to whole tn; <= 0 or >= N: all of N).
// Edge tasks are partial (m_end - m_start < tm at a group's end, n_end - n_start < task_n at N).
RaggedDotWorkList make_ragged_dot_work_list(std::span<const int64_t> group_starts, int64_t M,
                                            int64_t K, int64_t N, int64_t tm, int64_t tn,
                                            int64_t tk, int64_t task_n = 0);

// The per-thread scratch of one task, in elements of the accumulation type (bytes for the bf16
// pairs are the same count: two bf16 per 32-bit element). Sized for the largest task.
struct TaskScratch {
  int64_t lhs_block = 0;  // packed lhs block [ceil(tm / mr) * mr, tk]
  int64_t rhs_panel = 0;  // packed rhs panel [round_up(tn, nr), tk]
  int64_t acc = 0;        // f32 partial sums [tm, task_n] when the output is not the accumulator
};
TaskScratch task_scratch(const RaggedDotWorkList& work, int64_t mr, int64_t nr,
                         bool needs_acc_buffer);

}  // namespace tokamax
