// layer_norm: the CPU implementation class ("cpu"): support, checks, parameter staging, launch.
//
// Dimensions.
//   C      the normalized extent (x's extent along axis)
//   O      product of x's extents before the axis
//   I      product of x's extents after the axis (contiguous); I = 1 for the last axis
//   tI     inner_block: inner elements of one block when I > 1
//   L      f32 lanes of the SIMD target (16 on AVX-512, 8 on AVX2)
#include <string>
#include <vector>

#include "backends/cpu/simd_target.h"
#include "ops/framework/errors.h"
#include "ops/framework/op.h"
#include "ops/layer_norm/base.h"
#include "ops/layer_norm/cpu_config.h"
#include "ops/layer_norm/cpu_kernel.h"

namespace tokamax {
namespace {

// An optional [C] parameter as f32, padded with `fill` to a multiple of L so that the kernel's
// last partial vector can load whole vectors. Exact for f32/bf16/f16 parameters; f64 ones are
// rounded once (inside the error model's slack, see base_numerics.cc).
std::vector<float> stage_param(const TensorMap& inputs, const char* name, int64_t C, int64_t L,
                               float fill) {
  std::vector<float> values(static_cast<size_t>((C + L - 1) / L * L), fill);
  auto it = inputs.find(name);
  if (it != inputs.end()) {
    for (int64_t c = 0; c < C; ++c) values[c] = static_cast<float>(it->second.get(c));
  }
  return values;
}

class CpuLayerNorm final : public TypedImplementation<LayerNormProblem, CpuLayerNormConfig> {
 public:
  std::string_view name() const override { return "cpu"; }
  nlohmann::json describe() const override {
    return {{"simd_target", cpu::simd_target_name()},
            {"native_bf16", layer_norm_cpu_has_native_bf16()}};
  }

  void check(const LayerNormProblem& p, const Device&) const override {
    if (p.x_dtype == DType::kF64) {
      throw NotImplemented(
          "cpu: f64 x; the kernel keeps f32 statistics, which would drop f64 precision (the "
          "reference runs f64 in f64)");
    }
  }

  void check_config(const LayerNormProblem& p, const CpuLayerNormConfig& c,
                    const Device& device) const override {
    check_layer_norm_config(p, c, device);
  }

  CpuLayerNormConfig heuristics_config(const LayerNormProblem& p,
                                       const Device& device) const override {
    return cpu_layer_norm_heuristics_config(p, device);
  }

  std::vector<CpuLayerNormConfig> autotuning_configs(const LayerNormProblem& p,
                                                     const Device& device) const override {
    return cpu_layer_norm_autotuning_configs(p, device);
  }

  void run(const LayerNormProblem& p, const CpuLayerNormConfig& config, const Device& device,
           const TensorMap& inputs, TensorMap& outputs) const override {
    check(p, device);
    const int64_t L = cpu::simd_f32_lanes();
    std::vector<float> scale = stage_param(inputs, "scale", p.C, L, 1.0f);
    if (p.has_scale && p.scale_offset != 0.0) {
      for (int64_t c = 0; c < p.C; ++c) {
        scale[c] = static_cast<float>(static_cast<double>(scale[c]) + p.scale_offset);
      }
    }
    const std::vector<float> offset = stage_param(inputs, "offset", p.C, L, 0.0f);
    CpuLayerNormLaunch launch;
    launch.units_per_task = config.rows_per_task;
    launch.inner_block = config.inner_block;
    launch.num_threads = config.num_threads;
    launch.stream_stores = config.stream_stores;
    launch.native_bf16 = config.native_bf16;
    layer_norm_cpu_kernel(p, launch, inputs.at("x").raw(), scale.data(), offset.data(),
                          outputs.at("out").raw());
  }
};

}  // namespace

const Implementation& layer_norm_cpu_implementation() {
  static const CpuLayerNorm impl;
  return impl;
}

}  // namespace tokamax
