// Shared helpers of the layer_norm tests: edge-case shapes and oracle checks.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "ops/framework/numerics.h"
#include "ops/layer_norm/api.h"

namespace tokamax::testing {

// Last, first and middle axes; C and I not multiples of any vector width, C = 1, rank 1 and 4;
// with and without scale/offset; layer norm and RMSNorm; f32, bf16, f16 x; epsilon not default.
inline std::vector<nlohmann::json> layer_norm_cases() {
  using nlohmann::json;
  return {
      {{"x", "f32[17,37]"}, {"scale", "f32[37]"}, {"offset", "f32[37]"}},
      {{"x", "bf16[48,64]"}, {"scale", "f32[64]"}, {"offset", "f32[64]"}},
      {{"x", "bf16[9,130]"}, {"scale", "f32[130]"}},
      {{"x", "f16[24,50]"}, {"scale", "f16[50]"}, {"offset", "f16[50]"}},
      {{"x", "f32[10,70]"}, {"epsilon", 0.01}},
      {{"x", "f32[300]"}, {"scale", "f32[300]"}, {"offset", "f32[300]"}},
      {{"x", "bf16[2,3,4,64]"}, {"scale", "f32[64]"}, {"offset", "f32[64]"}},
      {{"x", "f32[5,1]"}, {"scale", "f32[1]"}, {"offset", "f32[1]"}},
      {{"x", "f32[32,24,40]"}, {"axis", 0}, {"scale", "f32[32]"}, {"offset", "f32[32]"}},
      {{"x", "bf16[64,8,16]"}, {"axis", 0}, {"scale", "f32[64]"}, {"offset", "f32[64]"}},
      {{"x", "f16[20,7,5]"}, {"axis", 0}, {"scale", "f32[20]"}, {"epsilon", 0.001}},
      {{"x", "f32[4,19,33]"}, {"axis", 1}, {"scale", "f32[19]"}, {"offset", "f32[19]"}},
      {{"x", "bf16[3,24,2,20]"}, {"axis", 1}, {"scale", "f32[24]"}, {"offset", "f32[24]"}},
      {{"x", "f16[6,16,3]"}, {"axis", -2}, {"scale", "f16[16]"}},
      {{"x", "f32[33,64]"}, {"scale", "f32[64]"}, {"subtract_mean", false}},
      {{"x", "f32[9,23]"},
       {"scale", "f32[23]"},
       {"offset", "f32[23]"},
       {"epsilon", 0.001},
       {"subtract_mean", false}},
      {{"x", "bf16[40,128]"}, {"scale", "f32[128]"}, {"subtract_mean", false}},
      {{"x", "f32[16,50,7]"}, {"axis", 0}, {"scale", "f32[16]"}, {"subtract_mean", false}},
      {{"x", "bf16[5,16,48]"}, {"axis", 1}, {"epsilon", 1e-5}, {"subtract_mean", false}},
      // scale_offset: Gemma's RMSNorm (1 + scale), and a layer norm along axis 0.
      {{"x", "bf16[12,96]"},
       {"scale", "bf16[96]"},
       {"scale_offset", 1.0},
       {"subtract_mean", false}},
      {{"x", "f32[24,10,9]"},
       {"axis", 0},
       {"scale", "f32[24]"},
       {"offset", "f32[24]"},
       {"scale_offset", -0.5}},
  };
}

// Every element of `out` against the float64 oracle under the op's error model.
inline Comparison compare_all(const BoundArgs& args, const TensorMap& inputs, const Tensor& out) {
  const LayerNormOp& op = layer_norm_op();
  std::vector<int64_t> index(static_cast<size_t>(out.num_elements()));
  std::iota(index.begin(), index.end(), int64_t{0});
  return compare_to_oracle(out, op.oracle(args, inputs, "out", index), op.error_model(args));
}

// Checks that `out` and `reference` (both within the oracle's bound of the exact values) are
// within twice that bound of each other at every element: one assertion for the tensor, naming
// the first element apart (an assertion per element would cost more than the kernels).
inline void require_within_twice_the_bound(const std::string& name, const Tensor& out,
                                           const Tensor& reference, const OracleSample& oracle,
                                           const ErrorModel& model) {
  int64_t apart = -1;
  for (int64_t i = 0; i < out.num_elements() && apart < 0; ++i) {
    const double bound = error_bound(model, oracle.value[i], oracle.magnitude[i]);
    if (!(std::fabs(out.get(i) - reference.get(i)) <= 2.0 * bound)) apart = i;
  }
  INFO(name << ": first element apart " << apart
            << (apart < 0 ? std::string()
                          : ": " + std::to_string(out.get(apart)) + " against the reference's " +
                                std::to_string(reference.get(apart))));
  REQUIRE(apart < 0);
}

}  // namespace tokamax::testing
