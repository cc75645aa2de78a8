// ragged_dot on CPU: tiling math in plain integers (micro-tile shapes, work list, cache budgets).
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens), split into consecutive groups by group_sizes
//   K      contraction extent
//   N      output features
//   rows   sum(group_sizes) <= M; output rows past it are zero
//   tm, tn, tk, task_n, mr, nr   tile extents (see cpu_tiling.h)
//   nm, nn, nk                   tile counts (see cpu_tiling.h)
#include "ops/ragged_dot/cpu_tiling.h"

#include <algorithm>
#include <functional>
#include <string>

#include "ops/framework/errors.h"

namespace tokamax {
int64_t padded_rows(std::span<const int64_t> group_sizes, int64_t mr) {
  int64_t total = 0;
  for (int64_t size : group_sizes) total += round_up(std::max<int64_t>(size, 0), mr);
  return total;
}

double schedule_efficiency(std::span<const int64_t> group_sizes, int64_t N, int64_t tm,
                           int64_t task_n, int threads) {
  if (task_n <= 0 || task_n > N) task_n = N;
  std::vector<int64_t> costs;
  for (int64_t size : group_sizes) {
    for (int64_t m = 0; m < size; m += tm) {
      for (int64_t n = 0; n < N; n += task_n) {
        costs.push_back(std::min(tm, size - m) * std::min(task_n, N - n));
      }
    }
  }
  if (costs.empty() || threads <= 1) return 1.0;
  std::sort(costs.begin(), costs.end(), std::greater<>());
  std::vector<int64_t> load(static_cast<size_t>(threads), 0);
  int64_t total = 0;
  for (int64_t cost : costs) {
    *std::min_element(load.begin(), load.end()) += cost;
    total += cost;
  }
  const int64_t busiest = *std::max_element(load.begin(), load.end());
  return static_cast<double>(total) / (static_cast<double>(threads) * static_cast<double>(busiest));
}

int64_t count_m_tiles(std::span<const int64_t> group_sizes, int64_t tm) {
  int64_t nm = 0;
  for (int64_t size : group_sizes) nm += ceil_div(std::max<int64_t>(size, 0), tm);
  return nm;
}

RaggedDotWorkList make_ragged_dot_work_list(std::span<const int64_t> group_starts, int64_t M,
                                            int64_t K, int64_t N, int64_t tm, int64_t tn,
                                            int64_t tk, int64_t task_n) {
  if (tm < 1 || tn < 1 || tk < 1) {
    throw InvalidArgument("ragged_dot work list: tiles must be >= 1, got tm=" + std::to_string(tm) +
                          " tn=" + std::to_string(tn) + " tk=" + std::to_string(tk));
  }
  if (group_starts.empty() || group_starts.back() > M) {
    throw InvalidArgument("ragged_dot work list: group_starts must end at rows <= M");
  }
  RaggedDotWorkList work;
  work.tm = tm;
  work.tn = tn;
  work.tk = tk;
  // A task's columns are whole rhs panels, so only the last panel of N is ever partial.
  work.task_n =
      (task_n <= 0 || task_n >= N) ? std::max<int64_t>(round_up(N, tn), tn) : round_up(task_n, tn);
  work.nn = ceil_div(N, work.task_n);
  work.nk = ceil_div(K, tk);
  const int64_t G = static_cast<int64_t>(group_starts.size()) - 1;
  const int64_t rows = group_starts.back();

  // (group, column range, row range): tasks next to each other read the same rhs[g] columns,
  // the operand that is large in MoE layers (K * N per expert), so threads working side by side
  // share it in the last-level cache instead of each streaming its own.
  for (int64_t g = 0; g < G; ++g) {
    const int64_t start = group_starts[g], end = group_starts[g + 1];
    if (end <= start) continue;  // empty group: nothing to compute, and no rhs[g] traffic
    work.nm += ceil_div(end - start, tm);
    for (int64_t n_i = 0; n_i < work.nn; ++n_i) {
      const int64_t n_start = n_i * work.task_n, n_end = std::min(N, n_start + work.task_n);
      for (int64_t m_start = start; m_start < end; m_start += tm) {
        work.tasks.push_back({g, m_start, std::min(end, m_start + tm), n_start, n_end});
      }
    }
  }
  // Largest first (longest-processing-time order): the pool hands tasks out dynamically, so
  // the big groups of a skewed routing start at once and the small ones fill the gaps at the
  // end instead of one thread finishing a big group alone. Stable, so equal tasks keep the
  // rhs-sharing order above.
  std::stable_sort(work.tasks.begin(), work.tasks.end(),
                   [](const RaggedDotTask& a, const RaggedDotTask& b) {
                     return (a.m_end - a.m_start) * (a.n_end - a.n_start) >
                            (b.m_end - b.m_start) * (b.n_end - b.n_start);
                   });
  // Zeroing rows past the group sum is pure store bandwidth; splitting it into tm-row tasks lets
  // all threads share it. Zero tasks come last so they fill in behind the expensive ones.
  // Rows before group_starts[0] (the groups of other shards, with a group_offset) are zeroed
  // the same way.
  if (N > 0) {
    for (int64_t m_start = 0; m_start < group_starts.front(); m_start += tm) {
      work.tasks.push_back(
          {kZeroRowsTask, m_start, std::min(group_starts.front(), m_start + tm), 0, N});
      ++work.num_zero_tasks;
    }
    for (int64_t m_start = rows; m_start < M; m_start += tm) {
      work.tasks.push_back({kZeroRowsTask, m_start, std::min(M, m_start + tm), 0, N});
      ++work.num_zero_tasks;
    }
  }
  return work;
}

TaskScratch task_scratch(const RaggedDotWorkList& work, int64_t mr, int64_t nr,
                         bool needs_acc_buffer) {
  TaskScratch scratch;
  // Zero-padded to whole micro-panels and strips: the micro-kernel always runs mr x nr.
  scratch.lhs_block = round_up(work.tm, mr) * work.tk;
  scratch.rhs_panel = round_up(work.tn, nr) * work.tk;
  scratch.acc = needs_acc_buffer ? work.tm * work.task_n : 0;
  return scratch;
}

}  // namespace tokamax
