// splash_attention: the CPU implementation class ("cpu") on the flash-attention core.
//
// Dimensions: as base.h.
//
// The core reads splash's [H, T, D] layouts in place (heads_major). The mask (with the segment ids)
// becomes the core's key mask, built once per call: blocks it leaves empty are never computed,
// blocks whose rows see an interval of keys get no per-element test. Rows that see no key are then
// set to upstream's value for them (every key at mask_value: the mean of v, or ~0 under a sink).
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "backends/cpu/simd_target.h"
#include "ops/common/flash_attention/config.h"
#include "ops/common/flash_attention/forward.h"
#include "ops/framework/op.h"
#include "ops/splash_attention/base.h"
#include "ops/splash_attention/cpu_core.h"
#include "ops/splash_attention/mask.h"

namespace tokamax {
namespace {

class CpuSplashAttention final
    : public TypedImplementation<SplashAttentionProblem, CpuAttentionConfig> {
 public:
  std::string_view name() const override { return "cpu"; }
  nlohmann::json describe() const override { return {{"simd_target", cpu::simd_target_name()}}; }

  void check_config(const SplashAttentionProblem& p, const CpuAttentionConfig& c,
                    const Device& device) const override {
    check_cpu_attention_config(splash_flash_problem(p), c, device);
  }
  CpuAttentionConfig heuristics_config(const SplashAttentionProblem& p,
                                       const Device& device) const override {
    return cpu_attention_heuristics_config(splash_flash_problem(p), device);
  }
  std::vector<CpuAttentionConfig> autotuning_configs(const SplashAttentionProblem& p,
                                                     const Device& device) const override {
    return cpu_attention_autotuning_configs(splash_flash_problem(p), device);
  }

  void run(const SplashAttentionProblem& p, const CpuAttentionConfig& c, const Device&,
           const TensorMap& inputs, TensorMap& outputs) const override {
    auto mask = std::make_shared<SplashMask>(SplashMask::of(p.mask, p.T, p.t, inputs));
    const std::vector<float> sinks = splash_sinks(p, inputs);
    const FlashAttentionProblem f = splash_flash_problem(p, mask, sinks);
    Tensor* lse = p.return_residuals ? &outputs.at("logsumexp") : nullptr;
    Tensor* row_max = p.return_residuals ? &outputs.at("max_logits") : nullptr;
    flash_attention_cpu(f, cpu_attention_kernel_options(f, c), inputs.at("q"), inputs.at("k"),
                        inputs.at("v"), nullptr, nullptr, outputs.at("out"), lse, nullptr, row_max);
    fix_rows_without_keys(p, *mask, sinks, inputs.at("v"), outputs);
  }

 private:
  // Upstream weighs every key of such a row at mask_value (splash_keyless_row).
  static void fix_rows_without_keys(const SplashAttentionProblem& p, const SplashMask& mask,
                                    const std::vector<float>& sinks, const Tensor& v,
                                    TensorMap& outputs) {
    std::vector<int64_t> rows;
    for (int64_t r = 0; r < p.T; ++r) {
      if (mask.count(r) == 0) rows.push_back(r);
    }
    if (rows.empty()) return;
    std::vector<double> mean(static_cast<size_t>(p.Hkv * p.d), 0.0);
    for (int64_t h = 0; h < p.Hkv; ++h) {
      for (int64_t j = 0; j < p.t; ++j) {
        for (int64_t c = 0; c < p.d; ++c) mean[h * p.d + c] += v.get((h * p.t + j) * p.d + c);
      }
    }
    for (double& x : mean) x /= static_cast<double>(p.t);
    Tensor& out = outputs.at("out");
    for (int64_t hq = 0; hq < p.Hq; ++hq) {
      const SplashKeylessRow keyless =
          splash_keyless_row(p, sinks.empty() ? -INFINITY : double{sinks[hq]});
      const int64_t h = hq / p.groups();
      for (const int64_t r : rows) {
        for (int64_t c = 0; c < p.d; ++c) {
          out.set((hq * p.T + r) * p.d + c, keyless.weight * mean[h * p.d + c]);
        }
        if (p.return_residuals) {
          outputs.at("max_logits").data<float>()[hq * p.T + r] = static_cast<float>(keyless.max);
          outputs.at("logsumexp").data<float>()[hq * p.T + r] = static_cast<float>(keyless.lse);
        }
      }
    }
  }
};

}  // namespace

const Implementation& splash_attention_cpu_implementation() {
  static const CpuSplashAttention impl;
  return impl;
}

}  // namespace tokamax
