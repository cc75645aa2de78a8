// CPU GEMM engine: the dequantizing rhs pack (quantized weights to f32 panels), and fp8 codes
// decoded to bf16 for the bf16 engines.
#include <algorithm>
#include <array>
#include <cstring>

#include "ops/common/cpu_gemm/pack.h"
#include "ops/framework/errors.h"

namespace tokamax {
namespace {

// All 256 e4m3 codes as f32, once.
const std::array<float, 256>& f8e4m3_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int code = 0; code < 256; ++code)
      t[code] = f8e4m3_to_float(f8e4m3{static_cast<uint8_t>(code)});
    return t;
  }();
  return table;
}

template <typename Decode>
void pack(const uint8_t* rhs, int64_t ld, int64_t depth, int64_t cols, int64_t nr,
          const float* scale, int64_t scale_ld, int64_t k0, int64_t block, float* packed,
          Decode decode) {
  const int64_t strips = (cols + nr - 1) / nr;
  for (int64_t s = 0; s < strips; ++s) {
    const int64_t c0 = s * nr, width = std::min(nr, cols - c0);
    float* strip = packed + s * depth * nr;
    for (int64_t k = 0; k < depth; ++k) {
      const uint8_t* codes = rhs + k * ld + c0;
      const float* scales = scale + ((k0 + k) / block) * scale_ld + c0;
      float* out = strip + k * nr;
      for (int64_t c = 0; c < width; ++c) out[c] = decode(codes[c]) * scales[c];
      std::fill(out + width, out + nr, 0.0f);
    }
  }
}

// All 256 e4m3 codes as bf16 bits (exact), once.
const std::array<bf16, 256>& f8e4m3_bf16_table() {
  static const std::array<bf16, 256> table = [] {
    std::array<bf16, 256> t{};
    for (int code = 0; code < 256; ++code) t[code] = float_to_bf16(f8e4m3_table()[code]);
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

void pack_rhs_panel_dequant(DType dtype, const void* rhs, int64_t ld, int64_t depth, int64_t cols,
                            int64_t nr, const float* scale, int64_t scale_ld, int64_t k0,
                            int64_t block, float* packed) {
  const auto* bytes = static_cast<const uint8_t*>(rhs);
  if (dtype == DType::kI8) {
    return pack(bytes, ld, depth, cols, nr, scale, scale_ld, k0, block, packed,
                [](uint8_t code) { return static_cast<float>(static_cast<int8_t>(code)); });
  }
  if (dtype == DType::kF8E4M3) {
    const std::array<float, 256>& table = f8e4m3_table();
    return pack(bytes, ld, depth, cols, nr, scale, scale_ld, k0, block, packed,
                [&](uint8_t code) { return table[code]; });
  }
  throw NotImplemented("pack_rhs_panel_dequant: " + std::string(dtype_name(dtype)) +
                       " is not a quantized dtype");
}

}  // namespace tokamax
