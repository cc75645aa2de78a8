// ragged_dot: the CPU implementation class ("cpu"): support, checks, launch.
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens), split into consecutive groups by group_sizes
//   K      contraction extent
//   N      output features
//   rows   sum(group_sizes) <= M; output rows past it are zero
//   tm, tn, tk   tile extents of M, N, K (tile_m, tile_n, tile_k); task_n columns per task
//   mr, nr       the micro-tile (mr rows x nr columns of accumulators in registers)
//   L            f32 lanes of the SIMD target (16 on AVX-512, 8 on AVX2)
#include <string>
#include <vector>

#include "backends/cpu/cpu_info.h"
#include "ops/framework/errors.h"
#include "ops/framework/op.h"
#include "ops/ragged_dot/base.h"
#include "ops/ragged_dot/cpu_config.h"
#include "ops/ragged_dot/cpu_kernel.h"
#include "ops/ragged_dot/cpu_pack.h"
#include "ops/ragged_dot/cpu_tiling.h"

namespace tokamax {
namespace {

class CpuRaggedDot final : public TypedImplementation<RaggedDotProblem, CpuRaggedDotConfig> {
 public:
  std::string_view op_name() const override { return "ragged_dot"; }
  std::string_view name() const override { return "cpu"; }
  nlohmann::json describe() const override {
    return {{"simd_target", cpu_kernel_target_name()},
            {"pack_target", pack_target_name()},
            {"native_bf16", cpu_kernel_has_native_bf16()}};
  }

  Support supported_on(const DeviceInfo& device) const override {
    if (device.kind == "cpu") return {};
    return {false, "the cpu implementation runs on CPUs, not on a '" + device.kind + "' device"};
  }

  void check(const RaggedDotProblem& p) const override {
    if ((p.lhs_dtype == DType::kF64 || p.rhs_dtype == DType::kF64) && p.out_dtype != DType::kF64) {
      throw NotImplemented("cpu: f64 inputs with a " + std::string(dtype_name(p.out_dtype)) +
                           " output; the kernel accumulates in f64 only for f64 outputs, and "
                           "an f32 accumulator would drop the f64 inputs' precision");
    }
  }

  void check_config(const RaggedDotProblem& p, const CpuRaggedDotConfig& c) const override {
    // More threads than the pool has are capped anyway; far more than the cores is a typo.
    const int cores = cpu::host_device().cores;
    require_cpu_config(c.num_threads <= 4 * cores, "num_threads", [&] {
      return "num_threads is " + std::to_string(c.num_threads) + " but this machine has " +
             std::to_string(cores) + " cores (at most 4x oversubscription)";
    });
    const int lanes = cpu_kernel_f32_lanes();
    require_cpu_config(c.nr % lanes == 0 && has_micro_kernel_shape(lanes, c.mr, c.nr / lanes), "mr",
                       [&] {
                         return "no " + std::to_string(c.mr) + "x" + std::to_string(c.nr) +
                                " micro-kernel (mr x nr) for this CPU's " +
                                cpu_kernel_target_name() + " target; it has " + shape_list(lanes);
                       });
    if (c.bf16_path == "native_dot") {
      require_cpu_config(is_bf16_problem(p), "bf16_path", [&] {
        return "native_dot needs bf16 lhs and rhs and an f32/bf16/f16 output";
      });
      require_cpu_config(cpu_kernel_has_native_bf16(), "bf16_path", [&] {
        return "native_dot needs a CPU with avx512_bf16 (and AVX-512 kernels)";
      });
      require_cpu_config(c.packing == "packed", "packing", [&] {
        return "native_dot reads rhs as packed bf16 pairs; it needs packing=packed";
      });
    }
    const CpuRaggedDotConfig clamped = clamp_to_problem(c, p);
    require_cpu_config(acc_elements(p, clamped) <= kCpuMaxAccElements, "tile_m", [&] {
      return "tile_m * task_n is " + std::to_string(acc_elements(p, clamped)) +
             ", too large for the per-thread f32 partial sums of a " +
             std::string(dtype_name(p.out_dtype)) + " output (max " +
             std::to_string(kCpuMaxAccElements) + ")";
    });
  }

  CpuRaggedDotConfig heuristics_config(const RaggedDotProblem& p,
                                       const DeviceInfo& device) const override {
    return cpu_ragged_dot_heuristics_config(p, device);
  }

  std::vector<CpuRaggedDotConfig> autotuning_configs(const RaggedDotProblem& p,
                                                     const DeviceInfo& device) const override {
    return cpu_ragged_dot_autotuning_configs(p, device);
  }

  void run(const RaggedDotProblem& p, const CpuRaggedDotConfig& config, const TensorMap& inputs,
           TensorMap& outputs) const override {
    check(p);
    const CpuRaggedDotConfig c = clamp_to_problem(config, p);
    const RaggedDotWorkList work = make_ragged_dot_work_list(
        p.group_starts, p.M, p.K, p.N, c.tile_m, c.tile_n, c.tile_k, c.task_n);
    CpuKernelOptions options;
    options.mr = c.mr;
    const int lanes = cpu_kernel_f32_lanes();
    if (c.nr % lanes != 0) {
      throw NotImplemented("cpu ragged_dot: nr=" + std::to_string(c.nr) +
                           " is not a multiple of the " + std::to_string(lanes) +
                           " f32 lanes of this CPU's SIMD target");
    }
    options.nr_vectors = c.nr / lanes;
    options.pack_rhs = c.packing == "packed";
    options.native_bf16 = c.bf16_path == "native_dot";
    options.num_threads = c.num_threads;
    ragged_dot_cpu_kernel(p, work, options, inputs.at("lhs"), inputs.at("rhs"), outputs.at("out"));
  }

 private:
  static std::string shape_list(int lanes) {
    std::string out;
    for (const MicroKernelShape& s : micro_kernel_shapes(lanes)) {
      out += (out.empty() ? "" : ", ") + std::to_string(s.mr) + "x" +
             std::to_string(s.nr_vectors * lanes);
    }
    return out;
  }
};

}  // namespace

const Implementation& ragged_dot_cpu_implementation() {
  static const CpuRaggedDot impl;
  return impl;
}

}  // namespace tokamax
