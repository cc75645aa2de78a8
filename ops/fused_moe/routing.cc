// fused_moe: the router of the fast implementations.
#include "ops/fused_moe/routing.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/thread_pool.h"
#include "ops/framework/dtype_dispatch.h"

namespace tokamax {

MoeRouting route_tokens(const FusedMoeProblem& p, const Tensor& gating, int num_threads) {
  MoeRouting routing;
  const int64_t R = p.routes();
  routing.expert.resize(static_cast<size_t>(R));
  routing.weight.resize(static_cast<size_t>(R));
  constexpr int64_t kTokensPerTask = 64;
  const int64_t tasks = (p.T + kTokensPerTask - 1) / kTokensPerTask;
  dispatch_float(p.gating_dtype, [&](auto type) {
    using G = decltype(type);
    const G* logits = gating.data<G>();
    cpu::parallel_for(tasks, num_threads, [&](int64_t task, int) {
      std::vector<float> row(static_cast<size_t>(p.E));
      std::vector<bool> taken(static_cast<size_t>(p.E));
      const int64_t t_end = std::min(p.T, (task + 1) * kTokensPerTask);
      for (int64_t t = task * kTokensPerTask; t < t_end; ++t) {
        for (int64_t e = 0; e < p.E; ++e) row[e] = to_float(logits[t * p.E + e]);
        std::fill(taken.begin(), taken.end(), false);
        // k passes of (largest logit not taken, the lowest expert attaining it).
        for (int64_t j = 0; j < p.k; ++j) {
          int64_t best = -1;
          for (int64_t e = 0; e < p.E; ++e) {
            if (!taken[e] && (best < 0 || row[e] > row[best])) best = e;
          }
          taken[best] = true;
          routing.expert[t * p.k + j] = static_cast<int32_t>(best);
        }
        const float top = row[routing.expert[t * p.k]];
        float denominator = 0.0f;
        if (p.renormalize) {
          for (int64_t j = 0; j < p.k; ++j)
            denominator += std::exp(row[routing.expert[t * p.k + j]] - top);
        } else {
          for (int64_t e = 0; e < p.E; ++e) denominator += std::exp(row[e] - top);
        }
        for (int64_t j = 0; j < p.k; ++j) {
          routing.weight[t * p.k + j] =
              std::exp(row[routing.expert[t * p.k + j]] - top) / denominator;
        }
      }
    });
  });
  routing.expert_start.assign(static_cast<size_t>(p.E + 1), 0);
  for (int64_t r = 0; r < R; ++r) ++routing.expert_start[routing.expert[r] + 1];
  for (int64_t e = 0; e < p.E; ++e) routing.expert_start[e + 1] += routing.expert_start[e];
  routing.sorted.resize(static_cast<size_t>(R));
  std::vector<int64_t> next(routing.expert_start.begin(), routing.expert_start.end() - 1);
  for (int64_t r = 0; r < R; ++r)
    routing.sorted[next[routing.expert[r]]++] = static_cast<int32_t>(r);
  return routing;
}

}  // namespace tokamax
