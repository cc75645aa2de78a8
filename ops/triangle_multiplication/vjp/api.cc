// triangle_multiplication_vjp: high-level API and the dispatch order of its implementations.
#include "ops/triangle_multiplication/vjp/api.h"

#include <vector>

#include "ops/framework/dispatch.h"
#include "ops/framework/errors.h"

namespace tokamax {

// Defined in the implementation files of this folder.
const Implementation& triangle_multiplication_vjp_cpu_implementation();
const Implementation& triangle_multiplication_vjp_onednn_implementation();
const Implementation& triangle_multiplication_vjp_reference_implementation();

// Fastest first.
template <>
std::vector<const Implementation*> ProblemOp<TriangleVjpProblem>::implementations() const {
  return {&triangle_multiplication_vjp_cpu_implementation(),
          &triangle_multiplication_vjp_onednn_implementation(),
          &triangle_multiplication_vjp_reference_implementation()};
}

const TriangleMultiplicationVjpOp& triangle_multiplication_vjp_op() {
  static const TriangleMultiplicationVjpOp op;
  return op;
}

TensorMap triangle_multiplication_vjp(const Tensor& x, const Tensor& mask, const TensorMap& weights,
                                      const std::string& triangle_type, const Tensor& dout,
                                      const TriangleMultiplicationVjpOptions& options) {
  ApiCall call(triangle_multiplication_vjp_op());
  call.tensor("x", x).tensor("mask", mask);
  for (const char* name : kTriangleWeights) call.tensor(name, find_tensor(weights, name));
  call.tensor("dout", dout);
  call.option("triangle_type", triangle_type).option("epsilon", options.epsilon);
  return call.run(options.implementation, options.config);
}

}  // namespace tokamax
