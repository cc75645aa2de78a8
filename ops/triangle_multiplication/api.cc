// triangle_multiplication: high-level API and the dispatch order of its implementations.
#include "ops/triangle_multiplication/api.h"

#include <string>

#include "ops/framework/dispatch.h"
#include "ops/framework/errors.h"

namespace tokamax {

// Defined in the implementation files of this folder.
const Implementation& triangle_multiplication_cpu_implementation();
const Implementation& triangle_multiplication_onednn_implementation();
const Implementation& triangle_multiplication_reference_implementation();

// Fastest first.
template <>
std::vector<const Implementation*> ProblemOp<TriangleMultiplicationProblem>::implementations()
    const {
  return {&triangle_multiplication_cpu_implementation(),
          &triangle_multiplication_onednn_implementation(),
          &triangle_multiplication_reference_implementation()};
}

const TriangleMultiplicationOp& triangle_multiplication_op() {
  static const TriangleMultiplicationOp op;
  return op;
}

Tensor triangle_multiplication(const Tensor& x, const Tensor& mask, const TensorMap& weights,
                               const std::string& triangle_type,
                               const TriangleMultiplicationOptions& options) {
  ApiCall call(triangle_multiplication_op());
  call.tensor("x", x).tensor("mask", mask);
  for (const char* name : kTriangleWeights) {
    call.tensor(name, find_tensor(weights, name));
  }
  call.option("triangle_type", triangle_type).option("epsilon", options.epsilon);
  return call.run(options.implementation, options.config).at("out");
}

}  // namespace tokamax
