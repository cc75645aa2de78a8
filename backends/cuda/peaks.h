// Measurement kernels for a CUDA device's ceilings (peaks.cu), behind a plain interface: the
// stream is the runtime's cudaStream_t as void*, so that C++20 code can call them without CUDA
// headers and the kernels stay in C++17 for nvcc.
#pragma once

#include <cstddef>

namespace tokamax::cuda {

// Streaming bandwidth of a device-to-device copy kernel over two buffers of `bytes` each (read
// plus write counted), best of `repetitions`, in GB/s. `bytes` should dwarf the L2.
double measure_copy_gbps(void* stream, size_t bytes, int repetitions);

// Peak rate of independent FMA chains in registers on every SM, all SMs busy, in GFLOP/s (two
// flops per FMA): f32 and f64.
double measure_f32_fma_gflops(void* stream, int sm_count);
double measure_f64_fma_gflops(void* stream, int sm_count);

// Peak rate of tensor-core mma.sync m16n8k16 with f32 accumulators, bf16 or f16 operands, in
// registers on every SM, in GFLOP/s. wgmma (what CUTLASS's Hopper kernels issue) may go faster:
// the device takes the larger of this and a large cuBLAS GEMM where cuBLAS is there.
double measure_mma_gflops(void* stream, int sm_count, bool bf16);

}  // namespace tokamax::cuda
