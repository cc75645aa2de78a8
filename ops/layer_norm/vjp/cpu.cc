// layer_norm_vjp: the CPU implementation class ("cpu"): support, checks, parameter staging, launch.
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
#include "ops/layer_norm/cpu_config.h"
#include "ops/layer_norm/cpu_kernel.h"
#include "ops/layer_norm/vjp/base.h"
#include "ops/layer_norm/vjp/cpu_kernel.h"

namespace tokamax {
namespace {

// x-sized arrays a row reads (x and dout): what sizes the shared heuristics' tasks and blocks.
constexpr int kVjpReads = 2;

class CpuLayerNormVjp final : public TypedImplementation<LayerNormVjpProblem, CpuLayerNormConfig> {
 public:
  std::string_view name() const override { return "cpu"; }
  nlohmann::json describe() const override {
    return {{"simd_target", cpu::simd_target_name()},
            {"native_bf16", layer_norm_cpu_has_native_bf16()}};
  }

  void check(const LayerNormVjpProblem& p, const Device&) const override {
    if (p.x_dtype == DType::kF64) {
      throw NotImplemented(
          "cpu: f64 x; the kernel computes in f32, which would drop f64 precision (the "
          "reference runs f64 in f64)");
    }
  }

  void check_config(const LayerNormVjpProblem& p, const CpuLayerNormConfig& c,
                    const Device& device) const override {
    check_layer_norm_config(p, c, device);
  }

  CpuLayerNormConfig heuristics_config(const LayerNormVjpProblem& p,
                                       const Device& device) const override {
    return cpu_layer_norm_heuristics_config(p, device, kVjpReads);
  }

  std::vector<CpuLayerNormConfig> autotuning_configs(const LayerNormVjpProblem& p,
                                                     const Device& device) const override {
    return cpu_layer_norm_autotuning_configs(p, device, kVjpReads);
  }

  void run(const LayerNormVjpProblem& p, const CpuLayerNormConfig& config, const Device& device,
           const TensorMap& inputs, TensorMap& outputs) const override {
    check(p, device);
    // s' = scale + scale_offset in f32 (exact for f32/bf16/f16 scales without an offset; one
    // rounding otherwise, inside the error model's slack), zero-padded to a multiple of L so
    // that the partial last vector of a row loads whole vectors and has g = 0.
    const int64_t L = cpu::simd_f32_lanes();
    std::vector<float> scale(static_cast<size_t>((p.C + L - 1) / L * L), 0.0f);
    const Tensor* scale_in = find_tensor(inputs, "scale");
    for (int64_t c = 0; c < p.C; ++c) {
      scale[c] = scale_in == nullptr ? 1.0f : static_cast<float>(scale_in->get(c) + p.scale_offset);
    }
    std::vector<float> dscale(static_cast<size_t>(p.C)), doffset(static_cast<size_t>(p.C));
    CpuLayerNormVjpLaunch launch;
    launch.units_per_task = config.rows_per_task;
    launch.inner_block = config.inner_block;
    launch.num_threads = config.num_threads;
    launch.stream_stores = config.stream_stores;
    launch.native_bf16 = config.native_bf16;
    layer_norm_vjp_cpu_kernel(p, launch, inputs.at("x").raw(), scale.data(),
                              inputs.at("dout").raw(), outputs.at("dx").raw(), dscale.data(),
                              doffset.data());
    // The parameter gradients in their own dtype (one rounding each; C values).
    auto it = outputs.find("dscale");
    if (it != outputs.end()) {
      for (int64_t c = 0; c < p.C; ++c) it->second.set(c, dscale[c]);
    }
    it = outputs.find("doffset");
    if (it != outputs.end()) {
      for (int64_t c = 0; c < p.C; ++c) it->second.set(c, doffset[c]);
    }
  }
};

}  // namespace

const Implementation& layer_norm_vjp_cpu_implementation() {
  static const CpuLayerNormVjp impl;
  return impl;
}

}  // namespace tokamax
