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
#include "ops/common/flash_attention/forward.h"
#include "ops/dot_product_attention/base.h"
#include "ops/common/flash_attention/config.h"
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
    require_num_threads(c.num_threads, device);
    require_bf16_path(c.bf16_path, p.dtype == DType::kBF16, "bf16 q/k/v");
    // The tiles take the per-block products (cpu_gemm_f32's own AMX packing); the shared
    // panels have the vector kernels' layouts.
    require_config(c.bf16_path != "amx" || c.kv_packing == "per_block", "kv_packing",
                   [&] { return "bf16_path=amx runs kv_packing=per_block, not " + c.kv_packing; });
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
    CpuAttentionKernelOptions options;
    options.block_q = c.block_q;
    options.block_kv = c.block_kv;
    options.group_heads = c.group_heads;
    options.engine = gemm_engine(c.bf16_path);
    if (options.engine == GemmEngine::kBf16Dot && !attention_native_bf16_available(p)) {
      throw NotImplemented(
          "cpu dot_product_attention: native_dot needs bf16 inputs and "
          "avx512_bf16");
    }
    options.shared_kv_packing = c.kv_packing != "per_block";
    options.transposed = c.kv_packing == "transposed";
    options.num_threads = c.num_threads;
    flash_attention_cpu(p, options, inputs.at("q"), inputs.at("k"), inputs.at("v"),
                        find_tensor(inputs, "bias"), find_tensor(inputs, "mask"), outputs.at("out"),
                        p.return_residuals ? &outputs.at("lse") : nullptr,
                        p.dropout_mask ? find_tensor(inputs, "dropout_mask") : nullptr);
  }
};

}  // namespace

const Implementation& dot_product_attention_cpu_implementation() {
  static const CpuDotProductAttention impl;
  return impl;
}

}  // namespace tokamax
