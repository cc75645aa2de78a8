// The delta rule over a chunk (delta_rule_chunk.h): the triangular solve and the exponentials
// compiled once per SIMD target by Highway, the products on the GEMM engine (cpu_gemm_f32).
//
// Dimensions: as delta_rule_chunk.h; W = K + V the width of the solve's rows; L the f32 lanes.
#include "ops/common/delta_rule_chunk.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ops/common/cpu_gemm/gemm.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/common/delta_rule_chunk.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target; highway.h must follow it.
#include <hwy/highway.h>
// The per-target exponential needs highway.h first.
#include "ops/common/cpu_exp-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// (I + A) X = R for unit lower triangular I + A, in place on R [n, W]: row t -= A[t, s] row s
// for s < t, rows in order; transposed, (I + A)^T X = R: row t -= A[s, t] row s for s > t, rows
// last to first. Four vectors of row t stay in registers while the rows already solved stream
// past (the rows are L1-resident: n W floats, 64 KiB at n = 64, W = 256).
template <bool kTransposed>
void SolveUnit(const float* A, int64_t n, float* R, int64_t W) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t j = 1; j < n; ++j) {
    const int64_t t = kTransposed ? n - 1 - j : j;
    // The solved rows s this one reads: [0, t), or (t, n) transposed; and A's entry for each.
    const int64_t s_begin = kTransposed ? t + 1 : 0, s_end = kTransposed ? n : t;
    auto coef = [&](int64_t s) { return kTransposed ? A[s * n + t] : A[t * n + s]; };
    float* row = R + t * W;
    int64_t x = 0;
    for (; x + 4 * L <= W; x += 4 * L) {
      auto r0 = hn::LoadU(d, row + x), r1 = hn::LoadU(d, row + x + L);
      auto r2 = hn::LoadU(d, row + x + 2 * L), r3 = hn::LoadU(d, row + x + 3 * L);
      for (int64_t s = s_begin; s < s_end; ++s) {
        const float* src = R + s * W + x;
        const auto as = hn::Set(d, coef(s));
        r0 = hn::NegMulAdd(as, hn::LoadU(d, src), r0);
        r1 = hn::NegMulAdd(as, hn::LoadU(d, src + L), r1);
        r2 = hn::NegMulAdd(as, hn::LoadU(d, src + 2 * L), r2);
        r3 = hn::NegMulAdd(as, hn::LoadU(d, src + 3 * L), r3);
      }
      hn::StoreU(r0, d, row + x);
      hn::StoreU(r1, d, row + x + L);
      hn::StoreU(r2, d, row + x + 2 * L);
      hn::StoreU(r3, d, row + x + 3 * L);
    }
    for (; x < W; ++x) {  // the last W % 4L columns
      float sum = row[x];
      for (int64_t s = s_begin; s < s_end; ++s) sum -= coef(s) * R[s * W + x];
      row[x] = sum;
    }
  }
}

void SolveUnitLower(const float* A, int64_t n, float* R, int64_t W) {
  SolveUnit<false>(A, n, R, W);
}

void SolveUnitLowerTransposed(const float* A, int64_t n, float* R, int64_t W) {
  SolveUnit<true>(A, n, R, W);
}

void Scale(const float* x, float a, float* y, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const auto av = hn::Set(d, a);
  int64_t i = 0;
  for (; i + L <= n; i += L) hn::StoreU(hn::Mul(av, hn::LoadU(d, x + i)), d, y + i);
  for (; i < n; ++i) y[i] = a * x[i];
}

void Axpby(const float* x, float a, float b, float* y, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const auto av = hn::Set(d, a), bv = hn::Set(d, b);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    hn::StoreU(hn::MulAdd(av, hn::LoadU(d, x + i), hn::Mul(bv, hn::LoadU(d, y + i))), d, y + i);
  }
  for (; i < n; ++i) y[i] = a * x[i] + b * y[i];
}

void ScaleExp(const float* x, const float* hi, const float* lo, float a, bool reciprocal, float* y,
              int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const auto av = hn::Set(d, a);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    const auto h = hn::LoadU(d, hi + i), l = hn::LoadU(d, lo + i);
    const auto ax = hn::Mul(av, hn::LoadU(d, x + i));
    const auto y_i = reciprocal ? hn::Div(ax, ExpNonPositive(d, hn::Sub(h, l)))
                                : hn::Mul(ax, ExpNonPositive(d, hn::Sub(l, h)));
    hn::StoreU(y_i, d, y + i);
  }
  for (; i < n; ++i) {
    y[i] = reciprocal ? a * x[i] / std::exp(hi[i] - lo[i]) : a * x[i] * std::exp(lo[i] - hi[i]);
  }
}

void ExpInPlace(float* x, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + L <= n; i += L) hn::StoreU(ExpNonPositive(d, hn::LoadU(d, x + i)), d, x + i);
  if (i < n) {  // the tail through a whole vector (this Highway has no LoadN / StoreN)
    HWY_ALIGN float tail[HWY_MAX_BYTES / sizeof(float)] = {};
    std::copy(x + i, x + n, tail);
    hn::Store(ExpNonPositive(d, hn::Load(d, tail)), d, tail);
    std::copy(tail, tail + (n - i), x + i);
  }
}

}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tokamax {

HWY_EXPORT(SolveUnitLower);
HWY_EXPORT(SolveUnitLowerTransposed);

void delta_rule_solve_lower(const float* A, int64_t n, float* R, int64_t W) {
  HWY_DYNAMIC_DISPATCH(SolveUnitLower)(A, n, R, W);
}

void delta_rule_solve_lower_transposed(const float* A, int64_t n, float* R, int64_t W) {
  HWY_DYNAMIC_DISPATCH(SolveUnitLowerTransposed)(A, n, R, W);
}
HWY_EXPORT(ExpInPlace);
HWY_EXPORT(Scale);
HWY_EXPORT(Axpby);
HWY_EXPORT(ScaleExp);

void delta_rule_scale_exp(const float* x, const float* hi, const float* lo, float a,
                          bool reciprocal, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(ScaleExp)(x, hi, lo, a, reciprocal, y, n);
}

void delta_rule_scale(const float* x, float a, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(Scale)(x, a, y, n);
}

void delta_rule_axpby(const float* x, float a, float b, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(Axpby)(x, a, b, y, n);
}

void delta_rule_exp(float* x, int64_t n) { HWY_DYNAMIC_DISPATCH(ExpInPlace)(x, n); }

void delta_rule_chunk(const DeltaRuleChunk& c, float* S) {
  // [Y; out] = [beta v; 0] + [-beta k exp(b); q exp(b)] S_0. S_0 is read in place (small, in L2:
  // packing it cost as much as its product).
  const CpuGemmOptions in_place{.rhs_in_place = true};
  cpu_gemm_f32({DType::kF32, c.kq, c.K}, {DType::kF32, S, c.V}, 2 * c.n, c.V, c.K, c.uo, c.V,
               /*accumulate=*/true, in_place);
  delta_rule_chunk_update(c, S);
}

void delta_rule_chunk_update(const DeltaRuleChunk& c, float* S) {
  const int64_t n = c.n, K = c.K, V = c.V;
  float* U = c.uo;
  float* out = c.uo + n * V;
  // (I + A) U = Y in place; U read in place by its two products.
  const CpuGemmOptions in_place{.rhs_in_place = true};
  HWY_DYNAMIC_DISPATCH(SolveUnitLower)(c.A, n, U, V);
  const GemmOperand u{DType::kF32, U, V};
  // out += P U.
  cpu_gemm_f32({DType::kF32, c.P, n}, u, n, V, n, out, V, /*accumulate=*/true, in_place);
  // S_n = exp(b_{n-1}) S_0 + (k exp(b_{n-1} - b))^T U.
  for (int64_t i = 0; i < K; ++i) HWY_DYNAMIC_DISPATCH(Scale)(S + i * V, c.sd[i], S + i * V, V);
  GemmOperand kd_t{DType::kF32, c.kd, K};
  kd_t.transposed = true;
  cpu_gemm_f32(kd_t, u, K, V, n, S, V, /*accumulate=*/true, in_place);
}

}  // namespace tokamax
#endif  // HWY_ONCE
