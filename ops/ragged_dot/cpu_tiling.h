// ragged_dot on CPU: the work list (which rows and columns each task owns), in plain integers.
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens), split into consecutive groups by group_sizes
//   K      contraction extent
//   N      output features
//   rows   sum(group_sizes) <= M; output rows past it are zero
//   tm, tn, tk   tile extents of M, N, K
//   nm     M tiles summed over the groups: sum_g ceil(group_sizes[g] / tm); a tile never
//          straddles two groups, so one task multiplies by one rhs[g]
//   nn, nk tile counts of N and K: ceil(N / tn), ceil(K / tk)
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tokamax {

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
  int64_t tm = 1, tn = 1, tk = 1;
  int64_t nm = 0, nn = 0, nk = 0;
  int64_t num_zero_tasks = 0;
  // nm * nn compute tasks ordered (group, n tile, m tile), then num_zero_tasks zeroing tasks.
  std::vector<RaggedDotTask> tasks;
};

// sum_g ceil(group_sizes[g] / tm): empty groups contribute no tile.
int64_t count_m_tiles(std::span<const int64_t> group_sizes, int64_t tm);

// The tasks of one ragged_dot call. `group_starts` is [G + 1] (prefix sums, last = rows). Tiles
// must be >= 1; edge tiles are partial (m_end - m_start < tm at a group's end).
RaggedDotWorkList make_ragged_dot_work_list(std::span<const int64_t> group_starts, int64_t M,
                                            int64_t K, int64_t N, int64_t tm, int64_t tn,
                                            int64_t tk);

}  // namespace tokamax
