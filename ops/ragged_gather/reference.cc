// ragged_gather: the portable reference, one std::copy per gathered row (what a user writes
// first), and its implementation.
#include <algorithm>
#include <cstdint>

#include "ops/framework/reference_implementation.h"
#include "ops/ragged_gather/base.h"

namespace tokamax {

void ragged_gather_reference(const RaggedGatherProblem& p, const Tensor& x, const Tensor& indices,
                             Tensor& out) {
  const int64_t row_bytes = p.row_bytes();
  const auto* src = static_cast<const unsigned char*>(x.raw());
  auto* dst = static_cast<unsigned char*>(out.raw());
  const int32_t* rows = indices.data<int32_t>();
  for (int64_t i = p.start; i < p.end; ++i) {
    const unsigned char* row = src + rows[i] * row_bytes;
    std::copy(row, row + row_bytes, dst + i * row_bytes);
  }
}

namespace {

void run_reference(const RaggedGatherProblem& problem, const TensorMap& inputs,
                   TensorMap& outputs) {
  ragged_gather_reference(problem, inputs.at("x"), inputs.at("indices"), outputs.at("out"));
}

}  // namespace

const Implementation& ragged_gather_reference_implementation() {
  static const ReferenceImplementation<RaggedGatherProblem, run_reference> impl;
  return impl;
}

}  // namespace tokamax
