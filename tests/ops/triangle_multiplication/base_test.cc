// Tests of triangle_multiplication's binding, the reference against the float64 oracle, and the
// oracle's bound: an f32 output 5% off, the other triangle type, or a mask ignored, fail it.
#include "ops/triangle_multiplication/base.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "ops/framework/numerics.h"
#include "ops/triangle_multiplication/api.h"
#include "tests/ops/bind_errors.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/triangle_multiplication/layer_args.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

json with(json args, const char* key, json value) {
  args[key] = std::move(value);
  return args;
}

Comparison compare(const BoundArgs& args, const TensorMap& inputs, const Tensor& out) {
  std::vector<int64_t> index(static_cast<size_t>(out.num_elements()));
  for (size_t i = 0; i < index.size(); ++i) index[i] = static_cast<int64_t>(i);
  return compare_to_oracle(out, triangle_multiplication_op().oracle(args, inputs, "out", index),
                           triangle_multiplication_op().error_model(args));
}

}  // namespace

TEST_CASE("triangle_multiplication bind names the argument it rejects",
          "[triangle_multiplication]") {
  const json base = triangle_layer("bf16", 8, 16, 32, 24, "outgoing");
  CHECK(bind_error_field(triangle_multiplication_op(), base) == "<no error>");
  const std::vector<std::pair<json, std::string>> bad = {
      {with(base, "x", "bf16[8,9,16]"), "x"},
      {with(base, "x", "i8[8,8,16]"), "x"},
      {with(base, "mask", "bool[8,9]"), "mask"},
      {with(base, "mask", "f32[8,8]"), "mask"},
      {with(base, "projection_in_weights", "bf16[16,32]"), "projection_in_weights"},
      {with(base, "gate_in_weights", "bf16[16,2,31]"), "gate_in_weights"},
      {with(base, "gate_out_weights", "bf16[16,25]"), "gate_out_weights"},
      {with(base, "layernorm_in_scale", "bf16[15]"), "layernorm_in_scale"},
      {with(base, "layernorm_out_offset", "i32[32]"), "layernorm_out_offset"},
      {with(base, "triangle_type", "sideways"), "triangle_type"},
      {with(base, "triangle_type", nullptr), "triangle_type"},
      {with(base, "epsilon", 0.0), "epsilon"},
      {with(base, "epsilon", "small"), "epsilon"},
      {with(base, "precision", "highest"), "precision"},
  };
  for (const auto& [args, field] : bad) {
    CAPTURE(args.dump());
    CHECK(bind_error_field(triangle_multiplication_op(), args) == field);
  }
  const BoundArgs bound = triangle_multiplication_op().bind(base);
  CHECK(triangle_multiplication_op().outputs(bound).at(0).spec ==
        TensorSpec{DType::kBF16, {8, 8, 24}});
  CHECK(bound.args["epsilon"] == 1e-6);
}

TEST_CASE(
    "triangle_multiplication's oracle passes the reference and rejects a 5% error (f32), "
    "the other triangle type or an ignored mask",
    "[triangle_multiplication]") {
  for (const char* dtype : {"f32", "bf16"}) {
    CAPTURE(dtype);
    const BoundArgs args =
        triangle_multiplication_op().bind(triangle_layer(dtype, 12, 16, 8, 12, "outgoing"));
    const TensorMap inputs = triangle_multiplication_op().make_inputs(args, 3);
    const Implementation& reference = triangle_multiplication_op().implementation("reference");
    TensorMap outputs = triangle_multiplication_op().allocate_outputs(args);
    run_json(reference, args, json::object(), inputs, outputs);
    Tensor& out = outputs.at("out");
    CHECK(judge(compare(args, inputs, out)) == Disposition::kPassed);
    // 16-bit layers may round every stage to x's dtype, so their bound is wide; f32's is the
    // accumulation's alone.
    if (std::string(dtype) == "f32") {
      int64_t largest = 0;
      for (int64_t i = 0; i < out.num_elements(); ++i) {
        if (std::fabs(out.get(i)) > std::fabs(out.get(largest))) largest = i;
      }
      const double kept = out.get(largest);
      out.set(largest, kept * 1.05);
      CHECK(judge(compare(args, inputs, out)) == Disposition::kFailed);
      out.set(largest, kept);
    }

    const BoundArgs incoming =
        triangle_multiplication_op().bind(triangle_layer(dtype, 12, 16, 8, 12, "incoming"));
    TensorMap other = triangle_multiplication_op().allocate_outputs(incoming);
    run_json(reference, incoming, json::object(), inputs, other);
    CHECK(judge(compare(args, inputs, other.at("out"))) == Disposition::kFailed);

    TensorMap unmasked_inputs = inputs;
    Tensor all(inputs.at("mask").spec());
    for (int64_t i = 0; i < all.num_elements(); ++i) all.data<bool>()[i] = true;
    unmasked_inputs.at("mask") = all;
    TensorMap unmasked = triangle_multiplication_op().allocate_outputs(args);
    run_json(reference, args, json::object(), unmasked_inputs, unmasked);
    CHECK(judge(compare(args, inputs, unmasked.at("out"))) == Disposition::kFailed);
  }
}
