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

#include "backends/cpu/cpu_device.h"
#include "backends/cpu/simd_target.h"
#include "ops/common/cpu_checks.h"
#include "ops/common/cpu_gemm/checks.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/framework/errors.h"
#include "ops/framework/op.h"
#include "ops/ragged_dot/base.h"
#include "ops/ragged_dot/cpu_config.h"
#include "ops/ragged_dot/cpu_general_kernel.h"
#include "ops/ragged_dot/cpu_int8_kernel.h"
#include "ops/ragged_dot/cpu_kernel.h"
#include "ops/ragged_dot/cpu_tiling.h"

namespace tokamax {
namespace {

class CpuRaggedDot final : public TypedImplementation<RaggedDotProblem, CpuRaggedDotConfig> {
 public:
  std::string_view name() const override { return "cpu"; }
  nlohmann::json describe() const override {
    return {{"simd_target", cpu::simd_target_name()},
            {"pack_target", cpu::simd_target_name()},
            {"native_bf16", gemm_has_native_bf16()}};
  }

  void check(const RaggedDotProblem& p, const Device&) const override {
    if ((p.lhs_dtype == DType::kF64 || p.rhs_dtype == DType::kF64) && p.out_dtype != DType::kF64) {
      throw NotImplemented("cpu: f64 inputs with a " + std::string(dtype_name(p.out_dtype)) +
                           " output; the kernel accumulates in f64 only for f64 outputs, and "
                           "an f32 accumulator would drop the f64 inputs' precision");
    }
    if (p.dims != RaggedDims::kDefault && p.out_dtype == DType::kF64) {
      throw NotImplemented("cpu: " + std::string(ragged_dims_name(p.dims)) +
                           " with an f64 output; these forms run on the GEMM engine's f32 "
                           "accumulators");
    }
    if (p.quantized() && (p.out_dtype == DType::kF64 || p.lhs_dtype == DType::kF64)) {
      throw NotImplemented(
          "cpu: quantized rhs with f64 lhs or output; the kernel dequantizes "
          "into f32 panels");
    }
  }

  // A precision preset runs as the product of its expanded pieces (RaggedDotProblem::computed):
  // configs are checked, chosen and run for that problem.
  void check_config(const RaggedDotProblem& given, const CpuRaggedDotConfig& c,
                    const Device& device) const override {
    const RaggedDotProblem p = given.computed();
    require_num_threads(c.num_threads, device);
    // The int8 paths run micro-tiles of their own (vnni) or tiles (amx).
    if (c.int8_path == "dequant_f32" || !is_int8_problem(p)) require_micro_tile(c.mr, c.nr);
    if (c.bf16_path != "convert_f32") {
      require_bf16_path(c.bf16_path, is_bf16_problem(p),
                        "bf16 lhs, bf16 rhs or f8e4m3 weights (without maybe_quantize_lhs) and an "
                        "f32/bf16/f16 output");
      require_config(c.packing == "packed", "packing", [&] {
        return c.bf16_path + " reads rhs as packed bf16 pairs; it needs packing=packed";
      });
    }
    if (c.int8_path == "vnni") {
      require_config(is_int8_problem(p), "int8_path", [&] {
        return "int8_path=vnni multiplies int8 by int8: it needs maybe_quantize_lhs with i8 rhs "
               "(in scale blocks of a multiple of 4 rows) and a non-f64 output";
      });
      const bool vnni = cpu::cpu_info(device).has("avx512_vnni") && int8_vnni_available();
      require_config(vnni, "int8_path",
                     [&] { return "int8_path=vnni needs a CPU with avx512_vnni"; });
      require_config(has_int8_micro_kernel(c.mr, c.nr), "mr", [&] {
        return "int8_path=vnni has the micro-tiles 8x48 and 6x64, got " + std::to_string(c.mr) +
               "x" + std::to_string(c.nr);
      });
    }
    if (c.int8_path == "amx") {
      require_config(is_int8_problem(p), "int8_path", [&] {
        return "int8_path=amx multiplies int8 by int8: it needs maybe_quantize_lhs with i8 rhs "
               "(in scale blocks of a multiple of 4 rows) and a non-f64 output";
      });
      require_config(gemm_has_amx_int8(), "int8_path", [] {
        return "int8_path=amx needs a CPU with amx_int8 whose tiles Linux grants (" +
               cpu::host_amx().reason + "), or TOKAMAX_AMX=emulate";
      });
    }
    if (p.dims != RaggedDims::kDefault) {
      require_config(c.packing == "packed", "packing", [&] {
        return std::string(ragged_dims_name(p.dims)) + " packs both operands; packing=packed";
      });
    }
    const CpuRaggedDotConfig clamped = clamp_to_problem(c, p);
    require_config(acc_elements(p, clamped) <= kCpuMaxAccElements, "tile_m", [&] {
      return "tile_m * task_n is " + std::to_string(acc_elements(p, clamped)) +
             ", too large for the per-thread f32 partial sums of a " +
             std::string(dtype_name(p.out_dtype)) + " output (max " +
             std::to_string(kCpuMaxAccElements) + ")";
    });
  }

  CpuRaggedDotConfig heuristics_config(const RaggedDotProblem& p,
                                       const Device& device) const override {
    if (p.dims != RaggedDims::kDefault) return cpu_general_heuristics_config(p, device);
    return cpu_ragged_dot_heuristics_config(p.computed(), device);
  }

  std::vector<CpuRaggedDotConfig> autotuning_configs(const RaggedDotProblem& p,
                                                     const Device& device) const override {
    if (p.dims != RaggedDims::kDefault) return cpu_general_autotuning_configs(p, device);
    return cpu_ragged_dot_autotuning_configs(p.computed(), device);
  }

  void run(const RaggedDotProblem& given, const CpuRaggedDotConfig& config, const Device& device,
           const TensorMap& given_inputs, TensorMap& outputs) const override {
    check(given, device);
    if (given.dims != RaggedDims::kDefault) {
      ragged_dot_general_cpu_kernel(given, config, given_inputs.at("lhs"), given_inputs.at("rhs"),
                                    outputs.at("out"));
      return;
    }
    const RaggedDotProblem p = given.computed();
    const TensorMap inputs = expand_precision_operands(given, given_inputs);
    const CpuRaggedDotConfig c = clamp_to_problem(config, p);
    RaggedDotWorkList work = make_ragged_dot_work_list(p.group_starts, p.M, p.K, p.out_N(),
                                                       c.tile_m, c.tile_n, c.tile_k, c.task_n);
    if (!p.zero_initialize) {  // rows outside the owned groups stay as they were
      work.tasks.resize(work.tasks.size() - static_cast<size_t>(work.num_zero_tasks));
      work.num_zero_tasks = 0;
    }
    CpuKernelOptions options;
    options.mr = c.mr;
    const int lanes = cpu::simd_f32_lanes();
    const bool int8 = c.int8_path != "dequant_f32" && is_int8_problem(p);
    if (c.nr % lanes != 0 && !int8) {
      throw NotImplemented("cpu ragged_dot: nr=" + std::to_string(c.nr) +
                           " is not a multiple of the " + std::to_string(lanes) +
                           " f32 lanes of this CPU's SIMD target");
    }
    options.nr_vectors = c.nr / lanes;
    options.pack_rhs = c.packing == "packed";
    options.engine = gemm_engine(c.bf16_path);
    options.int8 = int8;
    options.int8_tiles = int8 && c.int8_path == "amx";
    if (options.int8) options.nr_vectors = c.nr / 16;
    options.num_threads = c.num_threads;
    ragged_dot_cpu_kernel(p, work, options, inputs.at("lhs"), inputs.at("rhs"), outputs.at("out"),
                          p.has_bias ? &inputs.at("rhs_bias") : nullptr,
                          p.quantized() ? &inputs.at("rhs_scale") : nullptr);
  }
};

}  // namespace

const Implementation& ragged_dot_cpu_implementation() {
  static const CpuRaggedDot impl;
  return impl;
}

}  // namespace tokamax
