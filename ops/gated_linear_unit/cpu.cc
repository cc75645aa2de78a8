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

#include "backends/cpu/cpu_info.h"
#include "ops/common/cpu_activation.h"
#include "ops/framework/errors.h"
#include "ops/gated_linear_unit/base.h"
#include "ops/gated_linear_unit/cpu_config.h"
#include "ops/gated_linear_unit/cpu_kernel.h"
#include "ops/framework/op.h"
#include "ops/ragged_dot/cpu_kernel.h"
#include "ops/ragged_dot/cpu_tiling.h"

namespace tokamax {
namespace {

void require_config(bool ok, const char* field, const std::string& message) {
  if (!ok) throw InvalidArgument("cpu gated_linear_unit config: " + message, field);
}

class CpuGatedLinearUnit final : public TypedImplementation<GluProblem, CpuGluConfig> {
 public:
  std::string_view op_name() const override { return "gated_linear_unit"; }
  std::string_view name() const override { return "cpu"; }
  nlohmann::json describe() const override {
    return {{"simd_target", cpu_kernel_target_name()},
            {"activation_target", cpu_activation_target_name()},
            {"native_bf16", cpu_kernel_has_native_bf16()}};
  }

  Support supported_on(const DeviceInfo& device) const override {
    if (device.kind == "cpu") return {};
    return {false, "the cpu implementation runs on CPUs, not on a '" + device.kind + "' device"};
  }

  void check(const GluProblem& p) const override {
    if (p.x_dtype == DType::kF64 || p.w_dtype == DType::kF64) {
      throw NotImplemented(
          "cpu: f64 operands; the kernel accumulates in f32, which would drop their precision "
          "(the reference runs f64)");
    }
  }

  void check_config(const GluProblem& p, const CpuGluConfig& c) const override {
    const int cores = cpu::host_device().cores;
    if (c.num_threads > 4 * cores) {
      require_config(false, "num_threads",
                     "num_threads is " + std::to_string(c.num_threads) + " but this machine has " +
                         std::to_string(cores) + " cores (at most 4x oversubscription)");
    }
    const int lanes = cpu_kernel_f32_lanes();
    if (c.nr % lanes != 0 || !has_micro_kernel_shape(lanes, c.mr, c.nr / lanes)) {
      require_config(false, "mr",
                     "no " + std::to_string(c.mr) + "x" + std::to_string(c.nr) +
                         " micro-kernel (mr x nr) for this CPU's " + cpu_kernel_target_name() +
                         " target");
    }
    if (c.bf16_path == "native_dot") {
      require_config(is_bf16_glu_problem(p), "bf16_path",
                     "native_dot needs bf16 x and bf16 weights");
      require_config(cpu_kernel_has_native_bf16(), "bf16_path",
                     "native_dot needs a CPU with avx512_bf16 (and AVX-512 kernels)");
    }
    const CpuGluConfig clamped = clamp_to_problem(c, p);
    const int64_t scratch = int64_t{clamped.tile_m} * 2 * task_columns(p, clamped);
    if (scratch > kCpuGluMaxScratchElements) {
      require_config(false, "tile_m",
                     "tile_m * 2 * tile_n is " + std::to_string(scratch) +
                         " (tile_n = 0 means all of N), too large for the per-thread f32 scratch "
                         "(max " +
                         std::to_string(kCpuGluMaxScratchElements) + ")");
    }
  }

  CpuGluConfig heuristics_config(const GluProblem& p, const DeviceInfo& device) const override {
    return cpu_glu_heuristics_config(p, device);
  }

  std::vector<CpuGluConfig> autotuning_configs(const GluProblem& p,
                                               const DeviceInfo& device) const override {
    return cpu_glu_autotuning_configs(p, device);
  }

  void run(const GluProblem& p, const CpuGluConfig& config, const TensorMap& inputs,
           TensorMap& outputs) const override {
    check(p);
    gated_linear_unit_cpu_kernel(p, clamp_to_problem(config, p), inputs.at("x"),
                                 inputs.at("weights"), outputs.at("out"));
  }
};

}  // namespace

const Implementation& gated_linear_unit_cpu_implementation() {
  static const CpuGatedLinearUnit impl;
  return impl;
}

}  // namespace tokamax
