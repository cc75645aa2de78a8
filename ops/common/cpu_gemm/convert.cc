// CPU GEMM engine: rounding of f32 accumulators to the output dtype (bf16, f16, f32).
//
// Dimensions.
//   rows, cols   extents of the output tile being stored
//   L            f32 lanes of the Highway target
//
// Highway compiles this file once per x86 target (AVX-512, AVX2, scalar) and dispatches at run
// time. A bf16/f16 output is rounded once, after a task's last K block, from an f32 scratch:
// a vector at a time, with exactly the rounding of the scalar float_to_bf16 / float_to_f16.
#include <cstring>
#include <string>

#include "ops/common/cpu_gemm/pack.h"
#include "ops/framework/errors.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/common/cpu_gemm/convert.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target; highway.h must follow it.
#include <hwy/highway.h>

#include "ops/common/cpu_gemm/widen-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// f32 -> bf16 rounded to nearest even, as float_to_bf16: add 0x7FFF plus the lowest kept bit and
// truncate (a carry into the exponent rounds the largest finite values up to infinity); NaNs keep
// their sign and are forced quiet instead, since rounding could carry them into infinity.
HWY_INLINE hn::Vec<hn::Rebind<uint16_t, DF>> DemoteBf16(hn::Vec<DF> v) {
  const hn::RebindToUnsigned<DF> du32;
  const hn::RebindToSigned<DF> di32;
  const hn::Rebind<uint16_t, DF> du16;
  const auto bits = hn::BitCast(du32, v);
  const auto high = hn::ShiftRight<16>(bits);
  const auto bias = hn::Add(hn::Set(du32, 0x7FFFu), hn::And(high, hn::Set(du32, 1u)));
  const auto rounded = hn::ShiftRight<16>(hn::Add(bits, bias));
  const auto quiet_nan = hn::Or(high, hn::Set(du32, 0x40u));
  // IsNaN, not Ne(v, v): Highway's Ne is an ordered compare, false for NaN.
  const auto result = hn::IfThenElse(hn::RebindMask(du32, hn::IsNaN(v)), quiet_nan, rounded);
  // Every lane is < 2^16, so the saturating i32 -> u16 demotion is exact.
  return hn::DemoteTo(du16, hn::BitCast(di32, result));
}

void StoreRows(const float* HWY_RESTRICT acc, int64_t ld_acc, int64_t rows, int64_t cols,
               DType out_dtype, void* out, int64_t ld_out) {
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = acc + r * ld_acc;
    int64_t c = 0;
    switch (out_dtype) {
      case DType::kF32:
        std::memcpy(static_cast<float*>(out) + r * ld_out, src, sizeof(float) * cols);
        break;
      case DType::kBF16: {
        bf16* dst = static_cast<bf16*>(out) + r * ld_out;
        const hn::Rebind<uint16_t, DF> du16;
        for (; c + L <= cols; c += L) {
          hn::StoreU(DemoteBf16(hn::LoadU(df, src + c)), du16,
                     reinterpret_cast<uint16_t*>(dst + c));
        }
        for (; c < cols; ++c) dst[c] = float_to_bf16(src[c]);
        break;
      }
      case DType::kF16: {
        f16* dst = static_cast<f16*>(out) + r * ld_out;
        if constexpr (kVectorConvert) {
          // vcvtps2ph with an immediate rounding mode: round to nearest even, overflow to inf.
          const hn::Rebind<hwy::float16_t, DF> dh;
          for (; c + L <= cols; c += L) {
            hn::StoreU(hn::DemoteTo(dh, hn::LoadU(df, src + c)), dh,
                       reinterpret_cast<hwy::float16_t*>(dst + c));
          }
        }
        for (; c < cols; ++c) dst[c] = float_to_f16(src[c]);
        break;
      }
      default:
        throw NotImplemented("cpu ragged_dot: cannot store f32 accumulators as " +
                             std::string(dtype_name(out_dtype)));
    }
  }
}

}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tokamax {

HWY_EXPORT(StoreRows);

void store_rows(const float* acc, int64_t ld_acc, int64_t rows, int64_t cols, DType out_dtype,
                void* out, int64_t ld_out) {
  HWY_DYNAMIC_DISPATCH(StoreRows)(acc, ld_acc, rows, cols, out_dtype, out, ld_out);
}

}  // namespace tokamax
#endif  // HWY_ONCE
