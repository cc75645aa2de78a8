// Measurement kernels for a CUDA device's ceilings: a copy kernel for the memory bandwidth,
// register-resident FMA chains and tensor-core mma.sync chains for the compute peaks.
//
// Dimensions.
//   C      independent accumulator chains per thread (latency hiding)
//   I      loop iterations per thread
//   B      thread blocks: a few per SM, so that every SM is busy
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/peaks.h"

namespace tokamax::cuda {
namespace {

// Times `launch` on the stream with events, best of `repetitions`, in seconds.
template <typename Launch>
double best_seconds(cudaStream_t stream, int repetitions, Launch&& launch) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  launch();  // warm-up: module load, clocks up
  check(cudaGetLastError(), "launch");
  double best = 1e30;
  for (int r = 0; r < repetitions; ++r) {
    check(cudaEventRecord(start, stream), "cudaEventRecord");
    launch();
    check(cudaEventRecord(stop, stream), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    best = std::min(best, 1e-3 * ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return best;
}

__global__ void copy_kernel(const float4* __restrict__ in, float4* __restrict__ out, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    out[i] = in[i];
  }
}

constexpr int kChains = 8;
constexpr int kIterations = 4096;
constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 8;

// C chains of a = a * b + c per thread; the result is stored only when impossible, so the
// compiler keeps the chains without the stores costing bandwidth.
template <typename T>
__global__ void fma_kernel(T b, T c, T* sink) {
  T a[kChains];
  for (int k = 0; k < kChains; ++k) a[k] = T(threadIdx.x + k);
  for (int i = 0; i < kIterations; ++i) {
#pragma unroll
    for (int k = 0; k < kChains; ++k) a[k] = a[k] * b + c;
  }
  T sum = 0;
  for (int k = 0; k < kChains; ++k) sum += a[k];
  if (sum == T(-1.2345)) *sink = sum;
}

// Four independent m16n8k16 accumulators per warp: A (4 x b32) and B (2 x b32) fragments stay in
// registers, each mma is 2 * 16 * 8 * 16 = 4096 flops per warp.
template <bool kBf16>
__global__ void mma_kernel(uint32_t seed, float* sink) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const uint32_t a0 = seed ^ threadIdx.x, a1 = a0 + 1, a2 = a0 + 2, a3 = a0 + 3;
  const uint32_t b0 = seed + threadIdx.x, b1 = b0 ^ 5;
  float acc[4][4] = {};
  for (int i = 0; i < kIterations; ++i) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if constexpr (kBf16) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(acc[k][0]), "+f"(acc[k][1]), "+f"(acc[k][2]), "+f"(acc[k][3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
      } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(acc[k][0]), "+f"(acc[k][1]), "+f"(acc[k][2]), "+f"(acc[k][3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
      }
    }
  }
  float sum = 0;
  for (int k = 0; k < 4; ++k) sum += acc[k][0] + acc[k][1] + acc[k][2] + acc[k][3];
  if (sum == -1.2345f) *sink = sum;
#endif
}

template <typename T>
double fma_gflops(void* stream_handle, int sm_count) {
  auto stream = static_cast<cudaStream_t>(stream_handle);
  T* sink = nullptr;
  check(cudaMalloc(&sink, sizeof(T)), "cudaMalloc");
  const int blocks = std::max(sm_count, 1) * kBlocksPerSm;
  const double seconds = best_seconds(
      stream, 3, [&] { fma_kernel<T><<<blocks, kThreads, 0, stream>>>(T(0.999), T(1e-7), sink); });
  cudaFree(sink);
  return 2.0 * kChains * kIterations * double(kThreads) * blocks / seconds * 1e-9;
}

}  // namespace

double measure_copy_gbps(void* stream_handle, size_t bytes, int repetitions) {
  auto stream = static_cast<cudaStream_t>(stream_handle);
  const size_t n = bytes / sizeof(float4);
  float4 *in = nullptr, *out = nullptr;
  check(cudaMalloc(&in, n * sizeof(float4)), "cudaMalloc");
  check(cudaMalloc(&out, n * sizeof(float4)), "cudaMalloc");
  check(cudaMemset(in, 0, n * sizeof(float4)), "cudaMemset");
  int device = 0, sms = 1;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "attribute");
  const double seconds = best_seconds(stream, repetitions, [&] {
    copy_kernel<<<sms * kBlocksPerSm, kThreads, 0, stream>>>(in, out, n);
  });
  cudaFree(in);
  cudaFree(out);
  return 2.0 * double(n) * sizeof(float4) / seconds * 1e-9;
}

double measure_f32_fma_gflops(void* stream, int sm_count) {
  return fma_gflops<float>(stream, sm_count);
}

double measure_f64_fma_gflops(void* stream, int sm_count) {
  return fma_gflops<double>(stream, sm_count);
}

double measure_mma_gflops(void* stream_handle, int sm_count, bool bf16) {
  auto stream = static_cast<cudaStream_t>(stream_handle);
  float* sink = nullptr;
  check(cudaMalloc(&sink, sizeof(float)), "cudaMalloc");
  const int blocks = std::max(sm_count, 1) * kBlocksPerSm;
  const double seconds = best_seconds(stream, 3, [&] {
    if (bf16) {
      mma_kernel<true><<<blocks, kThreads, 0, stream>>>(0x3f803f80u, sink);
    } else {
      mma_kernel<false><<<blocks, kThreads, 0, stream>>>(0x3c003c00u, sink);
    }
  });
  cudaFree(sink);
  const double warps = double(blocks) * (kThreads / 32);
  return 4096.0 * 4 * kIterations * warps / seconds * 1e-9;
}

}  // namespace tokamax::cuda
