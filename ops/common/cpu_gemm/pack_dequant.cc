// CPU GEMM engine: the dequantizing rhs pack (quantized weights to f32 panels), and fp8 codes
// decoded to bf16 for the bf16 engines.
//
// Dimensions.
//   depth, cols   the codes' block: rows of the contraction, columns of the panel
//   nr            columns per packed strip
//   L             f32 lanes of the Highway target
//
// Highway compiles the pack once per x86 target and dispatches at run time: a vector of L codes
// at a time decoded by LoadDecode (widen-inl.h), times their scales. A layer that dequantizes
// each weight once per call (a decode step) runs at the speed of this loop; a scalar table
// lookup ran about one element per nanosecond.
#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <string>

#include "ops/common/cpu_gemm/pack.h"
#include "ops/framework/errors.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/common/cpu_gemm/pack_dequant.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target; highway.h must follow it.
#include <hwy/highway.h>

#include "ops/common/cpu_gemm/widen-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// out[0, width) = the codes decoded times scales[0, width).
template <typename Code>
void DequantRow(const Code* HWY_RESTRICT codes, const float* HWY_RESTRICT scales, int64_t width,
                float* HWY_RESTRICT out) {
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  int64_t c = 0;
  for (; c + L <= width; c += L) {
    hn::StoreU(hn::Mul(LoadDecode(df, codes + c), hn::LoadU(df, scales + c)), df, out + c);
  }
  for (; c < width; ++c) out[c] = DecodeCode(codes[c]) * scales[c];
}

void PackRhsPanelDequant(DType dtype, const void* rhs, int64_t ld, int64_t depth, int64_t cols,
                         int64_t nr, const float* scale, int64_t scale_ld, int64_t k0,
                         int64_t block, float* packed) {
  const auto* bytes = static_cast<const uint8_t*>(rhs);
  const bool f8 = dtype == DType::kF8E4M3;
  const int64_t strips = (cols + nr - 1) / nr;
  for (int64_t s = 0; s < strips; ++s) {
    const int64_t c0 = s * nr, width = std::min(nr, cols - c0);
    float* strip = packed + s * depth * nr;
    for (int64_t k = 0; k < depth; ++k) {
      const uint8_t* codes = bytes + k * ld + c0;
      const float* scales = scale + ((k0 + k) / block) * scale_ld + c0;
      float* out = strip + k * nr;
      if (f8) {
        DequantRow(reinterpret_cast<const f8e4m3*>(codes), scales, width, out);
      } else {
        DequantRow(reinterpret_cast<const int8_t*>(codes), scales, width, out);
      }
      std::fill(out + width, out + nr, 0.0f);
    }
  }
}

}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tokamax {
namespace {

// All 256 e4m3 codes as bf16 bits (exact), once.
const std::array<bf16, 256>& f8e4m3_bf16_table() {
  static const std::array<bf16, 256> table = [] {
    std::array<bf16, 256> t{};
    for (int code = 0; code < 256; ++code) {
      t[code] = float_to_bf16(f8e4m3_to_float(f8e4m3{static_cast<uint8_t>(code)}));
    }
    return t;
  }();
  return table;
}

}  // namespace

void decode_f8e4m3_to_bf16(const uint8_t* codes, int64_t ld, int64_t depth, int64_t cols,
                           bf16* out) {
  const std::array<bf16, 256>& table = f8e4m3_bf16_table();
  for (int64_t k = 0; k < depth; ++k) {
    const uint8_t* row = codes + k * ld;
    bf16* dst = out + k * cols;
    for (int64_t c = 0; c < cols; ++c) dst[c] = table[row[c]];
  }
}

HWY_EXPORT(PackRhsPanelDequant);

void pack_rhs_panel_dequant(DType dtype, const void* rhs, int64_t ld, int64_t depth, int64_t cols,
                            int64_t nr, const float* scale, int64_t scale_ld, int64_t k0,
                            int64_t block, float* packed) {
  if (dtype != DType::kI8 && dtype != DType::kF8E4M3) {
    throw NotImplemented("pack_rhs_panel_dequant: " + std::string(dtype_name(dtype)) +
                         " is not a quantized dtype");
  }
  HWY_DYNAMIC_DISPATCH(PackRhsPanelDequant)
  (dtype, rhs, ld, depth, cols, nr, scale, scale_ld, k0, block, packed);
}

}  // namespace tokamax
#endif
