// splash_attention: the CPU implementation class ("cpu") on the flash-attention core.
//
// Dimensions: as base.h.
//
// The core reads [B, T, H, D] layouts, so q, k and v are copied once into them (O(T H D), the
// size of the inputs; never [T, t]) and out back. The mask (with the segment ids) becomes the
// core's key mask, built once per call: blocks it leaves empty are never computed, blocks whose
// rows see an interval of keys get no per-element test. Rows that see no key are then set to
// upstream's value for them (every key at mask_value: the mean of v, or ~0 under a sink).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "backends/cpu/simd_target.h"
#include "backends/cpu/thread_pool.h"
#include "ops/common/flash_attention/config.h"
#include "ops/common/flash_attention/forward.h"
#include "ops/framework/op.h"
#include "ops/splash_attention/base.h"
#include "ops/splash_attention/mask.h"

namespace tokamax {
namespace {

// The core's problem for these args: one batch, q heads over kv heads, no logits scale.
FlashAttentionProblem flash_problem(const SplashAttentionProblem& p,
                                    std::shared_ptr<const FlashKeyMask> mask,
                                    std::vector<float> sinks) {
  FlashAttentionProblem f;
  f.B = 1;
  f.T = p.T;
  f.t = p.t;
  f.H = p.Hq;
  f.h = p.Hkv;
  f.D = p.D;
  f.d = p.d;
  f.dtype = p.dtype;
  f.logits_soft_cap = p.soft_cap;
  f.key_mask = std::move(mask);
  f.sinks = std::move(sinks);
  return f;
}

FlashAttentionProblem flash_problem(const SplashAttentionProblem& p) {
  return flash_problem(p, std::make_shared<SplashMask>(p.mask, p.T, p.t), {});
}

// x [A, L, X] (elements of `size` bytes) into y [L, A, X], rows in parallel.
void swap_outer(const void* x, int64_t A, int64_t L, int64_t X, size_t size, void* y) {
  const int64_t row = X * static_cast<int64_t>(size);
  cpu::parallel_for(A * L, 0, [&](int64_t task, int) {
    const int64_t a = task / L, l = task % L;
    std::memcpy(static_cast<char*>(y) + (l * A + a) * row,
                static_cast<const char*>(x) + (a * L + l) * row, static_cast<size_t>(row));
  });
}

class CpuSplashAttention final
    : public TypedImplementation<SplashAttentionProblem, CpuAttentionConfig> {
 public:
  std::string_view name() const override { return "cpu"; }
  nlohmann::json describe() const override { return {{"simd_target", cpu::simd_target_name()}}; }

  void check_config(const SplashAttentionProblem& p, const CpuAttentionConfig& c,
                    const Device& device) const override {
    check_cpu_attention_config(flash_problem(p), c, device);
  }
  CpuAttentionConfig heuristics_config(const SplashAttentionProblem& p,
                                       const Device& device) const override {
    return cpu_attention_heuristics_config(flash_problem(p), device);
  }
  std::vector<CpuAttentionConfig> autotuning_configs(const SplashAttentionProblem& p,
                                                     const Device& device) const override {
    return cpu_attention_autotuning_configs(flash_problem(p), device);
  }

  void run(const SplashAttentionProblem& p, const CpuAttentionConfig& c, const Device&,
           const TensorMap& inputs, TensorMap& outputs) const override {
    const bool segments = p.has_segments;
    auto mask = std::make_shared<SplashMask>(
        p.mask, p.T, p.t, segments ? inputs.at("q_segment_ids").data<int32_t>() : nullptr,
        segments ? inputs.at("kv_segment_ids").data<int32_t>() : nullptr);
    std::vector<float> sinks;
    if (p.has_sinks) {
      for (int64_t hq = 0; hq < p.Hq; ++hq) {
        sinks.push_back(static_cast<float>(inputs.at("sinks").get(hq)));
      }
    }
    const FlashAttentionProblem f = flash_problem(p, mask, sinks);
    const size_t size = dtype_size(p.dtype);
    Tensor q(TensorSpec{p.dtype, {1, p.T, p.Hq, p.D}});
    Tensor k(TensorSpec{p.dtype, {1, p.t, p.Hkv, p.D}});
    Tensor v(TensorSpec{p.dtype, {1, p.t, p.Hkv, p.d}});
    Tensor out(TensorSpec{p.dtype, {1, p.T, p.Hq, p.d}});
    swap_outer(inputs.at("q").raw(), p.Hq, p.T, p.D, size, q.raw());
    swap_outer(inputs.at("k").raw(), p.Hkv, p.t, p.D, size, k.raw());
    swap_outer(inputs.at("v").raw(), p.Hkv, p.t, p.d, size, v.raw());
    Tensor* lse = p.return_residuals ? &outputs.at("logsumexp") : nullptr;
    Tensor* row_max = p.return_residuals ? &outputs.at("max_logits") : nullptr;
    flash_attention_cpu(f, cpu_attention_kernel_options(f, c), q, k, v, nullptr, nullptr, out, lse,
                        nullptr, row_max);
    swap_outer(out.raw(), p.T, p.Hq, p.d, size, outputs.at("out").raw());
    fix_rows_without_keys(p, *mask, sinks, inputs.at("v"), outputs);
  }

 private:
  // Upstream weighs every key of such a row at mask_value: m = max(mask_value, sink), l = t
  // exp(mask_value - m) + exp(sink - m), out = t exp(mask_value - m) / l * mean_j v_j.
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
      const double sink = sinks.empty() ? -INFINITY : sinks[hq];
      const double m = std::max(p.mask_value, sink);
      const double keys = static_cast<double>(p.t) * std::exp(p.mask_value - m);
      const double l = keys + (sinks.empty() ? 0.0 : std::exp(sink - m));
      const int64_t h = hq / p.groups();
      for (const int64_t r : rows) {
        for (int64_t c = 0; c < p.d; ++c) {
          out.set((hq * p.T + r) * p.d + c, keys / l * mean[h * p.d + c]);
        }
        if (p.return_residuals) {
          outputs.at("max_logits").data<float>()[hq * p.T + r] = static_cast<float>(m);
          outputs.at("logsumexp").data<float>()[hq * p.T + r] = static_cast<float>(m + std::log(l));
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
