// Tests for ragged_dot's fp8 (e4m3) weights on the bf16 engines: the codes decoded to bf16 exactly,
// multiplied on vdpbf16ps or the AMX tiles (their emulation everywhere), each scale block's
// products scaled, against the float64 oracle.
#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "ops/common/cpu_gemm/checks.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/framework/errors.h"
#include "ops/ragged_dot/api.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/oracle_run.h"
#include "tests/tile_modes.h"

using namespace tokamax;
using nlohmann::json;

namespace {

// Per-column scales and K-blocked ones (blocks of 16 and 24 rows, so that K blocks of 10, 32
// and 64 straddle them), odd sizes, an empty group, rows past the sum, bf16 / f16 outputs and
// an activation.
std::vector<json> fp8_cases() {
  return {
      {{"lhs", "bf16[72,64]"},
       {"rhs", "f8e4m3[2,64,48]"},
       {"rhs_scale", "f32[2,48]"},
       {"preferred_element_type", "f32"},
       {"group_sizes", {31, 41}}},
      {{"lhs", "bf16[80,64]"},
       {"rhs", "f8e4m3[3,64,56]"},
       {"rhs_scale", "f32[3,4,56]"},
       {"activation", "silu"},
       {"group_sizes", {17, 0, 33}}},
      {{"lhs", "bf16[45,72]"},
       {"rhs", "f8e4m3[2,72,40]"},
       {"rhs_scale", "f32[2,3,40]"},
       {"preferred_element_type", "f16"},
       {"group_sizes", {7, 33}}},
  };
}

void check_on_engine(const std::string& path) {
  for (const json& args_json : fp8_cases()) {
    const BoundArgs args = ragged_dot_op().bind(args_json);
    const TensorMap inputs = ragged_dot_op().make_inputs(args, 3);
    // The micro-tile of this CPU's heuristics (the SIMD targets have different ones).
    const json heuristics =
        heuristics_config_json(ragged_dot_op().implementation("cpu"), args, cpu::host_device());
    for (int tile_k : {10, 32, 64}) {
      for (int tile_m : {16, 64}) {
        json config = heuristics;
        config["bf16_path"] = path;
        config["packing"] = "packed";
        config["tile_k"] = tile_k;
        config["tile_m"] = tile_m;
        config["tile_n"] = 2 * heuristics.at("nr").get<int>();
        config["task_n"] = 0;
        CAPTURE(path, args.key(), config.dump());
        const Comparison c =
            run_against_oracle(ragged_dot_op(), "cpu", args, config, inputs, args, "out");
        CAPTURE(c.worst_ratio, c.violations, c.nonfinite);
        REQUIRE(judge(c) == Disposition::kPassed);
      }
    }
  }
}

}  // namespace

TEST_CASE("e4m3 codes decode to bf16 exactly", "[ragged_dot][fp8]") {
  std::vector<uint8_t> codes(256);
  for (int i = 0; i < 256; ++i) codes[i] = static_cast<uint8_t>(i);
  std::vector<bf16> out(256);
  decode_f8e4m3_to_bf16(codes.data(), 16, 16, 16, out.data());
  for (int i = 0; i < 256; ++i) {
    const float want = f8e4m3_to_float(f8e4m3{static_cast<uint8_t>(i)});
    const float got = bf16_to_float(out[i]);
    CAPTURE(i, want, got);
    if (std::isnan(want)) {
      CHECK(std::isnan(got));
    } else {
      CHECK(got == want);
    }
  }
}

TEST_CASE("cpu ragged_dot runs fp8 weights on vdpbf16ps within the oracle's bound",
          "[ragged_dot][fp8]") {
  if (!gemm_has_native_bf16()) {
    WARN("skipping native_dot: this CPU has no avx512_bf16");
    return;
  }
  check_on_engine("native_dot");
}

TEST_CASE("cpu ragged_dot runs fp8 weights on the AMX tiles within the oracle's bound",
          "[ragged_dot][fp8][amx]") {
  testing::for_each_tile_mode([](cpu::TileMode) { check_on_engine("amx"); });
}

TEST_CASE("the bf16 engines take fp8 weights only with bf16 lhs and without quantized lhs",
          "[ragged_dot][fp8]") {
  const std::vector<json> refused = {
      {{"lhs", "f16[50,64]"},
       {"rhs", "f8e4m3[3,64,56]"},
       {"rhs_scale", "f32[3,4,56]"},
       {"group_sizes", {17, 0, 33}}},
      {{"lhs", "bf16[64,128]"},
       {"rhs", "f8e4m3[2,128,32]"},
       {"rhs_scale", "f32[2,32]"},
       {"maybe_quantize_lhs", true},
       {"group_sizes", {30, 30}}},
      {{"lhs", "bf16[64,128]"},
       {"rhs", "i8[2,128,32]"},
       {"rhs_scale", "f32[2,32]"},
       {"group_sizes", {30, 30}}},
  };
  for (const json& args_json : refused) {
    CAPTURE(args_json.dump());
    const BoundArgs args = ragged_dot_op().bind(args_json);
    CHECK_THROWS_AS(check_config_json(ragged_dot_op().implementation("cpu"), args,
                                      {{"bf16_path", "native_dot"}}),
                    InvalidArgument);
  }
}
