// dot_product_attention: seeded inputs, the cost and error model of the float64 oracle
// (oracle.cc; the reference is in reference.cc).
//
// Dimensions.
//   *B     batch dimensions, B = prod(*B); b the flattened batch index
//   T, t   query and key/value positions; r a query row, j a key
//   H, h   query and key/value heads, g = H / h; hq a query head, hq / g its kv head
//   D, d   q/k and v head dimensions; c an output column
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ops/dot_product_attention/base.h"
#include "ops/dot_product_attention/range_mask.h"
#include "ops/framework/errors.h"
#include "ops/framework/random.h"
#include "ops/framework/reference_implementation.h"

namespace tokamax {
namespace {

// The unit roundoff of the arithmetic implementations run at: f32 (softmax in >= f32), f64
// for f64 inputs.
double accumulation_unit(const AttentionProblem& p) {
  return unit_roundoff(p.dtype == DType::kF64 ? DType::kF64 : DType::kF32);
}

}  // namespace

template <>
TensorMap ProblemOp<AttentionProblem>::make_inputs(const BoundArgs& args, uint64_t seed) const {
  const AttentionProblem p = AttentionProblem::from(args);
  TensorMap inputs;
  // q, k, v ~ N(0, 1): with the default scale 1/sqrt(D) the logits are ~ N(0, 1), as after
  // a trained model's normalisation; bias ~ N(0, 1) too; mask keeps ~80% of the entries.
  for (const char* name : {"q", "k", "v", "bias"}) {
    if (std::string(name) == "bias" && !p.bias) continue;
    inputs.emplace(
        name, normal_tensor(std::string(name) == "bias" ? *p.bias : args.tensor(name), seed, name));
  }
  if (p.mask) {
    Tensor mask(*p.mask);
    const uint64_t stream = stream_id("mask");
    for (int64_t e = 0; e < mask.num_elements(); ++e) {
      mask.set(e, uniform01(seed, stream, e) < 0.8 ? 1.0 : 0.0);
    }
    inputs.emplace("mask", std::move(mask));
  }
  if (p.dropout_mask) {
    // Kept with probability 1 - dropout_rate (0.9 at rate 0), as a dropout layer draws it.
    Tensor keep(*p.dropout_mask);
    const uint64_t stream = stream_id("dropout_mask");
    const double kept = p.dropout_rate > 0.0 ? 1.0 - p.dropout_rate : 0.9;
    for (int64_t e = 0; e < keep.num_elements(); ++e) {
      keep.set(e, uniform01(seed, stream, e) < kept ? 1.0 : 0.0);
    }
    inputs.emplace("dropout_mask", std::move(keep));
  }
  make_attention_range_inputs(p, seed, inputs);
  return inputs;
}

template <>
double ProblemOp<AttentionProblem>::oracle_cost_per_output(const BoundArgs& args) const {
  // A sampled output costs its row's logits (t * D) plus its own t-term sum; rows shared by
  // neighbouring samples are computed once, which this ignores.
  const AttentionProblem p = AttentionProblem::from(args);
  return static_cast<double>(std::max<int64_t>(p.t, 1)) * (p.D + 1.0);
}

template <>
ErrorModel ProblemOp<AttentionProblem>::error_model(const BoundArgs& args) const {
  const AttentionProblem p = AttentionProblem::from(args);
  ErrorModel model;
  // The oracle's magnitude is already the whole accumulated error budget in units of u (see
  // oracle()): length 1.
  model.accumulation_roundoff = accumulation_unit(p);
  model.accumulation_length = 1.0;
  model.output_roundoff = unit_roundoff(p.dtype);
  return model;
}

}  // namespace tokamax
