// triangle_multiplication_vjp: the float64 oracle of every gradient with each element's error
// magnitude (the model is in base_numerics.cc).
//
// Dimensions: as base.h.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ops/framework/bound_args.h"
#include "ops/framework/tensor.h"
#include "ops/triangle_multiplication/vjp/base.h"

namespace tokamax {

// Every gradient element's value and error magnitude (units of the f32 roundoff u), by output
// name, flat in the output's layout.
struct TriangleVjpGradients {
  std::map<std::string, std::vector<double>> value, magnitude;
};

// The relative rounding an implementation may apply to the planes v and dv, in units of u: x's
// unit roundoff over f32's for 16-bit x (the planes kept in x's dtype), else 0.
double triangle_vjp_x_rounding(const TriangleMultiplicationProblem& p);

// The whole backward in double from the inputs' stored values. `x_rounding` is the relative
// rounding an implementation may apply to v and dv (x's unit roundoff for 16-bit x, else 0),
// in units of u.
std::shared_ptr<const TriangleVjpGradients> triangle_vjp_gradients(
    const TriangleMultiplicationProblem& p, const TensorMap& inputs, double x_rounding);

// The same, computed once per (args, input contents) and shared by the calls for each of the
// nine outputs (the whole backward is needed for any one of them).
std::shared_ptr<const TriangleVjpGradients> cached_triangle_vjp_gradients(
    const BoundArgs& args, const TriangleMultiplicationProblem& p, const TensorMap& inputs,
    double x_rounding);

}  // namespace tokamax
