// router_topk: the oracle, each sampled row ranked by a full stable sort of its clamped scores in
// double (independent of upstream's k passes, which the reference runs, and of the integer key
// the cpu implementation uses).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/framework/errors.h"
#include "ops/router_topk/base.h"

namespace tokamax {

template <>
OracleSample ProblemOp<RouterTopKProblem>::oracle(const BoundArgs& args, const TensorMap& inputs,
                                                  std::string_view output,
                                                  std::span<const int64_t> index) const {
  if (output != "weights" && output != "indices") {
    throw InvalidArgument("router_topk has no output '" + std::string(output) + "'");
  }
  const RouterTopKProblem p = RouterTopKProblem::from(args);
  const Tensor& scores = inputs.at("scores");
  auto clamped = [&](int64_t t, int64_t e) {
    const double v = scores.get(t * p.E + e);
    return v > static_cast<double>(kRouterFloor) ? v : static_cast<double>(kRouterFloor);
  };
  std::unordered_map<int64_t, std::vector<int64_t>> ranked;
  auto ranking = [&](int64_t t) -> const std::vector<int64_t>& {
    auto it = ranked.find(t);
    if (it != ranked.end()) return it->second;
    std::vector<int64_t> experts(static_cast<size_t>(p.E));
    std::iota(experts.begin(), experts.end(), int64_t{0});
    std::stable_sort(experts.begin(), experts.end(),
                     [&](int64_t a, int64_t b) { return clamped(t, a) > clamped(t, b); });
    return ranked.emplace(t, std::move(experts)).first->second;
  };
  const bool weights = output == "weights";
  OracleSample sample;
  sample.index.assign(index.begin(), index.end());
  sample.value.resize(index.size());
  sample.magnitude.assign(index.size(), 0.0);
  for (size_t s = 0; s < index.size(); ++s) {
    const int64_t t = index[s] / p.k, j = index[s] % p.k;
    const std::vector<int64_t>& experts = ranking(t);
    const int64_t e = experts[j];
    if (!weights) {
      sample.value[s] = static_cast<double>(e);
    } else if (clamped(t, experts[0]) <= static_cast<double>(kRouterFloor)) {
      sample.value[s] = std::nan("");  // no real score in the row
    } else {
      sample.value[s] = clamped(t, e);
    }
  }
  return sample;
}

}  // namespace tokamax
