// ragged_gather: the oracle, each sampled element read from x through its row's index (in
// double, through Tensor::get: independent of the byte copies the implementations do).
#include <cmath>
#include <string>

#include "ops/framework/errors.h"
#include "ops/ragged_gather/base.h"

namespace tokamax {

template <>
OracleSample ProblemOp<RaggedGatherProblem>::oracle(const BoundArgs& args, const TensorMap& inputs,
                                                    std::string_view output,
                                                    std::span<const int64_t> index) const {
  if (output != "out") {
    throw InvalidArgument("ragged_gather has no output '" + std::string(output) + "'");
  }
  const RaggedGatherProblem p = RaggedGatherProblem::from(args);
  const Tensor& x = inputs.at("x");
  const int32_t* indices = inputs.at("indices").data<int32_t>();
  OracleSample sample;
  sample.index.assign(index.begin(), index.end());
  sample.value.resize(index.size());
  sample.magnitude.resize(index.size());
  for (size_t s = 0; s < index.size(); ++s) {
    const int64_t i = index[s] / p.h, c = index[s] % p.h;
    if (i < p.start || i >= p.end) {
      throw InvalidArgument("ragged_gather: output row " + std::to_string(i) +
                            " is outside [start, end) and has no defined value");
    }
    const double value = x.get(static_cast<int64_t>(indices[i]) * p.h + c);
    sample.value[s] = value;
    sample.magnitude[s] = std::fabs(value);
  }
  return sample;
}

}  // namespace tokamax
