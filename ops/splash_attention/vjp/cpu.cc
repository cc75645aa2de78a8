// splash_attention_vjp: the CPU implementation class ("cpu") on the flash-attention core's
// backward.
//
// Dimensions: as base.h.
//
// As the forward: the core reads q, k, v, dout (and out) in splash's layouts in place, the
// mask (with the segment ids) its key mask, so empty blocks are skipped. When rows that see no
// key have upstream's terms (every key weighted w_r != 0, base.h), the core writes f32
// gradients, the host adds those terms and rounds each gradient once into its output;
// otherwise the core writes the outputs directly. dsinks comes from the core's per-row lse and
// Dr.
#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <vector>

#include "backends/cpu/simd_target.h"
#include "backends/cpu/thread_pool.h"
#include "ops/common/flash_attention/vjp.h"
#include "ops/common/flash_attention/vjp_config.h"
#include "ops/framework/op.h"
#include "ops/splash_attention/cpu_core.h"
#include "ops/splash_attention/mask.h"
#include "ops/splash_attention/vjp/base.h"

namespace tokamax {
namespace {

// Row n of a [rows, X] tensor as double.
std::vector<double> row_of(const Tensor& x, int64_t n, int64_t X) {
  std::vector<double> out(static_cast<size_t>(X));
  for (int64_t e = 0; e < X; ++e) out[e] = x.get(n * X + e);
  return out;
}

class CpuSplashAttentionVjp final
    : public TypedImplementation<SplashAttentionVjpProblem, CpuAttentionVjpConfig> {
 public:
  std::string_view name() const override { return "cpu"; }
  nlohmann::json describe() const override { return {{"simd_target", cpu::simd_target_name()}}; }

  void check_config(const SplashAttentionVjpProblem& p, const CpuAttentionVjpConfig& c,
                    const Device& device) const override {
    check_cpu_attention_vjp_config(splash_flash_problem(p.fwd), c, device);
  }
  CpuAttentionVjpConfig heuristics_config(const SplashAttentionVjpProblem& p,
                                          const Device& device) const override {
    return cpu_attention_vjp_heuristics_config(splash_flash_problem(p.fwd), device);
  }
  std::vector<CpuAttentionVjpConfig> autotuning_configs(const SplashAttentionVjpProblem& p,
                                                        const Device& device) const override {
    return cpu_attention_vjp_autotuning_configs(splash_flash_problem(p.fwd), device);
  }

  void run(const SplashAttentionVjpProblem& vp, const CpuAttentionVjpConfig& c, const Device&,
           const TensorMap& inputs, TensorMap& outputs) const override {
    const SplashAttentionProblem& p = vp.fwd;
    auto mask = std::make_shared<SplashMask>(SplashMask::of(p.mask, p.T, p.t, inputs));
    const std::vector<float> sinks = splash_sinks(p, inputs);
    const FlashAttentionProblem f = splash_flash_problem(p, mask, sinks);
    std::vector<int64_t> keyless;
    for (int64_t r = 0; r < p.T; ++r) {
      if (mask->count(r) == 0) keyless.push_back(r);
    }
    bool keyless_terms = false;
    for (int64_t hq = 0; hq < p.Hq && !keyless_terms; ++hq) {
      for (const int64_t r : keyless) {
        if (splash_masked_weight(keyless_lse(vp, sinks, inputs, hq, r)) != 0.0) {
          keyless_terms = true;
          break;
        }
      }
    }
    Tensor& dq = outputs.at("dq");
    Tensor& dk = outputs.at("dk");
    Tensor& dv = outputs.at("dv");
    std::optional<Tensor> dq32, dk32, dv32;
    if (keyless_terms) {
      dq32.emplace(TensorSpec{DType::kF32, dq.spec().dims});
      dk32.emplace(TensorSpec{DType::kF32, dk.spec().dims});
      dv32.emplace(TensorSpec{DType::kF32, dv.spec().dims});
    }
    std::vector<float> lse_rows, delta_rows;
    FlashVjpRowStats stats;
    if (p.has_sinks) {
      lse_rows.resize(static_cast<size_t>(p.Hq * p.T));
      delta_rows.resize(static_cast<size_t>(p.Hq * p.T));
      stats = {lse_rows.data(), delta_rows.data()};
    }
    // logsumexp [Hq, T] is the core's [1, H, T].
    flash_attention_vjp_cpu(f, cpu_attention_vjp_options(c), inputs.at("q"), inputs.at("k"),
                            inputs.at("v"), nullptr, nullptr, inputs.at("dout"),
                            vp.has_lse ? &inputs.at("logsumexp") : nullptr,
                            vp.has_out ? &inputs.at("out") : nullptr, keyless_terms ? *dq32 : dq,
                            keyless_terms ? *dk32 : dk, keyless_terms ? *dv32 : dv, nullptr, stats);
    if (keyless_terms) {
      add_keyless_rows(vp, sinks, inputs, keyless, *dq32, *dk32, *dv32);
      convert_f32(*dq32, dq);
      convert_f32(*dk32, dk);
      convert_f32(*dv32, dv);
    }
    if (p.has_sinks) {
      store_dsinks(vp, sinks, inputs, keyless, lse_rows, delta_rows, outputs.at("dsinks"));
    }
  }

 private:
  // The f32 lse of a row that sees no key: the input, or the forward's.
  static float keyless_lse(const SplashAttentionVjpProblem& vp, const std::vector<float>& sinks,
                           const TensorMap& inputs, int64_t hq, int64_t r) {
    if (vp.has_lse) return inputs.at("logsumexp").data<float>()[hq * vp.fwd.T + r];
    const double sink = sinks.empty() ? -INFINITY : double{sinks[hq]};
    return static_cast<float>(splash_keyless_row(vp.fwd, sink).lse);
  }

  // Upstream's terms of the rows that see no key (base.h): P_j = w for every key, into the f32
  // gradients. Parallel over kv heads (each owns its dk, dv and its q heads' dq rows).
  static void add_keyless_rows(const SplashAttentionVjpProblem& vp, const std::vector<float>& sinks,
                               const TensorMap& inputs, const std::vector<int64_t>& rows,
                               Tensor& dq32, Tensor& dk32, Tensor& dv32) {
    const SplashAttentionProblem& p = vp.fwd;
    if (rows.empty()) return;
    const int64_t g = p.groups(), D = p.D, d = p.d, t = p.t;
    const double cap = p.soft_cap;
    float* dq = dq32.data<float>();
    float* dk = dk32.data<float>();
    float* dv = dv32.data<float>();
    const Tensor& q_in = inputs.at("q");
    const Tensor& k_in = inputs.at("k");
    const Tensor& v_in = inputs.at("v");
    const Tensor& dout_in = inputs.at("dout");
    cpu::parallel_for(p.Hkv, 0, [&](int64_t h, int) {
      std::vector<std::vector<double>> k(static_cast<size_t>(t)), v(static_cast<size_t>(t));
      for (int64_t j = 0; j < t; ++j) {
        k[j] = row_of(k_in, h * t + j, D);
        v[j] = row_of(v_in, h * t + j, d);
      }
      std::vector<double> dp(static_cast<size_t>(t)), ds(static_cast<size_t>(t));
      for (int64_t hq = h * g; hq < (h + 1) * g; ++hq) {
        for (const int64_t r : rows) {
          const double w = splash_masked_weight(keyless_lse(vp, sinks, inputs, hq, r));
          if (w == 0.0) continue;
          const std::vector<double> q = row_of(q_in, hq * p.T + r, D);
          const std::vector<double> dout = row_of(dout_in, hq * p.T + r, d);
          double di = 0.0;
          for (int64_t j = 0; j < t; ++j) {
            dp[j] = 0.0;
            for (int64_t c = 0; c < d; ++c) dp[j] += dout[c] * v[j][c];
            di += w * dp[j];
          }
          float* dq_row = dq + (hq * p.T + r) * D;
          for (int64_t j = 0; j < t; ++j) {
            ds[j] = w * (dp[j] - di);
            if (cap > 0.0) {
              double z = 0.0;
              for (int64_t e = 0; e < D; ++e) z += q[e] * k[j][e];
              const double th = std::tanh(z / cap);
              ds[j] *= 1.0 - th * th;
            }
            float* dk_row = dk + (h * t + j) * D;
            float* dv_row = dv + (h * t + j) * d;
            for (int64_t e = 0; e < D; ++e) {
              dq_row[e] += static_cast<float>(ds[j] * k[j][e]);
              dk_row[e] += static_cast<float>(ds[j] * q[e]);
            }
            for (int64_t c = 0; c < d; ++c) dv_row[c] += static_cast<float>(w * dout[c]);
          }
        }
      }
    });
  }

  // dsinks[hq] = -sum_r exp(sink - lse_r) (out_r . dout_r): the core's lse and Dr on rows that
  // see a key; on the others upstream's lse and out (weight * mean_j v_j, or the given out).
  static void store_dsinks(const SplashAttentionVjpProblem& vp, const std::vector<float>& sinks,
                           const TensorMap& inputs, const std::vector<int64_t>& keyless,
                           const std::vector<float>& lse_rows, const std::vector<float>& delta_rows,
                           Tensor& dsinks) {
    const SplashAttentionProblem& p = vp.fwd;
    const Tensor& v = inputs.at("v");
    const Tensor& dout = inputs.at("dout");
    std::vector<char> is_keyless(static_cast<size_t>(p.T), 0);
    for (const int64_t r : keyless) is_keyless[r] = 1;
    for (int64_t hq = 0; hq < p.Hq; ++hq) {
      const int64_t h = hq / p.groups();
      const double sink = sinks[hq];
      double sum = 0.0;
      for (int64_t r = 0; r < p.T; ++r) {
        if (is_keyless[r]) continue;
        const double lse = vp.has_lse ? inputs.at("logsumexp").data<float>()[hq * p.T + r]
                                      : lse_rows[hq * p.T + r];
        sum += std::exp(sink - lse) * delta_rows[hq * p.T + r];
      }
      if (!keyless.empty()) {
        const SplashKeylessRow row = splash_keyless_row(p, sink);
        std::vector<double> mean(static_cast<size_t>(p.d), 0.0);
        if (!vp.has_out) {
          for (int64_t j = 0; j < p.t; ++j) {
            for (int64_t c = 0; c < p.d; ++c) mean[c] += v.get((h * p.t + j) * p.d + c);
          }
        }
        for (const int64_t r : keyless) {
          double od = 0.0;
          for (int64_t c = 0; c < p.d; ++c) {
            const double o = vp.has_out ? inputs.at("out").get((hq * p.T + r) * p.d + c)
                                        : row.weight * mean[c] / static_cast<double>(p.t);
            od += o * dout.get((hq * p.T + r) * p.d + c);
          }
          sum += std::exp(sink - keyless_lse(vp, sinks, inputs, hq, r)) * od;
        }
      }
      dsinks.set(hq, -sum);
    }
  }
};

}  // namespace

const Implementation& splash_attention_vjp_cpu_implementation() {
  static const CpuSplashAttentionVjp impl;
  return impl;
}

}  // namespace tokamax
