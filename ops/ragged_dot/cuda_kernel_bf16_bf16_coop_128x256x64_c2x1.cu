// ragged_dot on CUDA: grouped-GEMM variant 1 of kCudaGemmVariants (cuda_kernel.h),
// bf16_bf16_coop_128x256x64_c2x1.
#include "ops/ragged_dot/cuda_grouped_gemm.cuh"

TOKAMAX_RAGGED_DOT_CUDA_VARIANT(
    bf16_bf16_coop_128x256x64_c2x1,
    ragged_cuda::RaggedGemm<cutlass::bfloat16_t, cutlass::bfloat16_t,
                            cute::Shape<cute::_128, cute::_256, cute::_64>,
                            cute::Shape<cute::_2, cute::_1, cute::_1>,
                            cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative,
                            cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative>)
