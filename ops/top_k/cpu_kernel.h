// top_k on CPU: the kernel (rows selected in parallel tasks).
//
// Dimensions.
//   b, n, k   as in base.h
#pragma once

#include <cstdint>

#include "ops/top_k/base.h"

namespace tokamax {

struct CpuTopKLaunch {
  int64_t rows_per_task = 1;
  int num_threads = 0;        // 0 = every core of the pool
  bool radix_select = false;  // CpuTopKConfig::radix_select
};

void top_k_cpu_kernel(const TopKProblem& problem, const CpuTopKLaunch& launch,
                      // Inputs.
                      const float* scores,         // [b, n] f32 (or the f32 bits of i32 scores)
                      const int32_t* row_lengths,  // [b] or null
                      // Outputs.
                      int32_t* indices,       // [b, k]
                      int32_t* scores_bits);  // [b, k] or null

}  // namespace tokamax
