// ragged_dot on CUDA: dispatch to the compiled grouped-GEMM variants (one translation unit each,
// cuda_kernel_<variant>.cu), in the order of kCudaGemmVariants.
#include <stdexcept>
#include <string>

#include "ops/ragged_dot/cuda_kernel.h"

namespace tokamax {

// Defined in cuda_kernel_<variant>.cu.
size_t ragged_dot_cuda_bf16_bf16_coop_128x128x64_workspace_bytes(const CudaRaggedDotLaunch& l);
void ragged_dot_cuda_bf16_bf16_coop_128x128x64_launch(const CudaRaggedDotLaunch& l);
size_t ragged_dot_cuda_bf16_bf16_coop_128x256x64_c2x1_workspace_bytes(const CudaRaggedDotLaunch& l);
void ragged_dot_cuda_bf16_bf16_coop_128x256x64_c2x1_launch(const CudaRaggedDotLaunch& l);
size_t ragged_dot_cuda_bf16_bf16_pingpong_64x128x64_workspace_bytes(const CudaRaggedDotLaunch& l);
void ragged_dot_cuda_bf16_bf16_pingpong_64x128x64_launch(const CudaRaggedDotLaunch& l);
size_t ragged_dot_cuda_bf16_f32_coop_128x128x64_workspace_bytes(const CudaRaggedDotLaunch& l);
void ragged_dot_cuda_bf16_f32_coop_128x128x64_launch(const CudaRaggedDotLaunch& l);
size_t ragged_dot_cuda_f16_f16_coop_128x128x64_workspace_bytes(const CudaRaggedDotLaunch& l);
void ragged_dot_cuda_f16_f16_coop_128x128x64_launch(const CudaRaggedDotLaunch& l);
size_t ragged_dot_cuda_f16_f32_coop_128x128x64_workspace_bytes(const CudaRaggedDotLaunch& l);
void ragged_dot_cuda_f16_f32_coop_128x128x64_launch(const CudaRaggedDotLaunch& l);

namespace {

struct VariantEntry {
  size_t (*workspace_bytes)(const CudaRaggedDotLaunch&);
  void (*launch)(const CudaRaggedDotLaunch&);
};

constexpr VariantEntry kEntries[] = {
    {&ragged_dot_cuda_bf16_bf16_coop_128x128x64_workspace_bytes,
     &ragged_dot_cuda_bf16_bf16_coop_128x128x64_launch},
    {&ragged_dot_cuda_bf16_bf16_coop_128x256x64_c2x1_workspace_bytes,
     &ragged_dot_cuda_bf16_bf16_coop_128x256x64_c2x1_launch},
    {&ragged_dot_cuda_bf16_bf16_pingpong_64x128x64_workspace_bytes,
     &ragged_dot_cuda_bf16_bf16_pingpong_64x128x64_launch},
    {&ragged_dot_cuda_bf16_f32_coop_128x128x64_workspace_bytes,
     &ragged_dot_cuda_bf16_f32_coop_128x128x64_launch},
    {&ragged_dot_cuda_f16_f16_coop_128x128x64_workspace_bytes,
     &ragged_dot_cuda_f16_f16_coop_128x128x64_launch},
    {&ragged_dot_cuda_f16_f32_coop_128x128x64_workspace_bytes,
     &ragged_dot_cuda_f16_f32_coop_128x128x64_launch}};
static_assert(sizeof(kEntries) / sizeof(kEntries[0]) == kNumCudaGemmVariants,
              "one translation unit per entry of kCudaGemmVariants");

const VariantEntry& entry(int variant) {
  if (variant < 0 || variant >= kNumCudaGemmVariants) {
    throw std::invalid_argument("ragged_dot cuda: no compiled variant " + std::to_string(variant));
  }
  return kEntries[variant];
}

}  // namespace

size_t ragged_dot_cuda_workspace_bytes(const CudaRaggedDotLaunch& launch) {
  return entry(launch.variant).workspace_bytes(launch);
}

void ragged_dot_cuda_launch(const CudaRaggedDotLaunch& launch) {
  entry(launch.variant).launch(launch);
}

}  // namespace tokamax
