// splash_attention on the flash-attention core: the core's problem and the layout copies.
//
// Dimensions: as cpu_core.h.
#include "ops/splash_attention/cpu_core.h"

#include <cstring>
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

void swap_outer(const Tensor& x, int64_t A, int64_t L, int64_t X, Tensor& y) {
  const auto size = static_cast<int64_t>(dtype_size(x.dtype()));
  const auto* from = static_cast<const char*>(x.raw());
  auto* to = static_cast<char*>(y.raw());
  if (x.dtype() == y.dtype()) {
    cpu::parallel_for(A * L, 0, [&](int64_t task, int) {
      const int64_t a = task / L, l = task % L;
      std::memcpy(to + (l * A + a) * X * size, from + (a * L + l) * X * size,
                  static_cast<size_t>(X * size));
    });
    return;
  }
  // Only f32 sources convert (the VJP's f32 gradients to their inputs' dtypes).
  const auto out_size = static_cast<int64_t>(dtype_size(y.dtype()));
  cpu::parallel_for(L, 0, [&](int64_t l, int) {
    // The A rows of one l: x rows a * L + l (stride L X) to y rows l * A + a (contiguous).
    store_rows(x.data<float>() + l * X, L * X, A, X, y.dtype(), to + l * A * X * out_size, X);
  });
}

}  // namespace tokamax
