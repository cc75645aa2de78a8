// triangle_multiplication: the row helpers its f32 implementations and its VJP's share
// (reference, cpu, onednn): weights as f32, the input projections side by side, the layer norm
// of one row and its gradient.
//
// Dimensions: as base.h; W = 4 H + D.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/framework/tensor.h"
#include "ops/triangle_multiplication/base.h"

namespace tokamax {

// Every element of `t` as f32.
std::vector<float> f32_values(const Tensor& t);

// Every weight and norm as f32, by role, and w_in = [gate_in (2H) | projection_in (2H) |
// gate_out (D)] [C, W]: every product that reads the normalized input, one matrix.
struct TriangleWeightsF32 {
  std::vector<float> projection_in, gate_in;  // [C, 2H]
  std::vector<float> projection_out;          // [H, D]
  std::vector<float> gate_out;                // [C, D]
  std::vector<float> in_scale, in_offset;     // [C]
  std::vector<float> out_scale, out_offset;   // [H]
  std::vector<float> w_in;                    // [C, W]
};
TriangleWeightsF32 triangle_weights_f32(const TriangleMultiplicationProblem& p,
                                        const TensorMap& inputs);

// A row's mean and 1 / sqrt(var + epsilon), two passes in f32, the sums in 8 independent chains
// (in order, a float reduction waits an add's latency per element).
struct RowStats {
  float mean = 0.0f;
  float rstd = 0.0f;
};
RowStats row_stats(const float* row, int64_t n, float epsilon);

// In place over row[0, n): (row - mean) * rstd * scale + offset with row_stats' statistics.
void layer_norm_row(float* row, int64_t n, const float* scale, const float* offset, float epsilon);

// The layer norm's gradient for one row x[0, n) with its `stats` and the cotangent dy of its
// output: with y = (x - mean) rstd and g = dy scale,
//   dx = rstd (g - mean(g) - y mean(g y)),
// and dy y added to dscale[0, n), dy to doffset[0, n) (the caller sums them over rows).
void layer_norm_vjp_row(const float* x, RowStats stats, const float* scale, const float* dy,
                        int64_t n,
                        // Outputs.
                        float* dx, float* dscale, float* doffset);

}  // namespace tokamax
