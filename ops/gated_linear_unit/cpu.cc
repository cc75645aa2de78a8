// gated_linear_unit: the CPU implementation class ("cpu"): support, checks, launch.
//
// Dimensions.
//   M      rows of x, *B flattened
//   K      contraction extent
//   N      output features
//   tm, tn, tk, pn, mr, nr   see cpu_config.h
//   L      f32 lanes of the SIMD target (16 on AVX-512, 8 on AVX2)
#include <string>
#include <vector>

#include "backends/cpu/simd_target.h"
#include "ops/common/cpu_activation.h"
#include "ops/common/cpu_checks.h"
#include "ops/common/cpu_gemm/checks.h"
#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/framework/errors.h"
#include "ops/framework/op.h"
#include "ops/gated_linear_unit/base.h"
#include "ops/gated_linear_unit/cpu_config.h"
#include "ops/gated_linear_unit/cpu_kernel.h"

namespace tokamax {
namespace {

class CpuGatedLinearUnit final : public TypedImplementation<GluProblem, CpuGluConfig> {
 public:
  std::string_view name() const override { return "cpu"; }
  nlohmann::json describe() const override {
    return {{"simd_target", cpu::simd_target_name()},
            {"activation_target", cpu::simd_target_name()},
            {"native_bf16", gemm_has_native_bf16()}};
  }

  void check(const GluProblem& p, const Device&) const override {
    if (p.x_dtype == DType::kF64 || p.w_dtype == DType::kF64) {
      throw NotImplemented(
          "cpu: f64 operands; the kernel accumulates in f32, which would drop their precision "
          "(the reference runs f64)");
    }
  }

  // A precision preset runs as the product of its expanded pieces (GluProblem::computed): configs
  // are checked, chosen and run for that problem.
  void check_config(const GluProblem& given, const CpuGluConfig& c,
                    const Device& device) const override {
    const GluProblem p = given.computed();
    require_num_threads(c.num_threads, device);
    require_micro_tile(c.mr, c.nr);
    require_bf16_path(c.bf16_path, is_bf16_glu_problem(p), "bf16 x and bf16 weights");
    const CpuGluConfig clamped = clamp_to_problem(c, p);
    const int64_t scratch = int64_t{clamped.tile_m} * 2 * task_columns(p, clamped);
    require_config(scratch <= kCpuGluMaxScratchElements, "tile_m", [&] {
      return "tile_m * 2 * tile_n is " + std::to_string(scratch) +
             " (tile_n = 0 means all of N), too large for the per-thread f32 scratch (max " +
             std::to_string(kCpuGluMaxScratchElements) + ")";
    });
  }

  CpuGluConfig heuristics_config(const GluProblem& p, const Device& device) const override {
    return cpu_glu_heuristics_config(p.computed(), device);
  }

  std::vector<CpuGluConfig> autotuning_configs(const GluProblem& p,
                                               const Device& device) const override {
    return cpu_glu_autotuning_configs(p.computed(), device);
  }

  void run(const GluProblem& given, const CpuGluConfig& config, const Device& device,
           const TensorMap& given_inputs, TensorMap& outputs) const override {
    check(given, device);
    const GluProblem p = given.computed();
    const TensorMap inputs = expand_glu_precision_operands(given, given_inputs);
    gated_linear_unit_cpu_kernel(p, clamp_to_problem(config, p), inputs.at("x"),
                                 glu_weights(p, inputs), outputs.at("out"));
  }
};

}  // namespace

const Implementation& gated_linear_unit_cpu_implementation() {
  static const CpuGatedLinearUnit impl;
  return impl;
}

}  // namespace tokamax
