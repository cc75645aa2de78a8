// dot_product_attention: the CPU implementation class ("cpu"): support, checks, launch.
//
// Dimensions.
//   B      flattened batch;  T, t  query and key/value positions
//   H, h   query and key/value heads, g = H / h
//   D, d   q/k and v head dimensions
//   bq, bkv  block_q, block_kv
#include <string>
#include <vector>

#include "backends/cpu/simd_target.h"
#include "ops/common/cpu_checks.h"
#include "ops/common/cpu_gemm/checks.h"
#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/common/cpu_softmax.h"
#include "ops/common/flash_attention/config.h"
#include "ops/common/flash_attention/forward.h"
#include "ops/dot_product_attention/base.h"
#include "ops/dot_product_attention/range_mask.h"
#include "ops/framework/errors.h"
#include "ops/framework/op.h"

namespace tokamax {
namespace {

class CpuDotProductAttention final
    : public TypedImplementation<AttentionProblem, CpuAttentionConfig> {
 public:
  std::string_view name() const override { return "cpu"; }
  nlohmann::json describe() const override {
    return {{"simd_target", cpu::simd_target_name()},
            {"softmax_target", cpu::simd_target_name()},
            {"native_bf16", gemm_has_native_bf16()}};
  }

  void check(const AttentionProblem& p, const Device&) const override {
    if (p.return_residuals && p.d == 0 && p.T > 0) {
      throw NotImplemented("cpu: return_residuals with d = 0 (the kernel skips the empty output)");
    }
    if (p.dtype == DType::kF64) {
      throw NotImplemented(
          "cpu: f64 inputs; the kernel's GEMMs and softmax run in f32, which would drop f64's "
          "precision (use the reference)");
    }
  }

  void check_config(const AttentionProblem& p, const CpuAttentionConfig& c,
                    const Device& device) const override {
    check_cpu_attention_config(p, c, device);
  }

  CpuAttentionConfig heuristics_config(const AttentionProblem& p,
                                       const Device& device) const override {
    return cpu_attention_heuristics_config(p, device);
  }

  std::vector<CpuAttentionConfig> autotuning_configs(const AttentionProblem& p,
                                                     const Device& device) const override {
    return cpu_attention_autotuning_configs(p, device);
  }

  void run(const AttentionProblem& p, const CpuAttentionConfig& c, const Device& device,
           const TensorMap& inputs, TensorMap& outputs) const override {
    check(p, device);
    const CpuAttentionKernelOptions options = cpu_attention_kernel_options(p, c);
    flash_attention_cpu(with_range_mask(p, inputs), options, inputs.at("q"), inputs.at("k"),
                        inputs.at("v"), find_tensor(inputs, "bias"), find_tensor(inputs, "mask"),
                        outputs.at("out"), p.return_residuals ? &outputs.at("lse") : nullptr,
                        p.dropout_mask ? find_tensor(inputs, "dropout_mask") : nullptr);
  }
};

}  // namespace

const Implementation& dot_product_attention_cpu_implementation() {
  static const CpuDotProductAttention impl;
  return impl;
}

}  // namespace tokamax
