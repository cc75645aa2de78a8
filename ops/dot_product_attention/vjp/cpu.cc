// dot_product_attention_vjp: the CPU implementation class ("cpu"): support, checks, launch.
//
// Dimensions: as cpu_config.h.
#include <string>
#include <vector>

#include "backends/cpu/simd_target.h"
#include "ops/common/cpu_checks.h"
#include "ops/common/cpu_gemm/checks.h"
#include "ops/common/flash_attention/vjp.h"
#include "ops/dot_product_attention/vjp/base.h"
#include "ops/dot_product_attention/vjp/cpu_config.h"
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
    require_num_threads(c.num_threads, device);
    if (c.bf16_path != "convert_f32") {
      // native_dot and native_all both run on vdpbf16ps.
      require_bf16_path(c.bf16_path == "amx" ? "amx" : "native_dot", p.fwd.dtype == DType::kBF16,
                        "bf16 q/k/v");
    }
  }
  CpuAttentionVjpConfig heuristics_config(const AttentionVjpProblem& p,
                                          const Device& device) const override {
    return cpu_attention_vjp_heuristics_config(p, device);
  }
  std::vector<CpuAttentionVjpConfig> autotuning_configs(const AttentionVjpProblem& p,
                                                        const Device& device) const override {
    return cpu_attention_vjp_autotuning_configs(p, device);
  }
  void run(const AttentionVjpProblem& p, const CpuAttentionVjpConfig& config, const Device& device,
           const TensorMap& inputs, TensorMap& outputs) const override {
    check(p, device);
    FlashVjpOptions options;
    options.block_q = config.block_q;
    options.block_kv = config.block_kv;
    options.engine =
        gemm_engine(config.bf16_path == "native_all" ? "native_dot" : config.bf16_path);
    options.round_p = config.bf16_path == "native_all" || config.bf16_path == "amx";
    options.num_threads = config.num_threads;
    flash_attention_vjp_cpu(
        p.fwd, options, inputs.at("q"), inputs.at("k"), inputs.at("v"), find_tensor(inputs, "bias"),
        find_tensor(inputs, "mask"), inputs.at("dout"), p.has_lse ? &inputs.at("lse") : nullptr,
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
