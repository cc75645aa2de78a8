// Row gathers on CPU, shared by the gather ops' "cpu" implementations (and the fused MoE layer):
// copying rows of a matrix by index (the MoE dispatch, ragged_gather) and summing weighted rows
// by index into groups (the MoE combine, ragged_gather_reduce), output rows in parallel tasks.
//
// Dimensions.
//   in      rows of x
//   h       elements per row (hidden)
//   T       output rows of the reduce (tokens); g routes per token, I = T g routes
#pragma once

#include <cstdint>

#include "ops/common/row_gather_config.h"
#include "ops/framework/dtype.h"

namespace tokamax {

struct GatherRowsProblem {
  int64_t first = 0, last = 0;  // output rows [first, last) are written, the others left alone
  int64_t row_bytes = 0;        // h times the element size (any dtype: rows are copied as bytes)
};

// out[i] = x[indices[i]] for i in [first, last). The indices must be valid rows of x (callers
// check them: the kernel reads where they point).
void gather_rows_cpu(const GatherRowsProblem& problem, const RowGatherConfig& config,
                     // Inputs.
                     const void* x,           // [in, h]
                     const int32_t* indices,  // [>= last]
                     // Outputs.
                     void* out);  // [>= last, h]

struct GatherReduceProblem {
  int64_t T = 0, g = 1, h = 0;
  DType x_dtype = DType::kF32;        // f32, bf16 or f16; out has it too
  DType weights_dtype = DType::kF32;  // f32, bf16 or f16
};

// out[t] = sum over the valid routes r in [t g, (t + 1) g), in ascending order, of
// weights[r] * x[indices[r]], in f32 (one fused multiply-add per element and route), rounded
// once to x's dtype; zeros for a token without a valid route. Invalid routes are never read
// (neither their index nor x), so their indices may be anything; valid ones must be rows of x.
void gather_reduce_rows_cpu(const GatherReduceProblem& problem, const RowGatherConfig& config,
                            // Inputs.
                            const void* x,           // [in, h]
                            const int32_t* indices,  // [I]
                            const void* weights,     // [I]
                            const bool* valid,       // [I]
                            // Outputs.
                            void* out);  // [T, h]

}  // namespace tokamax
