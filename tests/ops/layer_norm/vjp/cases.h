// Shared helpers of the layer_norm_vjp tests: the forward's edge-case shapes with dout, and
// comparisons of every gradient with the oracle.
#pragma once

#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "ops/framework/numerics.h"
#include "ops/layer_norm/vjp/api.h"
#include "tests/ops/layer_norm/layer_norm_test_util.h"

namespace tokamax::testing {

// layer_norm_cases() (every axis kind, odd sizes, dtypes, parameter combinations, RMSNorm,
// scale_offset) with dout of x's spec; the forward's C = 1 layer norm is dropped (dx and dscale
// are exactly zero there: nothing to compare), plus an offset-only case.
inline std::vector<nlohmann::json> layer_norm_vjp_cases() {
  std::vector<nlohmann::json> cases;
  for (nlohmann::json args : layer_norm_cases()) {
    if (args.at("x") == "f32[5,1]") continue;
    args["dout"] = args.at("x");
    cases.push_back(args);
  }
  cases.push_back({{"x", "f32[20,48]"}, {"dout", "f32[20,48]"}, {"offset", "f32[48]"}});
  return cases;
}

// Every element of every gradient against the float64 oracle under the op's error model.
inline std::map<std::string, Comparison> compare_vjp(const BoundArgs& args, const TensorMap& inputs,
                                                     const TensorMap& outputs) {
  const LayerNormVjpOp& op = layer_norm_vjp_op();
  std::map<std::string, Comparison> result;
  for (const TensorDecl& decl : op.outputs(args)) {
    const Tensor& out = outputs.at(decl.name);
    std::vector<int64_t> index(static_cast<size_t>(out.num_elements()));
    std::iota(index.begin(), index.end(), int64_t{0});
    result[decl.name] =
        compare_to_oracle(out, op.oracle(args, inputs, decl.name, index), op.error_model(args));
  }
  return result;
}

// CHECKs that every gradient passes.
inline void check_vjp_passes(const BoundArgs& args, const TensorMap& inputs,
                             const TensorMap& outputs) {
  for (const auto& [name, cmp] : compare_vjp(args, inputs, outputs)) {
    CAPTURE(args.key(), name, cmp.max_abs_error, cmp.bound, cmp.worst_ratio, cmp.worst_index,
            cmp.nonfinite);
    CHECK(judge(cmp) == Disposition::kPassed);
  }
}

}  // namespace tokamax::testing
