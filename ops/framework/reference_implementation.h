// The portable reference of an op as an implementation ("reference"): nothing to tune, every
// dtype, host memory. Each op's reference.cc instantiates it with its run function.
#pragma once

#include <string_view>

#include "ops/framework/op.h"

namespace tokamax {

// `Run(problem, inputs, outputs)` computes the outputs with the op's reference templates, at
// the accumulation type the op's reference uses for the problem's dtypes.
template <typename Problem, void (*Run)(const Problem&, const TensorMap&, TensorMap&)>
class ReferenceImplementation final : public TypedImplementation<Problem> {
 public:
  std::string_view name() const override { return "reference"; }
  void run(const Problem& problem, const EmptyConfig&, const Device&, const TensorMap& inputs,
           TensorMap& outputs) const override {
    Run(problem, inputs, outputs);
  }
};

}  // namespace tokamax
