// The delta rule's passes that read or write a state stored in f32, bf16 or f16
// (delta_rule_rows.h): its load and store, and a decode token's two passes from and to it,
// compiled once per SIMD target by Highway.
//
// Dimensions: as delta_rule_rows.h; L the f32 lanes of the target.
#include <hwy/cache_control.h>

#include <cstdint>

#include "ops/common/delta_rule_rows.h"
#include "ops/framework/dtype.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/common/delta_rule_stored.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target; highway.h must follow it.
#include <hwy/highway.h>
// The per-target conversions need highway.h first.
#include "ops/common/cpu_convert-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

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

HWY_EXPORT(LoadState);
HWY_EXPORT(StoreState);
HWY_EXPORT(DecayPredictFrom);
HWY_EXPORT(UpdateOutputTo);

void delta_rule_load_state(DType dtype, const void* src, float* dst, int64_t n) {
  HWY_DYNAMIC_DISPATCH(LoadState)(dtype, src, dst, n);
}

void delta_rule_store_state(DType dtype, const float* src, void* dst, int64_t n) {
  HWY_DYNAMIC_DISPATCH(StoreState)(dtype, src, dst, n);
  hwy::FlushStream();  // drains the non-temporal stores before the task ends
}

void delta_rule_decay_predict_from(DType dtype, const void* src, float* S, const float* d,
                                   const float* k, int64_t K, int64_t V, float* pred) {
  HWY_DYNAMIC_DISPATCH(DecayPredictFrom)(dtype, src, S, d, k, K, V, pred);
}

void delta_rule_update_output_to(const float* S, const float* bk, const float* r, const float* q,
                                 int64_t K, int64_t V, float* out, DType dtype, void* dst) {
  HWY_DYNAMIC_DISPATCH(UpdateOutputTo)(S, bk, r, q, K, V, out, dtype, dst);
  hwy::FlushStream();  // drains the non-temporal stores before the task ends
}

}  // namespace tokamax
#endif  // HWY_ONCE
