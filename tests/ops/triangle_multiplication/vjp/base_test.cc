// Tests of triangle_multiplication_vjp's binding, its float64 oracle against central
// differences of the forward's oracle, the reference against the oracle, and the bound: a
// gradient 1% off (f32; 10% for the input norm's), the other triangle type or an ignored mask
// fail it.
#include "ops/triangle_multiplication/vjp/base.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "ops/framework/numerics.h"
#include "ops/framework/vjp.h"
#include "ops/triangle_multiplication/api.h"
#include "ops/triangle_multiplication/vjp/api.h"
#include "tests/ops/bind_errors.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/oracle_run.h"
#include "tests/ops/triangle_multiplication/layer_args.h"
#include "tests/ops/vjp_test_util.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

const TriangleMultiplicationVjpOp& op() { return triangle_multiplication_vjp_op(); }

json with(json args, const char* key, json value) {
  args[key] = std::move(value);
  return args;
}

Comparison compare(const BoundArgs& args, const TensorMap& inputs, const TensorMap& outputs,
                   const std::string& name) {
  return compare_whole_output(op(), args, inputs, outputs.at(name), name);
}

TensorMap run_reference(const BoundArgs& args, const TensorMap& inputs) {
  TensorMap outputs = op().allocate_outputs(args);
  run_json(op().implementation("reference"), args, json::object(), inputs, outputs);
  return outputs;
}

}  // namespace

TEST_CASE("triangle_multiplication_vjp bind names the argument it rejects",
          "[triangle_multiplication_vjp]") {
  const json base = triangle_vjp_layer("bf16", 8, 16, 32, 24, "outgoing");
  CHECK(bind_error_field(op(), base) == "<no error>");
  const std::vector<std::pair<json, std::string>> bad = {
      {with(base, "dout", "bf16[8,8,23]"), "dout"},
      {with(base, "dout", "f32[8,8,24]"), "dout"},
      {with(base, "x", "bf16[8,9,16]"), "x"},
      {with(base, "gate_out_weights", "bf16[16,25]"), "gate_out_weights"},
      {with(base, "triangle_type", "sideways"), "triangle_type"},
  };
  for (const auto& [args, field] : bad) {
    CAPTURE(args.dump());
    CHECK(bind_error_field(op(), args) == field);
  }
  json no_dout = base;
  no_dout.erase("dout");
  CHECK(bind_error_field(op(), no_dout) == "dout");
  const BoundArgs bound = op().bind(with(base, "gate_in_weights", "f32[16,2,32]"));
  const std::vector<TensorDecl> outputs = op().outputs(bound);
  REQUIRE(outputs.size() == 9);
  CHECK(outputs[0].name == "dx");
  CHECK(outputs[0].spec == TensorSpec{DType::kBF16, {8, 8, 16}});
  for (size_t i = 0; i < 8; ++i) {
    CHECK(outputs[i + 1].name == vjp_name(kTriangleWeights[i]));
    CHECK(outputs[i + 1].spec == bound.tensor(kTriangleWeights[i]));
  }
}

TEST_CASE("triangle_multiplication_vjp's oracle matches central differences of the forward's",
          "[triangle_multiplication_vjp]") {
  // f32 inputs (the op has no f64): each perturbation is the stored difference, so the quotient
  // is exact in the data; h ~ 1e-3 keeps the truncation near 1e-6 of the gradient's scale.
  for (const char* type : {"outgoing", "incoming"}) {
    const BoundArgs args = op().bind(triangle_vjp_layer("f32", 5, 6, 4, 3, type));
    const BoundArgs forward = primal_args(*op().primal(), args, op().cotangents());
    const TensorMap inputs = op().make_inputs(args, 11);
    for (const TensorDecl& grad : op().outputs(args)) {
      const std::string name = grad.name.substr(1);
      CAPTURE(type, grad.name);
      const Tensor& x = inputs.at(name);
      const std::vector<int64_t> index = sample_indices(x.num_elements(), 6, 3);
      const OracleSample analytic = op().oracle(args, inputs, grad.name, index);
      double scale = 0.0;
      for (double v : analytic.value) scale = std::max(scale, std::fabs(v));
      for (size_t k = 0; k < index.size(); ++k) {
        const double x0 = x.get(index[k]);
        const double h = 1e-3 * std::max(1.0, std::fabs(x0));
        double side[2], at[2];
        for (int s = 0; s < 2; ++s) {
          TensorMap perturbed = inputs;
          perturbed[name] = x.copy(x.memory());
          perturbed[name].set(index[k], x0 + (s == 0 ? h : -h));
          at[s] = perturbed[name].get(index[k]);
          side[s] = vjp_objective(*op().primal(), forward, perturbed, op().cotangents());
        }
        const double fd = (side[0] - side[1]) / (at[0] - at[1]);
        CAPTURE(index[k], analytic.value[k], fd, scale);
        CHECK(std::fabs(fd - analytic.value[k]) <= 1e-4 * (std::fabs(analytic.value[k]) + scale));
      }
    }
  }
}

TEST_CASE(
    "triangle_multiplication_vjp's reference passes the oracle, which rejects a gradient 1% off "
    "(f32), the other triangle type or an ignored mask",
    "[triangle_multiplication_vjp]") {
  for (const char* dtype : {"f32", "bf16"}) {
    CAPTURE(dtype);
    const BoundArgs args = op().bind(triangle_vjp_layer(dtype, 11, 12, 8, 10, "outgoing"));
    const TensorMap inputs = op().make_inputs(args, 3);
    TensorMap outputs = run_reference(args, inputs);
    for (const TensorDecl& decl : op().outputs(args)) {
      CAPTURE(decl.name);
      CHECK(judge(compare(args, inputs, outputs, decl.name)) == Disposition::kPassed);
      if (std::string(dtype) != "f32") continue;
      // The largest element 1% off (10% for the input norm's scale and offset: sums over every
      // position of terms of both signs, whose bound carries the worst case of the whole chain
      // before them, at 8% of their value here).
      const bool input_norm = decl.name.rfind("dlayernorm_in", 0) == 0;
      Tensor& out = outputs.at(decl.name);
      int64_t largest = 0;
      for (int64_t i = 0; i < out.num_elements(); ++i) {
        if (std::fabs(out.get(i)) > std::fabs(out.get(largest))) largest = i;
      }
      const double kept = out.get(largest);
      out.set(largest, kept * (input_norm ? 1.1 : 1.01));
      CHECK(judge(compare(args, inputs, outputs, decl.name)) == Disposition::kFailed);
      out.set(largest, kept);
    }

    const BoundArgs incoming = op().bind(triangle_vjp_layer(dtype, 11, 12, 8, 10, "incoming"));
    const TensorMap other = run_reference(incoming, inputs);
    CHECK(judge(compare(args, inputs, other, "dx")) == Disposition::kFailed);
    CHECK(judge(compare(args, inputs, other, "dgate_in_weights")) == Disposition::kFailed);

    TensorMap unmasked_inputs = inputs;
    Tensor all(inputs.at("mask").spec());
    for (int64_t i = 0; i < all.num_elements(); ++i) all.data<bool>()[i] = true;
    unmasked_inputs.at("mask") = all;
    const TensorMap unmasked = run_reference(args, unmasked_inputs);
    CHECK(judge(compare(args, inputs, unmasked, "dx")) == Disposition::kFailed);
    CHECK(judge(compare(args, inputs, unmasked, "dprojection_in_weights")) == Disposition::kFailed);
  }
}
