// CPU row selection: what both methods share (the rows, the vector keys, writing a selection
// out, widening 16-bit scores).
//
// Dimensions.
//   b, n, k   as in row_select.h
//   len       a row's eligible prefix
//   N         32-bit lanes of the SIMD target
//
// A Highway "-inl" header of row_select.cc (compiled once per target): the toggle guard lets
// foreach_target.h re-include it per target, and its definitions sit in an anonymous namespace.
#if defined(TOKAMAX_OPS_COMMON_ROW_SELECT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TOKAMAX_OPS_COMMON_ROW_SELECT_INL_H_
#undef TOKAMAX_OPS_COMMON_ROW_SELECT_INL_H_
#else
#define TOKAMAX_OPS_COMMON_ROW_SELECT_INL_H_
#endif

#include <hwy/highway.h>

#include <cstdint>
#include <limits>

#include "ops/common/row_select.h"
#include "ops/framework/dtype.h"

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;

// What a row is selected by, and where its selection goes.
struct Rows {
  int64_t n, k;
  RowSelectRule rule;
  float floor;
  int32_t* columns;  // [b, k]
  float* values;     // [b, k] or null
};

// row_select_key (row_select.h) of N scores at once.
template <class DF, class DI>
hn::Vec<DI> Keys(DF df, DI di, hn::Vec<DF> v, const Rows& a) {
  if (a.rule == RowSelectRule::kClampToFloor) {
    const auto floor = hn::Set(df, a.floor);
    v = hn::IfThenElse(hn::Gt(v, floor), v, floor);  // NaN too
    v = hn::Add(v, hn::Zero(df));                    // -0.0 + 0.0 = +0.0
  }
  const auto bits = hn::BitCast(di, v);
  const auto key = hn::Xor(bits, hn::And(hn::ShiftRight<31>(bits), hn::Set(di, 0x7fffffff)));
  if (a.rule == RowSelectRule::kClampToFloor) return key;
  const auto eligible =
      hn::RebindMask(di, hn::Gt(v, hn::Set(df, -std::numeric_limits<float>::infinity())));
  return hn::IfThenElse(eligible, key, hn::Set(di, kRowSelectIneligible));
}

// The row's selection written out, -1 past `count`; with values, the selected scores (as f32),
// -inf past `count`.
void WriteRow(const Rows& a, int64_t r, const float* row, const int32_t* columns, int64_t count) {
  int32_t* out = a.columns + r * a.k;
  for (int64_t j = 0; j < a.k; ++j) out[j] = j < count ? columns[j] : -1;
  if (a.values == nullptr) return;
  float* values = a.values + r * a.k;
  for (int64_t j = 0; j < a.k; ++j) {
    values[j] = j < count ? row[columns[j]] : -std::numeric_limits<float>::infinity();
  }
}

// The first `len` 16-bit floats of a row (Highway's T, stored as the project's Storage) as f32.
template <typename T, typename Storage, class DF>
void WidenRow(DF df, const Storage* in, int64_t len, float* out) {
  int64_t c = 0;
#if HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
  // Not on the portable targets: their f16 widening (Highway 1.0) turns infinities and NaN into
  // finite numbers.
  const hn::Rebind<T, DF> d16;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const T* lanes = reinterpret_cast<const T*>(in);
  for (; c + N <= len; c += N) {
    hn::StoreU(hn::PromoteTo(df, hn::LoadU(d16, lanes + c)), df, out + c);
  }
#else
  (void)df;
#endif
  for (; c < len; ++c) out[c] = to_float(in[c]);
}

}  // namespace
}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // TOKAMAX_OPS_COMMON_ROW_SELECT_INL_H_ toggle
