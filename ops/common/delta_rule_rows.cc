// The delta rule's passes over a state [K, V] (delta_rule_rows.h), compiled once per SIMD target
// by Highway. Columns go in blocks of four vectors whose sums stay in registers while the rows
// stream past: one read and one write of the state per pass.
//
// Dimensions: as delta_rule_rows.h; L the f32 lanes of the target.
#include "ops/common/delta_rule_rows.h"

#include <hwy/cache_control.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ops/framework/dtype.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/common/delta_rule_rows.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target; highway.h must follow it.
#include <hwy/highway.h>
// The per-target conversions need highway.h first.
#include "ops/common/cpu_convert-inl.h"

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

// dst[i] = src[i] widened to f32 (src f32, bf16 or f16).
template <typename T>
void LoadStateT(const T* src, float* dst, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + L <= n; i += L) hn::StoreU(LoadWiden(d, src + i), d, dst + i);
  for (; i < n; ++i) dst[i] = static_cast<float>(to_double(src[i]));
}

void LoadState(DType dtype, const void* src, float* dst, int64_t n) {
  if (dtype == DType::kBF16) return LoadStateT(static_cast<const bf16*>(src), dst, n);
  if (dtype == DType::kF16) return LoadStateT(static_cast<const f16*>(src), dst, n);
  LoadStateT(static_cast<const float*>(src), dst, n);
}

// dst[i] = src[i] rounded to T; by non-temporal stores when dst is 64-byte aligned (a state
// written once and not read again by this task: no read of its lines before the write).
template <typename T>
void StoreStateT(const float* src, T* dst, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  if (reinterpret_cast<uintptr_t>(dst) % 64 == 0) {
    for (; i + L <= n; i += L) StoreNarrow<T, true>(d, hn::LoadU(d, src + i), dst + i, false);
  } else {
    for (; i + L <= n; i += L) StoreNarrow<T, false>(d, hn::LoadU(d, src + i), dst + i, false);
  }
  for (; i < n; ++i) dst[i] = Narrow<T>(src[i]);
}

// S_i = a_i widen(src_i) for every row i of a state stored in T, acc = sum_i c_i S_i: a decode
// token's load, decay and prediction in one pass. NB vectors of columns at a time: eight on
// AVX-512 take a row of 128 whole, so the stored state (from memory) is read row after row.
template <int NB, typename T>
HWY_INLINE void DecayPredictFromBlock(const T* src, float* S, const float* a, const float* c,
                                      int64_t K, int64_t V, int64_t x, float* acc) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  hn::Vec<decltype(d)> s[NB];
  for (int j = 0; j < NB; ++j) s[j] = hn::Zero(d);
  for (int64_t i = 0; i < K; ++i) {
    const auto ai = hn::Set(d, a[i]), ci = hn::Set(d, c[i]);
    for (int j = 0; j < NB; ++j) {
      const auto v = hn::Mul(ai, LoadWiden(d, src + i * V + x + j * L));
      hn::StoreU(v, d, S + i * V + x + j * L);
      s[j] = hn::MulAdd(ci, v, s[j]);
    }
  }
  for (int j = 0; j < NB; ++j) hn::StoreU(s[j], d, acc + x + j * L);
}

template <typename T>
void DecayPredictFromT(const T* src, float* S, const float* a, const float* c, int64_t K, int64_t V,
                       float* acc) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  int64_t x = 0;
#if HWY_TARGET <= HWY_AVX3
  for (; x + 8 * L <= V; x += 8 * L) DecayPredictFromBlock<8>(src, S, a, c, K, V, x, acc);
#endif
  for (; x + 4 * L <= V; x += 4 * L) DecayPredictFromBlock<4>(src, S, a, c, K, V, x, acc);
  for (; x < V; ++x) {  // the last V % 4L columns
    float sum = 0.0f;
    for (int64_t i = 0; i < K; ++i) {
      const float v = a[i] * static_cast<float>(to_double(src[i * V + x]));
      S[i * V + x] = v;
      sum += c[i] * v;
    }
    acc[x] = sum;
  }
}

void DecayPredictFrom(DType dtype, const void* src, float* S, const float* a, const float* c,
                      int64_t K, int64_t V, float* acc) {
  if (dtype == DType::kBF16) {
    return DecayPredictFromT(static_cast<const bf16*>(src), S, a, c, K, V, acc);
  }
  if (dtype == DType::kF16) {
    return DecayPredictFromT(static_cast<const f16*>(src), S, a, c, K, V, acc);
  }
  DecayPredictFromT(static_cast<const float*>(src), S, a, c, K, V, acc);
}

// v = S_i + b_i r for every row i, acc = sum_i c_i v, dst_i = v rounded to T (S unchanged): a
// decode token's update, output and store in one pass, by non-temporal stores where whole
// aligned lines allow; NB vectors of columns at a time, as DecayPredictFromBlock.
template <int NB, typename T, bool kStream>
HWY_INLINE void UpdateOutputToBlock(const float* S, const float* b, const float* r, const float* c,
                                    int64_t K, int64_t V, int64_t x, float* acc, T* dst) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  hn::Vec<decltype(d)> s[NB], rv[NB];
  for (int j = 0; j < NB; ++j) {
    s[j] = hn::Zero(d);
    rv[j] = hn::LoadU(d, r + x + j * L);
  }
  for (int64_t i = 0; i < K; ++i) {
    const auto bi = hn::Set(d, b[i]), ci = hn::Set(d, c[i]);
    for (int j = 0; j < NB; ++j) {
      const auto v = hn::MulAdd(bi, rv[j], hn::LoadU(d, S + i * V + x + j * L));
      s[j] = hn::MulAdd(ci, v, s[j]);
      StoreNarrow<T, kStream>(d, v, dst + i * V + x + j * L, false);
    }
  }
  for (int j = 0; j < NB; ++j) hn::StoreU(s[j], d, acc + x + j * L);
}

template <typename T, bool kStream>
void UpdateOutputToT(const float* S, const float* b, const float* r, const float* c, int64_t K,
                     int64_t V, float* acc, T* dst) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  int64_t x = 0;
#if HWY_TARGET <= HWY_AVX3
  for (; x + 8 * L <= V; x += 8 * L) {
    UpdateOutputToBlock<8, T, kStream>(S, b, r, c, K, V, x, acc, dst);
  }
#endif
  for (; x + 4 * L <= V; x += 4 * L) {
    UpdateOutputToBlock<4, T, kStream>(S, b, r, c, K, V, x, acc, dst);
  }
  for (; x < V; ++x) {  // the last V % 4L columns
    float sum = 0.0f;
    for (int64_t i = 0; i < K; ++i) {
      const float v = S[i * V + x] + b[i] * r[x];
      sum += c[i] * v;
      dst[i * V + x] = Narrow<T>(v);
    }
    acc[x] = sum;
  }
}

template <typename T>
void UpdateOutputToT(const float* S, const float* b, const float* r, const float* c, int64_t K,
                     int64_t V, float* acc, T* dst) {
  // Streaming needs every 4L-column block of every row on whole lines.
  const bool lines =
      reinterpret_cast<uintptr_t>(dst) % 64 == 0 && (V * static_cast<int64_t>(sizeof(T))) % 64 == 0;
  if (lines) return UpdateOutputToT<T, true>(S, b, r, c, K, V, acc, dst);
  UpdateOutputToT<T, false>(S, b, r, c, K, V, acc, dst);
}

void UpdateOutputTo(const float* S, const float* b, const float* r, const float* c, int64_t K,
                    int64_t V, float* acc, DType dtype, void* dst) {
  if (dtype == DType::kBF16) {
    return UpdateOutputToT(S, b, r, c, K, V, acc, static_cast<bf16*>(dst));
  }
  if (dtype == DType::kF16) return UpdateOutputToT(S, b, r, c, K, V, acc, static_cast<f16*>(dst));
  UpdateOutputToT(S, b, r, c, K, V, acc, static_cast<float*>(dst));
}

void StoreState(DType dtype, const float* src, void* dst, int64_t n) {
  if (dtype == DType::kBF16) return StoreStateT(src, static_cast<bf16*>(dst), n);
  if (dtype == DType::kF16) return StoreStateT(src, static_cast<f16*>(dst), n);
  StoreStateT(src, static_cast<float*>(dst), n);
}

}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tokamax {

HWY_EXPORT(L2Normalize);
HWY_EXPORT(DecayPredict);
HWY_EXPORT(UpdateOutput);
HWY_EXPORT(UpdateDecay);
HWY_EXPORT(LoadState);
HWY_EXPORT(StoreState);
HWY_EXPORT(DecayPredictFrom);
HWY_EXPORT(UpdateOutputTo);

void delta_rule_decay_predict_from(DType dtype, const void* src, float* S, const float* d,
                                   const float* k, int64_t K, int64_t V, float* pred) {
  HWY_DYNAMIC_DISPATCH(DecayPredictFrom)(dtype, src, S, d, k, K, V, pred);
}

void delta_rule_update_output_to(const float* S, const float* bk, const float* r, const float* q,
                                 int64_t K, int64_t V, float* out, DType dtype, void* dst) {
  HWY_DYNAMIC_DISPATCH(UpdateOutputTo)(S, bk, r, q, K, V, out, dtype, dst);
  hwy::FlushStream();  // drains the non-temporal stores before the task ends
}

void delta_rule_l2_normalize(const float* x, int64_t ldx, int64_t rows, int64_t n, float scale,
                             float* y, int64_t ldy) {
  HWY_DYNAMIC_DISPATCH(L2Normalize)(x, ldx, rows, n, scale, y, ldy);
}

void delta_rule_store_state(DType dtype, const float* src, void* dst, int64_t n) {
  HWY_DYNAMIC_DISPATCH(StoreState)(dtype, src, dst, n);
  hwy::FlushStream();  // drains the non-temporal stores before the task ends
}

void delta_rule_load_state(DType dtype, const void* src, float* dst, int64_t n) {
  HWY_DYNAMIC_DISPATCH(LoadState)(dtype, src, dst, n);
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
