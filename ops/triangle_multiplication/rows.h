// triangle_multiplication: the row helpers its f32 implementations share (reference, cpu,
// onednn): weights as f32, the input projections side by side, the layer norm of one row.
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

// [gate_in (2H) | projection_in (2H) | gate_out (D)] as f32 [C, W]: every product that reads
// the normalized input, one matrix.
std::vector<float> input_weights(const TriangleMultiplicationProblem& p, const TensorMap& inputs);

// In place over row[0, n): (row - mean) / sqrt(var + epsilon) * scale + offset, two passes in f32,
// the sums in 8 independent chains (in order, a float reduction waits an add's latency per
// element; the normalization itself vectorizes).
void layer_norm_row(float* row, int64_t n, const float* scale, const float* offset, float epsilon);

}  // namespace tokamax
