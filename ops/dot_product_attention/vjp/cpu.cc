// dot_product_attention_vjp: the CPU implementation class ("cpu"): support, checks, launch.
//
// Dimensions: as ops/common/flash_attention/vjp_config.h.
#include <string>
#include <vector>

#include "backends/cpu/simd_target.h"
#include "ops/common/flash_attention/vjp.h"
#include "ops/common/flash_attention/vjp_config.h"
#include "ops/dot_product_attention/range_mask.h"
#include "ops/dot_product_attention/vjp/base.h"
#include "ops/framework/errors.h"
#include "ops/framework/op.h"

namespace tokamax {
namespace {

class CpuDotProductAttentionVjp final
    : public TypedImplementation<AttentionVjpProblem, CpuAttentionVjpConfig> {
 public:
  std::string_view name() const override { return "cpu"; }
  nlohmann::json describe() const override { return {{"simd_target", cpu::simd_target_name()}}; }

  void check(const AttentionVjpProblem& p, const Device&) const override {
    if (p.fwd.dtype == DType::kF64) {
      throw NotImplemented(
          "cpu: f64 inputs; the kernel's GEMMs and softmax run in f32, which would drop f64's "
          "precision (use the reference)");
    }
  }
  void check_config(const AttentionVjpProblem& p, const CpuAttentionVjpConfig& c,
                    const Device& device) const override {
    check_cpu_attention_vjp_config(p.fwd, c, device);
  }
  CpuAttentionVjpConfig heuristics_config(const AttentionVjpProblem& p,
                                          const Device& device) const override {
    return cpu_attention_vjp_heuristics_config(p.fwd, device);
  }
  std::vector<CpuAttentionVjpConfig> autotuning_configs(const AttentionVjpProblem& p,
                                                        const Device& device) const override {
    return cpu_attention_vjp_autotuning_configs(p.fwd, device);
  }
  void run(const AttentionVjpProblem& p, const CpuAttentionVjpConfig& config, const Device& device,
           const TensorMap& inputs, TensorMap& outputs) const override {
    check(p, device);
    flash_attention_vjp_cpu(
        with_range_mask(p.fwd, inputs), cpu_attention_vjp_options(config), inputs.at("q"),
        inputs.at("k"), inputs.at("v"), find_tensor(inputs, "bias"), find_tensor(inputs, "mask"),
        inputs.at("dout"), p.has_lse ? &inputs.at("lse") : nullptr,
        p.has_out ? &inputs.at("out") : nullptr, outputs.at("dq"), outputs.at("dk"),
        outputs.at("dv"), p.fwd.bias ? &outputs.at("dbias") : nullptr);
  }
};

}  // namespace

const Implementation& dot_product_attention_vjp_cpu_implementation() {
  static const CpuDotProductAttentionVjp impl;
  return impl;
}

}  // namespace tokamax
