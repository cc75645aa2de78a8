// ragged_dot: dynamic int8 quantization of an lhs row.
#include "ops/ragged_dot/quantize.h"

#include <algorithm>
#include <cmath>

namespace tokamax {

void quantize_row_int8(const float* x, int64_t K, int64_t b, int8_t* q, float* scales) {
  for (int64_t j = 0; j * b < K; ++j) {
    const float* xb = x + j * b;
    float amax = 0.0f;
    for (int64_t k = 0; k < b; ++k) amax = std::max(amax, std::fabs(xb[k]));
    const float s = amax / 127.0f;
    scales[j] = s;
    for (int64_t k = 0; k < b; ++k) {
      const float r = s > 0.0f ? std::nearbyint(xb[k] / s) : 0.0f;
      q[j * b + k] = static_cast<int8_t>(std::clamp(r, -127.0f, 127.0f));
    }
  }
}

}  // namespace tokamax
