// ragged_dot on CUDA: grouped-GEMM variant 5 of kCudaGemmVariants (cuda_kernel.h),
// f16_f32_coop_128x128x64.
#include "ops/ragged_dot/cuda_grouped_gemm.cuh"

TOKAMAX_RAGGED_DOT_CUDA_VARIANT(
    f16_f32_coop_128x128x64,
    ragged_cuda::RaggedGemm<cutlass::half_t, float, cute::Shape<cute::_128, cute::_128, cute::_64>,
                            cute::Shape<cute::_1, cute::_1, cute::_1>,
                            cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative,
                            cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative>)
