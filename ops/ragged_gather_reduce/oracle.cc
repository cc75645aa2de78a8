// ragged_gather_reduce: the oracle, each sampled element summed over its token's valid routes in
// double, from the inputs' stored values (Tensor::get).
#include <cmath>
#include <string>

#include "ops/framework/errors.h"
#include "ops/ragged_gather_reduce/base.h"

namespace tokamax {

template <>
OracleSample ProblemOp<RaggedGatherReduceProblem>::oracle(const BoundArgs& args,
                                                          const TensorMap& inputs,
                                                          std::string_view output,
                                                          std::span<const int64_t> index) const {
  if (output != "out") {
    throw InvalidArgument("ragged_gather_reduce has no output '" + std::string(output) + "'");
  }
  const RaggedGatherReduceProblem p = RaggedGatherReduceProblem::from(args);
  const Tensor& x = inputs.at("x");
  const Tensor& weights = inputs.at("topk_weights");
  const int32_t* indices = inputs.at("indices").data<int32_t>();
  const bool* valid = inputs.at("valid_rows_mask").data<bool>();
  // The output's subnormal spacing as an absolute floor (f16 rounds a sum below its smallest
  // normal, 6.1e-5, to a multiple of 2^-24): in magnitude units, so that the accumulation term
  // of the bound (error_model: n u of the magnitude) is that spacing.
  const ErrorModel model = error_model(args);
  const double floor_term =
      subnormal_floor(p.x_dtype) / (model.accumulation_length * model.accumulation_roundoff);
  OracleSample sample;
  sample.index.assign(index.begin(), index.end());
  sample.value.resize(index.size());
  sample.magnitude.resize(index.size());
  for (size_t s = 0; s < index.size(); ++s) {
    const int64_t t = index[s] / p.h, c = index[s] % p.h;
    double sum = 0.0, magnitude = 0.0;
    for (int64_t r = t * p.g; r < (t + 1) * p.g; ++r) {
      if (!valid[r]) continue;
      const double term = weights.get(r) * x.get(static_cast<int64_t>(indices[r]) * p.h + c);
      sum += term;
      magnitude += std::fabs(term);
    }
    sample.value[s] = sum;
    sample.magnitude[s] = magnitude + floor_term;
  }
  return sample;
}

}  // namespace tokamax
