// triangle_multiplication: the shared row helpers.
#include "ops/triangle_multiplication/rows.h"

#include <algorithm>
#include <cmath>

namespace tokamax {

std::vector<float> f32_values(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.num_elements()));
  for (int64_t i = 0; i < t.num_elements(); ++i) v[i] = static_cast<float>(t.get(i));
  return v;
}

TriangleWeightsF32 triangle_weights_f32(const TriangleMultiplicationProblem& p,
                                        const TensorMap& inputs) {
  TriangleWeightsF32 w;
  w.projection_in = f32_values(inputs.at("projection_in_weights"));
  w.gate_in = f32_values(inputs.at("gate_in_weights"));
  w.projection_out = f32_values(inputs.at("projection_out_weights"));
  w.gate_out = f32_values(inputs.at("gate_out_weights"));
  w.in_scale = f32_values(inputs.at("layernorm_in_scale"));
  w.in_offset = f32_values(inputs.at("layernorm_in_offset"));
  w.out_scale = f32_values(inputs.at("layernorm_out_scale"));
  w.out_offset = f32_values(inputs.at("layernorm_out_offset"));
  const int64_t H = p.H, D = p.D, W = 4 * H + D;
  w.w_in.resize(static_cast<size_t>(p.C * W));
  for (int64_t r = 0; r < p.C; ++r) {
    std::copy_n(w.gate_in.data() + r * 2 * H, 2 * H, w.w_in.data() + r * W);
    std::copy_n(w.projection_in.data() + r * 2 * H, 2 * H, w.w_in.data() + r * W + 2 * H);
    std::copy_n(w.gate_out.data() + r * D, D, w.w_in.data() + r * W + 4 * H);
  }
  return w;
}

RowStats row_stats(const float* row, int64_t n, float epsilon) {
  float sums[8] = {};
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    for (int l = 0; l < 8; ++l) sums[l] += row[c + l];
  }
  for (; c < n; ++c) sums[0] += row[c];
  const float mean =
      ((sums[0] + sums[1]) + (sums[2] + sums[3]) + (sums[4] + sums[5]) + (sums[6] + sums[7])) /
      static_cast<float>(n);
  float squares[8] = {};
  for (c = 0; c + 8 <= n; c += 8) {
    for (int l = 0; l < 8; ++l) squares[l] += (row[c + l] - mean) * (row[c + l] - mean);
  }
  for (; c < n; ++c) squares[0] += (row[c] - mean) * (row[c] - mean);
  const float var = ((squares[0] + squares[1]) + (squares[2] + squares[3]) +
                     (squares[4] + squares[5]) + (squares[6] + squares[7])) /
                    static_cast<float>(n);
  return {mean, 1.0f / std::sqrt(var + epsilon)};
}

void layer_norm_row(float* row, int64_t n, const float* scale, const float* offset, float epsilon) {
  const RowStats s = row_stats(row, n, epsilon);
  for (int64_t c = 0; c < n; ++c) row[c] = (row[c] - s.mean) * s.rstd * scale[c] + offset[c];
}

void layer_norm_vjp_row(const float* x, RowStats stats, const float* scale, const float* dy,
                        int64_t n, float* dx, float* dscale, float* doffset) {
  float sum_g = 0.0f, sum_gy = 0.0f;
  for (int64_t c = 0; c < n; ++c) {
    const float y = (x[c] - stats.mean) * stats.rstd;
    const float g = dy[c] * scale[c];
    sum_g += g;
    sum_gy += g * y;
    dscale[c] += dy[c] * y;
    doffset[c] += dy[c];
  }
  const float mean_g = sum_g / static_cast<float>(n), mean_gy = sum_gy / static_cast<float>(n);
  for (int64_t c = 0; c < n; ++c) {
    const float y = (x[c] - stats.mean) * stats.rstd;
    dx[c] = stats.rstd * (dy[c] * scale[c] - mean_g - y * mean_gy);
  }
}

}  // namespace tokamax
