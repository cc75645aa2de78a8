// fused_moe: the router of the fast implementations.
#include "ops/fused_moe/routing.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/thread_pool.h"
#include "ops/common/row_select.h"
#include "ops/framework/dtype_dispatch.h"

namespace tokamax {

MoeRouting route_tokens(const FusedMoeProblem& p, const Tensor& gating, const Device& device,
                        int num_threads) {
  MoeRouting routing;
  const int64_t R = p.routes();
  routing.expert.resize(static_cast<size_t>(R));
  routing.weight.resize(static_cast<size_t>(R));
  // The selection engine of top_k and router_topk: every logit eligible, -inf the floor (a masked
  // expert still fills a row with fewer finite logits than k), equal logits to the lower expert.
  const RowSelectProblem select{.b = p.T,
                                .n = p.E,
                                .k = p.k,
                                .dtype = p.gating_dtype,
                                .rule = RowSelectRule::kClampToFloor,
                                .floor = -INFINITY,
                                .row_lengths = nullptr};
  RowSelectConfig config = row_select_heuristics_config(p.T, p.E, p.k, device);
  if (num_threads > 0) config.num_threads = num_threads;
  // The selected logits, as read (f32), land in `weight` and become the weights below.
  row_select_cpu(select, config, gating.raw(), routing.expert.data(), routing.weight.data());
  constexpr int64_t kTokensPerTask = 64;
  dispatch_float(p.gating_dtype, [&](auto type) {
    using G = decltype(type);
    const G* logits = gating.data<G>();
    cpu::parallel_for((p.T + kTokensPerTask - 1) / kTokensPerTask, num_threads,
                      [&](int64_t task, int) {
                        const int64_t t_end = std::min(p.T, (task + 1) * kTokensPerTask);
                        for (int64_t t = task * kTokensPerTask; t < t_end; ++t) {
                          float* w = routing.weight.data() + t * p.k;
                          const float top = w[0];
                          float denominator = 0.0f;
                          if (p.renormalize) {
                            for (int64_t j = 0; j < p.k; ++j) denominator += std::exp(w[j] - top);
                          } else {
                            for (int64_t e = 0; e < p.E; ++e)
                              denominator += std::exp(to_float(logits[t * p.E + e]) - top);
                          }
                          for (int64_t j = 0; j < p.k; ++j)
                            w[j] = std::exp(w[j] - top) / denominator;
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
