// ragged_dot on CPU: the work list (which rows and columns each task owns), in plain integers.
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens), split into consecutive groups by group_sizes
//   K      contraction extent
//   N      output features
//   rows   sum(group_sizes) <= M; output rows past it are zero
//   tm, tn, tk   tile extents of M, N, K
//   nm, nn, nk   tile counts (see cpu_tiling.h)
#include "ops/ragged_dot/cpu_tiling.h"

#include <algorithm>
#include <string>

#include "ops/errors.h"

namespace tokamax {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

int64_t count_m_tiles(std::span<const int64_t> group_sizes, int64_t tm) {
  int64_t nm = 0;
  for (int64_t size : group_sizes) nm += ceil_div(std::max<int64_t>(size, 0), tm);
  return nm;
}

RaggedDotWorkList make_ragged_dot_work_list(std::span<const int64_t> group_starts, int64_t M,
                                            int64_t K, int64_t N, int64_t tm, int64_t tn,
                                            int64_t tk) {
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
  work.nn = ceil_div(N, tn);
  work.nk = ceil_div(K, tk);
  const int64_t G = static_cast<int64_t>(group_starts.size()) - 1;
  const int64_t rows = group_starts.back();

  // Group-major, then N tile, then M tile: tasks handed out next to each other read the same
  // rhs[g] panel, the operand that is large in MoE layers (K * N per expert), so threads working
  // side by side share it in the last-level cache instead of each streaming its own.
  for (int64_t g = 0; g < G; ++g) {
    const int64_t start = group_starts[g], end = group_starts[g + 1];
    if (end <= start) continue;  // empty group: nothing to compute, and no rhs[g] traffic
    work.nm += ceil_div(end - start, tm);
    for (int64_t n_i = 0; n_i < work.nn; ++n_i) {
      const int64_t n_start = n_i * tn, n_end = std::min(N, n_start + tn);
      for (int64_t m_start = start; m_start < end; m_start += tm) {
        work.tasks.push_back({g, m_start, std::min(end, m_start + tm), n_start, n_end});
      }
    }
  }
  // Zeroing rows past the group sum is pure store bandwidth; splitting it into tm-row tasks lets
  // all threads share it. Zero tasks come last so they fill in behind the expensive ones.
  if (N > 0) {
    for (int64_t m_start = rows; m_start < M; m_start += tm) {
      work.tasks.push_back({kZeroRowsTask, m_start, std::min(M, m_start + tm), 0, N});
      ++work.num_zero_tasks;
    }
  }
  return work;
}

}  // namespace tokamax
