// ragged_dot: dynamic int8 quantization of an lhs row.
#include "ops/ragged_dot/quantize.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tokamax {
namespace {

// Round to nearest even for |v| < 2^22 in the default rounding mode: adding 1.5 * 2^23 leaves no
// fraction bits. Plain float arithmetic, so the loops below vectorize for the baseline ISA.
inline float round_half_even(float v) {
  constexpr float kMagic = 12582912.0f;
  return (v + kMagic) - kMagic;
}

}  // namespace

void quantize_row_int8(const float* x, int64_t K, int64_t b, int8_t* q, float* scales) {
  for (int64_t j = 0; j * b < K; ++j) {
    const float* xb = x + j * b;
    // max |x| in 16 independent lanes, then across them.
    float lane[16] = {};
    int64_t k = 0;
    for (; k + 16 <= b; k += 16) {
      for (int l = 0; l < 16; ++l) lane[l] = std::max(lane[l], std::fabs(xb[k + l]));
    }
    for (; k < b; ++k) lane[0] = std::max(lane[0], std::fabs(xb[k]));
    float amax = 0.0f;
    for (float v : lane) amax = std::max(amax, v);
    const float s = amax / 127.0f;
    scales[j] = s;
    int8_t* qb = q + j * b;
    if (s == 0.0f) {
      std::fill(qb, qb + b, int8_t{0});
      continue;
    }
    // x / s as x * (1 / s): |x / s| <= 127 (1 + 2u), so the codes stay in [-127, 127].
    const float inv = 1.0f / s;
    for (k = 0; k < b; ++k) {
      const float r = std::clamp(round_half_even(xb[k] * inv), -127.0f, 127.0f);
      qb[k] = static_cast<int8_t>(r);
    }
  }
}

void quantize_row_values(DType qtype, const float* x, int64_t K, int64_t b, float* out,
                         float* scales) {
  if (qtype == DType::kI8) {
    thread_local std::vector<int8_t> q;
    q.resize(static_cast<size_t>(K));
    quantize_row_int8(x, K, b, q.data(), scales);
    for (int64_t k = 0; k < K; ++k) out[k] = scales[k / b] * static_cast<float>(q[k]);
    return;
  }
  for (int64_t j = 0; j * b < K; ++j) {
    const float* xb = x + j * b;
    float amax = 0.0f;
    for (int64_t k = 0; k < b; ++k) amax = std::max(amax, std::fabs(xb[k]));
    const float s = amax / 448.0f;
    scales[j] = s;
    const float inv = s > 0.0f ? 1.0f / s : 0.0f;
    for (int64_t k = 0; k < b; ++k) {
      // |x * (1 / s)| <= 448 (1 + 2u) rounds to at most 448: never the NaN past it.
      const float code = f8e4m3_to_float(double_to_f8e4m3(xb[k] * inv));
      out[j * b + k] = s * code;
    }
  }
}

double quantization_error(DType qtype, double x, double s) {
  if (qtype == DType::kI8) return (0.5 + kQuantizeSlack) * s;
  return (std::ldexp(std::fabs(x), -4) + std::ldexp(s, -10)) * (1.0 + kQuantizeSlack);
}

}  // namespace tokamax
