// router_topk: the portable reference, upstream's sort-free algorithm as a plain loop (k passes
// of row max, lowest column attaining it, mask it out), and its implementation.
#include <cmath>
#include <limits>
#include <vector>

#include "ops/framework/reference_implementation.h"
#include "ops/router_topk/base.h"

namespace tokamax {

void router_topk_reference(const RouterTopKProblem& p, const Tensor& scores, Tensor& weights,
                           Tensor& indices) {
  const float masked = std::numeric_limits<float>::lowest();  // below the floor
  std::vector<float> cur(static_cast<size_t>(p.E));
  float* w = weights.data<float>();
  int32_t* ids = indices.data<int32_t>();
  for (int64_t t = 0; t < p.T; ++t) {
    for (int64_t e = 0; e < p.E; ++e) {
      cur[e] = router_clamp(static_cast<float>(scores.get(t * p.E + e)));
    }
    for (int64_t j = 0; j < p.k; ++j) {
      float m = masked;
      for (int64_t e = 0; e < p.E; ++e) m = cur[e] > m ? cur[e] : m;
      int64_t idx = p.E - 1;
      for (int64_t e = p.E - 1; e >= 0; --e) {
        if (cur[e] == m) idx = e;
      }
      w[t * p.k + j] = m;
      ids[t * p.k + j] = static_cast<int32_t>(idx);
      cur[idx] = masked;
    }
    if (w[t * p.k] <= kRouterFloor) {
      for (int64_t j = 0; j < p.k; ++j) w[t * p.k + j] = std::numeric_limits<float>::quiet_NaN();
    }
  }
}

namespace {

void run_reference(const RouterTopKProblem& problem, const TensorMap& inputs, TensorMap& outputs) {
  router_topk_reference(problem, inputs.at("scores"), outputs.at("weights"), outputs.at("indices"));
}

}  // namespace

const Implementation& router_topk_reference_implementation() {
  static const ReferenceImplementation<RouterTopKProblem, run_reference> impl;
  return impl;
}

}  // namespace tokamax
