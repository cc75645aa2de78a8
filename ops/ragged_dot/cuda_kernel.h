// ragged_dot on CUDA: the compiled grouped-GEMM variants and their launch, behind a plain C++17
// interface (no CUDA or CUTLASS header), shared by the implementation class (cuda.cc, host C++)
// and the kernels (cuda_kernel*.cu, nvcc).
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens), split into consecutive groups by group_sizes
//   K      contraction extent
//   N      output features
//   tm, tn, tk   the CTA tile of the CUTLASS kernel; cm, cn its cluster
#pragma once

#include <cstddef>
#include <cstdint>

namespace tokamax {

enum class CudaElement { kBF16, kF16, kF32 };

// One compiled CUTLASS 3 grouped GEMM for sm_90a (TMA + wgmma, warp-specialized, persistent over
// (group, tile)): one translation unit each, a deliberate few because each costs minutes of
// compile time. The config's (tile, cluster, schedule) picks among those of the dtypes at hand.
struct CudaGemmVariant {
  CudaElement in, out;
  int tile_m, tile_n, tile_k;
  int cluster_m, cluster_n;
  const char* schedule;  // "cooperative" (two consumer warpgroups on one tile) | "pingpong"
};

inline constexpr CudaGemmVariant kCudaGemmVariants[] = {
    {CudaElement::kBF16, CudaElement::kBF16, 128, 128, 64, 1, 1, "cooperative"},
    {CudaElement::kBF16, CudaElement::kBF16, 128, 256, 64, 2, 1, "cooperative"},
    {CudaElement::kBF16, CudaElement::kBF16, 64, 128, 64, 1, 1, "pingpong"},
    {CudaElement::kBF16, CudaElement::kF32, 128, 128, 64, 1, 1, "cooperative"},
    {CudaElement::kF16, CudaElement::kF16, 128, 128, 64, 1, 1, "cooperative"},
    {CudaElement::kF16, CudaElement::kF32, 128, 128, 64, 1, 1, "cooperative"},
};
inline constexpr int kNumCudaGemmVariants =
    static_cast<int>(sizeof(kCudaGemmVariants) / sizeof(kCudaGemmVariants[0]));

// The compiled variant with the widest tiles (tile and cluster area) for `in` -> `in`, or -1:
// the device's tensor-core peak is probed with it (cuda_peak_probe.cc).
constexpr int widest_cuda_gemm_variant(CudaElement in) {
  int best = -1;
  long best_area = 0;
  for (int i = 0; i < kNumCudaGemmVariants; ++i) {
    const CudaGemmVariant& v = kCudaGemmVariants[i];
    const long area = static_cast<long>(v.tile_m) * v.tile_n * v.cluster_m * v.cluster_n;
    if (v.in == in && v.out == in && area > best_area) {
      best = i;
      best_area = area;
    }
  }
  return best;
}

// One call: every pointer is device memory; `workspace` holds at least
// ragged_dot_cuda_workspace_bytes(launch) bytes.
struct CudaRaggedDotLaunch {
  int variant = 0;  // index into kCudaGemmVariants
  int G = 0;
  int64_t M = 0;
  int K = 0, N = 0;
  // Inputs.
  const void* lhs = nullptr;             // [M, K], full array
  const void* rhs = nullptr;             // [G, K, N], full array
  const int32_t* group_sizes = nullptr;  // [G]
  // Outputs.
  void* out = nullptr;  // [M, N], full array
  // Scratch.
  void* workspace = nullptr;
  // The scheduler: tiles rastered along M (0) or N (1), swizzled by up to `swizzle` tiles.
  int raster_along_n = 0;
  int swizzle = 1;
  // Where: the runtime's device ordinal, its SM count, its stream (cudaStream_t).
  int device = 0;
  int sm_count = 0;
  void* stream = nullptr;
};

// Bytes of the group tables and CUTLASS's own workspace for `launch`.
size_t ragged_dot_cuda_workspace_bytes(const CudaRaggedDotLaunch& launch);
// Enqueues the setup kernel (tables from group_sizes, on the device), the zeroing of the rows
// past the groups, and the grouped GEMM on the stream. Throws std::runtime_error with CUTLASS's
// or CUDA's error.
void ragged_dot_cuda_launch(const CudaRaggedDotLaunch& launch);

}  // namespace tokamax
