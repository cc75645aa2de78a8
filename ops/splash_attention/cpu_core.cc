// splash_attention on the flash-attention core: the core's problem and the layout copies.
//
// Dimensions: as cpu_core.h.
#include "ops/splash_attention/cpu_core.h"

#include <algorithm>
#include <utility>

#include "backends/cpu/thread_pool.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/splash_attention/mask.h"

namespace tokamax {

FlashAttentionProblem splash_flash_problem(const SplashAttentionProblem& p,
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
  f.heads_major = true;
  f.logits_soft_cap = p.soft_cap;
  f.key_mask = std::move(mask);
  f.sinks = std::move(sinks);
  return f;
}

FlashAttentionProblem splash_flash_problem(const SplashAttentionProblem& p) {
  return splash_flash_problem(p, std::make_shared<SplashMask>(p.mask, p.T, p.t), {});
}

std::vector<float> splash_sinks(const SplashAttentionProblem& p, const TensorMap& inputs) {
  std::vector<float> sinks;
  if (!p.has_sinks) return sinks;
  for (int64_t hq = 0; hq < p.Hq; ++hq) {
    sinks.push_back(static_cast<float>(inputs.at("sinks").get(hq)));
  }
  return sinks;
}

void convert_f32(const Tensor& x, Tensor& y) {
  constexpr int64_t kChunk = int64_t{1} << 16;
  const int64_t n = x.num_elements();
  const auto size = static_cast<int64_t>(dtype_size(y.dtype()));
  cpu::parallel_for((n + kChunk - 1) / kChunk, 0, [&](int64_t task, int) {
    const int64_t e0 = task * kChunk, len = std::min(kChunk, n - e0);
    store_rows(x.data<float>() + e0, len, 1, len, y.dtype(),
               static_cast<char*>(y.raw()) + e0 * size, len);
  });
}

}  // namespace tokamax
