// ragged_dot on CUDA: our widest compiled grouped-GEMM variant timed on one square group, offered
// to the CUDA device as a probe of its 16-bit tensor-core peak (cuda.cc offers it).
#pragma once

#include "backends/device.h"

namespace tokamax {

// Best GFLOP/s of `repetitions` n x n x n bf16 (else f16) products through the widest variant
// on `device` (a CUDA device); 0 where it cannot run (no such variant, no backend, an error).
double ragged_dot_cuda_peak_probe(const Device& device, bool bf16, int n, int repetitions);

}  // namespace tokamax
