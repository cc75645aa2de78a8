// The delta rule's token passes that read a state stored in f32, bf16 or f16 or write it there
// (delta_rule_rows.h: delta_rule_decay_predict_from, delta_rule_update_output_to), compiled once
// per SIMD target by Highway.
//
// Dimensions: as delta_rule_rows.h; L the f32 lanes of the target.
#include <hwy/cache_control.h>

#include <cstdint>
#include <type_traits>

#include "ops/common/delta_rule_rows.h"
#include "ops/framework/dtype.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/common/delta_rule_decode.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target; highway.h must follow it.
#include <hwy/highway.h>
// The per-target conversions need highway.h first.
#include "ops/common/cpu_convert-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// fn(T{}) with T the C++ type of a state's dtype (f32, bf16 or f16).
template <typename Fn>
HWY_INLINE void WithStateType(DType dtype, Fn&& fn) {
  if (dtype == DType::kBF16) return fn(bf16{});
  if (dtype == DType::kF16) return fn(f16{});
  fn(float{});
}

// a b + c in one lane as the target's vectors compute it (fused where they fuse), so that the
// last columns come out the same by every path.
HWY_INLINE float MulAddLane(float a, float b, float c) {
  const hn::CappedTag<float, 1> d1;
  return hn::GetLane(hn::MulAdd(hn::Set(d1, a), hn::Set(d1, b), hn::Set(d1, c)));
}

// S_i = a_i widen(src_i) for every row i of a state stored in T (into S when kStore), acc =
// sum_i c_i S_i: a token's load, decay and prediction in one pass. NB vectors of columns at a
// time: eight on AVX-512 take a row of 128 whole, so the stored state (from memory) is read row
// after row.
template <int NB, typename T, bool kStore>
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
      if constexpr (kStore) hn::StoreU(v, d, S + i * V + x + j * L);
      s[j] = hn::MulAdd(ci, v, s[j]);
    }
  }
  for (int j = 0; j < NB; ++j) hn::StoreU(s[j], d, acc + x + j * L);
}

// Lane k of `even` and `odd` back to columns 2k and 2k + 1 of out [2L] (pair order undone).
HWY_INLINE void StoreUnpaired(DF d, VF even, VF odd, float* out) {
  alignas(64) float lanes[2 * kMaxLanes];
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  hn::Store(even, d, lanes);
  hn::Store(odd, d, lanes + L);
  for (int64_t k = 0; k < L; ++k) {
    out[2 * k] = lanes[k];
    out[2 * k + 1] = lanes[L + k];
  }
}

// DecayPredictFromBlock's prediction of a bf16 state in pair order (cpu_convert-inl.h), 2 NP
// vectors of columns at a time: one ALU operation per widened vector instead of two.
template <int NP>
HWY_INLINE void PredictPairsBlock(const bf16* src, const float* a, const float* c, int64_t K,
                                  int64_t V, int64_t x, float* acc) {
  const DF d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  VF s[2 * NP];
  for (int j = 0; j < 2 * NP; ++j) s[j] = hn::Zero(d);
  for (int64_t i = 0; i < K; ++i) {
    const auto ai = hn::Set(d, a[i]), ci = hn::Set(d, c[i]);
    for (int j = 0; j < NP; ++j) {
      VF even, odd;
      LoadWidenPair(src + i * V + x + 2 * j * L, even, odd);
      s[2 * j] = hn::MulAdd(ci, hn::Mul(ai, even), s[2 * j]);
      s[2 * j + 1] = hn::MulAdd(ci, hn::Mul(ai, odd), s[2 * j + 1]);
    }
  }
  for (int j = 0; j < NP; ++j) StoreUnpaired(d, s[2 * j], s[2 * j + 1], acc + x + 2 * j * L);
}

// The pair path (bf16 states) needs whole pairs of vectors and more than one lane.
HWY_INLINE bool PairPath(int64_t V) {
  const DF d;
  return kHasPairPath && V % (2 * static_cast<int64_t>(hn::Lanes(d))) == 0;
}

template <typename T, bool kStore>
void DecayPredictFromT(const T* src, float* S, const float* a, const float* c, int64_t K, int64_t V,
                       float* acc) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  int64_t x = 0;
#if HWY_TARGET <= HWY_AVX3
  for (; x + 8 * L <= V; x += 8 * L) {
    DecayPredictFromBlock<8, T, kStore>(src, S, a, c, K, V, x, acc);
  }
#endif
  for (; x + 4 * L <= V; x += 4 * L) {
    DecayPredictFromBlock<4, T, kStore>(src, S, a, c, K, V, x, acc);
  }
  for (; x < V; ++x) {  // the last V % 4L columns
    float sum = 0.0f;
    for (int64_t i = 0; i < K; ++i) {
      const float v = a[i] * static_cast<float>(to_double(src[i * V + x]));
      if constexpr (kStore) S[i * V + x] = v;
      sum = MulAddLane(c[i], v, sum);
    }
    acc[x] = sum;
  }
}

template <typename T>
void DecayPredictFromT(const T* src, float* S, const float* a, const float* c, int64_t K, int64_t V,
                       float* acc) {
  if (S) return DecayPredictFromT<T, true>(src, S, a, c, K, V, acc);
  if constexpr (std::is_same_v<T, bf16>) {
    const DF d;
    const int64_t L = static_cast<int64_t>(hn::Lanes(d));
    if (PairPath(V)) {
      int64_t x = 0;
#if HWY_TARGET <= HWY_AVX3
      for (; x + 8 * L <= V; x += 8 * L) PredictPairsBlock<4>(src, a, c, K, V, x, acc);
#endif
      for (; x < V; x += 2 * L) PredictPairsBlock<1>(src, a, c, K, V, x, acc);
      return;
    }
  }
  DecayPredictFromT<T, false>(src, S, a, c, K, V, acc);
}

void DecayPredictFrom(DType dtype, const void* src, float* S, const float* a, const float* c,
                      int64_t K, int64_t V, float* acc) {
  WithStateType(dtype, [&](auto t) {
    DecayPredictFromT(static_cast<const decltype(t)*>(src), S, a, c, K, V, acc);
  });
}

// Row i of `next` ([K, V] of `row_bytes` per row) prefetched: the next state's first pass then
// reads it from cache while this pass's stores go to memory.
HWY_INLINE void PrefetchRow(const char* next, int64_t row_bytes, int64_t i) {
  if (!next) return;
  for (int64_t at = 0; at < row_bytes; at += 64) hwy::Prefetch(next + i * row_bytes + at);
}

// v = a_i widen(src_i) + b_i r for every row i (a_i = 1 without kDecay), acc = sum_i c_i v,
// dst_i = v rounded to T: a token's update, output and store in one pass, by non-temporal stores
// where whole aligned lines allow; NB vectors of columns at a time, as DecayPredictFromBlock.
template <int NB, typename Src, typename T, bool kDecay, bool kStream>
HWY_INLINE void UpdateOutputToBlock(const Src* src, const float* a, const float* b, const float* r,
                                    const float* c, int64_t K, int64_t V, int64_t x, float* acc,
                                    T* dst, const char* next) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t row_bytes = V * static_cast<int64_t>(sizeof(Src));
  hn::Vec<decltype(d)> s[NB], rv[NB];
  for (int j = 0; j < NB; ++j) {
    s[j] = hn::Zero(d);
    rv[j] = hn::LoadU(d, r + x + j * L);
  }
  for (int64_t i = 0; i < K; ++i) {
    const auto ai = hn::Set(d, kDecay ? a[i] : 1.0f), bi = hn::Set(d, b[i]), ci = hn::Set(d, c[i]);
    for (int j = 0; j < NB; ++j) {
      auto v = LoadWiden(d, src + i * V + x + j * L);
      if constexpr (kDecay) v = hn::Mul(ai, v);
      v = hn::MulAdd(bi, rv[j], v);
      s[j] = hn::MulAdd(ci, v, s[j]);
      StoreNarrow<T, kStream>(d, v, dst + i * V + x + j * L, false);
    }
    if (x == 0) PrefetchRow(next, row_bytes, i);
  }
  for (int j = 0; j < NB; ++j) hn::StoreU(s[j], d, acc + x + j * L);
}

// UpdateOutputToBlock with decay on a bf16 state to bf16 in pair order, 2 NP vectors of columns
// at a time: r's columns put in pair order, and the output's back.
template <int NP, bool kStream>
HWY_INLINE void UpdateOutputPairsBlock(const bf16* src, const float* a, const float* b,
                                       const float* r, const float* c, int64_t K, int64_t V,
                                       int64_t x, float* acc, bf16* dst, const char* next) {
  const DF d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  VF s[2 * NP], rv[2 * NP];
  alignas(64) float lanes[2 * kMaxLanes];
  for (int j = 0; j < NP; ++j) {
    for (int64_t k = 0; k < L; ++k) {
      lanes[k] = r[x + 2 * j * L + 2 * k];
      lanes[L + k] = r[x + 2 * j * L + 2 * k + 1];
    }
    rv[2 * j] = hn::Load(d, lanes);
    rv[2 * j + 1] = hn::Load(d, lanes + L);
    s[2 * j] = s[2 * j + 1] = hn::Zero(d);
  }
  for (int64_t i = 0; i < K; ++i) {
    const auto ai = hn::Set(d, a[i]), bi = hn::Set(d, b[i]), ci = hn::Set(d, c[i]);
    for (int j = 0; j < NP; ++j) {
      VF even, odd;
      LoadWidenPair(src + i * V + x + 2 * j * L, even, odd);
      even = hn::MulAdd(bi, rv[2 * j], hn::Mul(ai, even));
      odd = hn::MulAdd(bi, rv[2 * j + 1], hn::Mul(ai, odd));
      s[2 * j] = hn::MulAdd(ci, even, s[2 * j]);
      s[2 * j + 1] = hn::MulAdd(ci, odd, s[2 * j + 1]);
      StorePairBf16<kStream>(even, odd, dst + i * V + x + 2 * j * L, false);
    }
    if (x == 0) PrefetchRow(next, V * 2, i);
  }
  for (int j = 0; j < NP; ++j) StoreUnpaired(d, s[2 * j], s[2 * j + 1], acc + x + 2 * j * L);
}

template <typename Src, typename T, bool kDecay, bool kStream>
void UpdateOutputToT(const Src* src, const float* a, const float* b, const float* r, const float* c,
                     int64_t K, int64_t V, float* acc, T* dst, const char* next) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  int64_t x = 0;
  if constexpr (kDecay && std::is_same_v<Src, bf16> && std::is_same_v<T, bf16>) {
    if (PairPath(V)) {
#if HWY_TARGET <= HWY_AVX3
      for (; x + 8 * L <= V; x += 8 * L) {
        UpdateOutputPairsBlock<4, kStream>(src, a, b, r, c, K, V, x, acc, dst, next);
      }
#endif
      for (; x < V; x += 2 * L) {
        UpdateOutputPairsBlock<1, kStream>(src, a, b, r, c, K, V, x, acc, dst, next);
      }
      return;
    }
  }
#if HWY_TARGET <= HWY_AVX3
  for (; x + 8 * L <= V; x += 8 * L) {
    UpdateOutputToBlock<8, Src, T, kDecay, kStream>(src, a, b, r, c, K, V, x, acc, dst, next);
  }
#endif
  for (; x + 4 * L <= V; x += 4 * L) {
    UpdateOutputToBlock<4, Src, T, kDecay, kStream>(src, a, b, r, c, K, V, x, acc, dst, next);
  }
  for (; x < V; ++x) {  // the last V % 4L columns
    float sum = 0.0f;
    for (int64_t i = 0; i < K; ++i) {
      float v = static_cast<float>(to_double(src[i * V + x]));
      if constexpr (kDecay) v *= a[i];
      v = MulAddLane(b[i], r[x], v);
      sum = MulAddLane(c[i], v, sum);
      dst[i * V + x] = Narrow<T>(v);
    }
    acc[x] = sum;
  }
}

template <typename Src, typename T>
void UpdateOutputToT(const Src* src, const float* a, const float* b, const float* r, const float* c,
                     int64_t K, int64_t V, float* acc, T* dst, const char* next) {
  // Streaming needs every 4L-column block (2L-column pair) of every row on whole lines.
  const bool lines =
      reinterpret_cast<uintptr_t>(dst) % 64 == 0 && (V * static_cast<int64_t>(sizeof(T))) % 64 == 0;
  if (a && lines) return UpdateOutputToT<Src, T, true, true>(src, a, b, r, c, K, V, acc, dst, next);
  if (a) return UpdateOutputToT<Src, T, true, false>(src, a, b, r, c, K, V, acc, dst, next);
  if (lines) return UpdateOutputToT<Src, T, false, true>(src, a, b, r, c, K, V, acc, dst, next);
  UpdateOutputToT<Src, T, false, false>(src, a, b, r, c, K, V, acc, dst, next);
}

void UpdateOutputTo(DType src_dtype, const void* src, const float* a, const float* b,
                    const float* r, const float* c, int64_t K, int64_t V, float* acc, DType dtype,
                    void* dst, const void* next) {
  WithStateType(src_dtype, [&](auto s) {
    WithStateType(dtype, [&](auto t) {
      UpdateOutputToT(static_cast<const decltype(s)*>(src), a, b, r, c, K, V, acc,
                      static_cast<decltype(t)*>(dst), static_cast<const char*>(next));
    });
  });
}

}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tokamax {

HWY_EXPORT(DecayPredictFrom);
HWY_EXPORT(UpdateOutputTo);

void delta_rule_decay_predict_from(DType dtype, const void* src, float* S, const float* d,
                                   const float* k, int64_t K, int64_t V, float* pred) {
  HWY_DYNAMIC_DISPATCH(DecayPredictFrom)(dtype, src, S, d, k, K, V, pred);
}

void delta_rule_update_output_to(DType src_dtype, const void* src, const float* d, const float* bk,
                                 const float* r, const float* q, int64_t K, int64_t V, float* out,
                                 DType dtype, void* dst, const void* next) {
  HWY_DYNAMIC_DISPATCH(UpdateOutputTo)(src_dtype, src, d, bk, r, q, K, V, out, dtype, dst, next);
  hwy::FlushStream();  // drains the non-temporal stores before the task ends
}

}  // namespace tokamax
#endif  // HWY_ONCE
