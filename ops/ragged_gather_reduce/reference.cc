// ragged_gather_reduce: the portable reference, an f32 multiply-add per token, valid route and
// element (the loops a user writes first), and its implementation.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "ops/framework/dtype_dispatch.h"
#include "ops/framework/reference_implementation.h"
#include "ops/ragged_gather_reduce/base.h"

namespace tokamax {

void ragged_gather_reduce_reference(const RaggedGatherReduceProblem& p, const Tensor& x,
                                    const Tensor& indices, const Tensor& topk_weights,
                                    const Tensor& valid_rows_mask, Tensor& out) {
  const int32_t* rows = indices.data<int32_t>();
  const bool* valid = valid_rows_mask.data<bool>();
  std::vector<float> weights(static_cast<size_t>(p.I));
  for (int64_t r = 0; r < p.I; ++r) weights[r] = static_cast<float>(topk_weights.get(r));
  std::vector<float> acc(static_cast<size_t>(p.h));
  dispatch_float(p.x_dtype, [&](auto type) {
    using T = decltype(type);
    const T* src = x.data<T>();
    T* dst = out.data<T>();
    for (int64_t t = 0; t < p.T(); ++t) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t r = t * p.g; r < (t + 1) * p.g; ++r) {
        if (!valid[r]) continue;
        const T* row = src + static_cast<int64_t>(rows[r]) * p.h;
        for (int64_t c = 0; c < p.h; ++c)
          acc[c] += weights[r] * static_cast<float>(to_double(row[c]));
      }
      for (int64_t c = 0; c < p.h; ++c) dst[t * p.h + c] = from_double<T>(acc[c]);
    }
  });
}

namespace {

void run_reference(const RaggedGatherReduceProblem& problem, const TensorMap& inputs,
                   TensorMap& outputs) {
  ragged_gather_reduce_reference(problem, inputs.at("x"), inputs.at("indices"),
                                 inputs.at("topk_weights"), inputs.at("valid_rows_mask"),
                                 outputs.at("out"));
}

}  // namespace

const Implementation& ragged_gather_reduce_reference_implementation() {
  static const ReferenceImplementation<RaggedGatherReduceProblem, run_reference> impl;
  return impl;
}

}  // namespace tokamax
