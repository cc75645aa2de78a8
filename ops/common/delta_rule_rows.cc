// The delta rule's passes over a state [K, V] in f32 (delta_rule_rows.h), compiled once per SIMD
// target by Highway. Columns go in blocks of four vectors whose sums stay in registers while the
// rows stream past: one read and one write of the state per pass. The passes that read or write
// a stored state (f32, bf16, f16) are in delta_rule_stored.cc.
//
// Dimensions: as delta_rule_rows.h; L the f32 lanes of the target.
#include "ops/common/delta_rule_rows.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ops/framework/dtype.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/common/delta_rule_rows.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target; highway.h must follow it.
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// For every row i of S: S_i = a_i S_i + b_i r (b null: no add), acc += c_i S_i after it; the new
// rows also stored into `copy` ([K, V]) when it is not null.
template <bool kAdd>
void RowsPass(float* S, const float* a, const float* b, const float* r, const float* c, int64_t K,
              int64_t V, float* acc, float* copy) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  int64_t x = 0;
  for (; x + 4 * L <= V; x += 4 * L) {
    auto s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
    auto r0 = hn::Zero(d), r1 = hn::Zero(d), r2 = hn::Zero(d), r3 = hn::Zero(d);
    if constexpr (kAdd) {
      r0 = hn::LoadU(d, r + x);
      r1 = hn::LoadU(d, r + x + L);
      r2 = hn::LoadU(d, r + x + 2 * L);
      r3 = hn::LoadU(d, r + x + 3 * L);
    }
    for (int64_t i = 0; i < K; ++i) {
      float* row = S + i * V + x;
      auto v0 = hn::LoadU(d, row), v1 = hn::LoadU(d, row + L);
      auto v2 = hn::LoadU(d, row + 2 * L), v3 = hn::LoadU(d, row + 3 * L);
      if constexpr (kAdd) {
        const auto bi = hn::Set(d, b[i]);
        v0 = hn::MulAdd(bi, r0, v0);
        v1 = hn::MulAdd(bi, r1, v1);
        v2 = hn::MulAdd(bi, r2, v2);
        v3 = hn::MulAdd(bi, r3, v3);
      } else {
        const auto ai = hn::Set(d, a[i]);
        v0 = hn::Mul(ai, v0);
        v1 = hn::Mul(ai, v1);
        v2 = hn::Mul(ai, v2);
        v3 = hn::Mul(ai, v3);
      }
      hn::StoreU(v0, d, row);
      hn::StoreU(v1, d, row + L);
      hn::StoreU(v2, d, row + 2 * L);
      hn::StoreU(v3, d, row + 3 * L);
      if (copy) {
        float* out = copy + i * V + x;
        hn::StoreU(v0, d, out);
        hn::StoreU(v1, d, out + L);
        hn::StoreU(v2, d, out + 2 * L);
        hn::StoreU(v3, d, out + 3 * L);
      }
      const auto ci = hn::Set(d, c[i]);
      s0 = hn::MulAdd(ci, v0, s0);
      s1 = hn::MulAdd(ci, v1, s1);
      s2 = hn::MulAdd(ci, v2, s2);
      s3 = hn::MulAdd(ci, v3, s3);
    }
    hn::StoreU(s0, d, acc + x);
    hn::StoreU(s1, d, acc + x + L);
    hn::StoreU(s2, d, acc + x + 2 * L);
    hn::StoreU(s3, d, acc + x + 3 * L);
  }
  for (; x < V; ++x) {  // the last V % 4L columns
    float sum = 0.0f;
    for (int64_t i = 0; i < K; ++i) {
      float& s = S[i * V + x];
      s = kAdd ? s + b[i] * r[x] : a[i] * s;
      if (copy) copy[i * V + x] = s;
      sum += c[i] * s;
    }
    acc[x] = sum;
  }
}

// Token t's update and token t + 1's decay in one pass (both on the same state slot): for every
// row i, S_i += b_i r, out += q_i S_i, S_i *= d_i, pred += k_i S_i (and copy_i = S_i when
// `copy` is not null). NB vectors of columns at a time, so 2 NB accumulator chains hide the FMA
// latency (each gets one FMA per row).
template <int NB>
HWY_INLINE void UpdateDecayBlock(float* S, const float* b, const float* r, const float* q,
                                 const float* dn, const float* kn, int64_t K, int64_t V, int64_t x,
                                 float* out, float* pred, float* copy) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  hn::Vec<decltype(d)> rv[NB], o[NB], p[NB];
  for (int j = 0; j < NB; ++j) {
    rv[j] = hn::LoadU(d, r + x + j * L);
    o[j] = hn::Zero(d);
    p[j] = hn::Zero(d);
  }
  for (int64_t i = 0; i < K; ++i) {
    float* row = S + i * V + x;
    const auto bi = hn::Set(d, b[i]), qi = hn::Set(d, q[i]);
    const auto di = hn::Set(d, dn[i]), ki = hn::Set(d, kn[i]);
    for (int j = 0; j < NB; ++j) {
      auto v = hn::MulAdd(bi, rv[j], hn::LoadU(d, row + j * L));
      o[j] = hn::MulAdd(qi, v, o[j]);
      v = hn::Mul(di, v);
      p[j] = hn::MulAdd(ki, v, p[j]);
      hn::StoreU(v, d, row + j * L);
      if (copy) hn::StoreU(v, d, copy + i * V + x + j * L);
    }
  }
  for (int j = 0; j < NB; ++j) {
    hn::StoreU(o[j], d, out + x + j * L);
    hn::StoreU(p[j], d, pred + x + j * L);
  }
}

void UpdateDecay(float* S, const float* b, const float* r, const float* q, const float* dn,
                 const float* kn, int64_t K, int64_t V, float* out, float* pred, float* copy) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  int64_t x = 0;
#if HWY_TARGET <= HWY_AVX3
  // 32 vector registers: four columns' worth of chains and their operands fit.
  for (; x + 4 * L <= V; x += 4 * L)
    UpdateDecayBlock<4>(S, b, r, q, dn, kn, K, V, x, out, pred, copy);
#endif
  for (; x + 2 * L <= V; x += 2 * L)
    UpdateDecayBlock<2>(S, b, r, q, dn, kn, K, V, x, out, pred, copy);
  for (; x < V; ++x) {  // the last V % 2L columns
    float o = 0.0f, pr = 0.0f;
    for (int64_t i = 0; i < K; ++i) {
      float& sv = S[i * V + x];
      sv += b[i] * r[x];
      o += q[i] * sv;
      sv *= dn[i];
      if (copy) copy[i * V + x] = sv;
      pr += kn[i] * sv;
    }
    out[x] = o;
    pred[x] = pr;
  }
}

void DecayPredict(float* S, const float* d, const float* k, int64_t K, int64_t V, float* pred,
                  float* copy) {
  RowsPass<false>(S, d, nullptr, nullptr, k, K, V, pred, copy);
}

void UpdateOutput(float* S, const float* bk, const float* r, const float* q, int64_t K, int64_t V,
                  float* out) {
  RowsPass<true>(S, nullptr, bk, r, q, K, V, out, nullptr);
}

float Dot(const float* a, const float* b, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  auto acc0 = hn::Zero(d), acc1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * L <= n; i += 2 * L) {
    acc0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), acc0);
    acc1 = hn::MulAdd(hn::LoadU(d, a + i + L), hn::LoadU(d, b + i + L), acc1);
  }
  float sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(acc0, acc1)));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void L2Normalize(const float* x, int64_t ldx, int64_t rows, int64_t n, float scale, float* y,
                 int64_t ldy) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    float* yr = y + r * ldy;
    auto acc = hn::Zero(d);
    int64_t i = 0;
    for (; i + L <= n; i += L) {
      const auto v = hn::LoadU(d, xr + i);
      acc = hn::MulAdd(v, v, acc);
    }
    float sum = hn::GetLane(hn::SumOfLanes(d, acc));
    for (; i < n; ++i) sum += xr[i] * xr[i];
    const float factor = scale / std::sqrt(sum + 1e-6f);
    const auto f = hn::Set(d, factor);
    for (i = 0; i + L <= n; i += L) hn::StoreU(hn::Mul(f, hn::LoadU(d, xr + i)), d, yr + i);
    for (; i < n; ++i) yr[i] = factor * xr[i];
  }
}

}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tokamax {

HWY_EXPORT(L2Normalize);
HWY_EXPORT(Dot);

float delta_rule_dot(const float* a, const float* b, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(Dot)(a, b, n);
}
HWY_EXPORT(DecayPredict);
HWY_EXPORT(UpdateOutput);
HWY_EXPORT(UpdateDecay);

void delta_rule_l2_normalize(const float* x, int64_t ldx, int64_t rows, int64_t n, float scale,
                             float* y, int64_t ldy) {
  HWY_DYNAMIC_DISPATCH(L2Normalize)(x, ldx, rows, n, scale, y, ldy);
}

void delta_rule_update_decay(float* S, const float* bk, const float* r, const float* q,
                             const float* d_next, const float* k_next, int64_t K, int64_t V,
                             float* out, float* pred_next, float* copy) {
  HWY_DYNAMIC_DISPATCH(UpdateDecay)(S, bk, r, q, d_next, k_next, K, V, out, pred_next, copy);
}

void delta_rule_decay_predict(float* S, const float* d, const float* k, int64_t K, int64_t V,
                              float* pred, float* copy) {
  HWY_DYNAMIC_DISPATCH(DecayPredict)(S, d, k, K, V, pred, copy);
}

void delta_rule_update_output(float* S, const float* bk, const float* r, const float* q, int64_t K,
                              int64_t V, float* out) {
  HWY_DYNAMIC_DISPATCH(UpdateOutput)(S, bk, r, q, K, V, out);
}

}  // namespace tokamax
#endif  // HWY_ONCE
