// ragged_dot on CUDA: one CUTLASS 3 grouped GEMM variant (sm_90a: TMA loads, wgmma, warp-
// specialized producer / consumer warpgroups, a persistent grouped tile scheduler), the device
// setup kernel that builds its group tables from group_sizes, and the zeroing of the rows past
// the groups. Each cuda_kernel_<variant>.cu instantiates RaggedGemm once.
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens), split into consecutive groups by group_sizes
//   K      contraction extent
//   N      output features
//   m_g    rows of group g
//   tm, tn, tk   the CTA tile (TileShape); cm, cn the cluster (ClusterShape)
//
// Layouts: lhs rows of group g are a row-major [m_g, K] block (K-major A), rhs[g] is row-major
// [K, N] (N-major B: wgmma reads 16-bit B either way), out rows of group g a row-major [m_g, N]
// block. The epilogue computes D = 1 * acc + 0 * C with C aliased to D (never read: beta = 0).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "backends/cuda/cuda_check.h"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"
#include "ops/ragged_dot/cuda_init_cache.h"
#include "ops/ragged_dot/cuda_kernel.h"
#include "ops/ragged_dot/cuda_setup.h"
#include "ops/ragged_dot/cuda_tail.cuh"

namespace tokamax::ragged_cuda {

using cuda::check;

// `context` says what was launched (grid, block, cluster, shared memory, the problem): CUTLASS's
// own status is often only "Error Internal".
template <class Context>
void check_cutlass(cutlass::Status status, const char* what, Context&& context) {
  if (status != cutlass::Status::kSuccess) {
    cuda::check_context(what);  // a kernel before it faulted: the device is lost
    const cudaError_t last = cudaPeekAtLastError();
    throw std::runtime_error(std::string("CUTLASS ") + what + ": " +
                             cutlass::cutlassGetStatusString(status) + " (" + context() +
                             "; last CUDA error: " + cudaGetErrorName(last) + ")");
  }
}

inline std::string dim3_text(dim3 d) {
  return std::to_string(d.x) + "x" + std::to_string(d.y) + "x" + std::to_string(d.z);
}

// Rounds up to 256 bytes, the alignment every table of the workspace keeps.
inline size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// The group tables, built on the device by one thread (G is a few hundred at most, and the
// prefix sum is sequential): no device-to-host copy of group_sizes.
template <class Problem, class ElementIn, class ElementOut, class StrideA, class StrideB,
          class StrideD>
__global__ void setup_groups(
    // Inputs.
    const int32_t* group_sizes,  // [G]
    int G, int64_t M, int K, int N, const ElementIn* lhs, const ElementIn* rhs, ElementOut* out,
    // Outputs.
    Problem* problems,                                        // [G] (m_g, N, K)
    const ElementIn** ptr_a, const ElementIn** ptr_b,         // [G] each
    ElementOut** ptr_d,                                       // [G]
    StrideA* stride_a, StrideB* stride_b, StrideD* stride_d,  // [G] each
    int64_t* rows) {                                          // [1] sum of the (cut) sizes
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  int64_t start = 0;
  for (int g = 0; g < G; ++g) {
    const GroupProblem p = group_problem(g, start, group_sizes[g], M, K, N);
    problems[g] = Problem{p.m, p.n, p.k};
    ptr_a[g] = lhs + p.lhs_offset;
    ptr_b[g] = rhs + p.rhs_offset;
    ptr_d[g] = out + p.out_offset;
    stride_a[g] = cutlass::make_cute_packed_stride(StrideA{}, cute::make_shape(p.m, K, 1));
    stride_b[g] = cutlass::make_cute_packed_stride(StrideB{}, cute::make_shape(N, K, 1));
    stride_d[g] = cutlass::make_cute_packed_stride(StrideD{}, cute::make_shape(p.m, N, 1));
    start = next_start(start, p);
  }
  *rows = start;
}

template <class ElementIn, class ElementOut, class TileShape, class ClusterShape,
          class KernelSchedule, class EpilogueSchedule>
struct RaggedGemm {
  using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;
  using Problem = typename ProblemShape::UnderlyingProblemShape;
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = cutlass::layout::RowMajor;
  using LayoutD = cutlass::layout::RowMajor;
  static constexpr int kAlignIn = 16 / sizeof(ElementIn);  // TMA: 16-byte rows
  static constexpr int kAlignOut = 16 / sizeof(ElementOut);

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, ElementOut, LayoutD*,
      kAlignOut, ElementOut, LayoutD*, kAlignOut, EpilogueSchedule,
      cutlass::epilogue::fusion::LinearCombination<ElementOut, float>>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementIn, LayoutA*, kAlignIn, ElementIn,
      LayoutB*, kAlignIn, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  using GemmKernel =
      cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
  using StrideA = typename GemmKernel::InternalStrideA;
  using StrideB = typename GemmKernel::InternalStrideB;
  using StrideD = typename GemmKernel::InternalStrideD;
  using RasterOrder =
      typename cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90GroupParams<
          Problem>::RasterOrderOptions;

  // The workspace: the group tables, then CUTLASS's own.
  struct Tables {
    Problem* problems;
    const ElementIn** ptr_a;
    const ElementIn** ptr_b;
    ElementOut** ptr_d;
    StrideA* stride_a;
    StrideB* stride_b;
    StrideD* stride_d;
    int64_t* rows;
    void* cutlass_workspace;
    size_t bytes;  // of the tables
  };

  static Tables carve(void* base, int G) {
    char* p = static_cast<char*>(base);
    Tables t{};
    auto take = [&](size_t bytes) {
      char* at = p;
      p += align256(bytes);
      return at;
    };
    t.problems = reinterpret_cast<Problem*>(take(G * sizeof(Problem)));
    t.ptr_a = reinterpret_cast<const ElementIn**>(take(G * sizeof(void*)));
    t.ptr_b = reinterpret_cast<const ElementIn**>(take(G * sizeof(void*)));
    t.ptr_d = reinterpret_cast<ElementOut**>(take(G * sizeof(void*)));
    t.stride_a = reinterpret_cast<StrideA*>(take(G * sizeof(StrideA)));
    t.stride_b = reinterpret_cast<StrideB*>(take(G * sizeof(StrideB)));
    t.stride_d = reinterpret_cast<StrideD*>(take(G * sizeof(StrideD)));
    t.rows = reinterpret_cast<int64_t*>(take(sizeof(int64_t)));
    t.bytes = static_cast<size_t>(p - static_cast<char*>(base));
    t.cutlass_workspace = p;
    return t;
  }

  static typename Gemm::Arguments arguments(const CudaRaggedDotLaunch& l, const Tables& t) {
    cutlass::KernelHardwareInfo hw_info;
    hw_info.device_id = l.device;
    hw_info.sm_count = l.sm_count;
    typename Gemm::Arguments args;
    args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
    // Host problem shapes unknown (nullptr): the sizes stay on the device.
    args.problem_shape = {l.G, t.problems, nullptr};
    args.mainloop = {const_cast<const ElementIn**>(t.ptr_a), t.stride_a,
                     const_cast<const ElementIn**>(t.ptr_b), t.stride_b};
    args.epilogue.thread.alpha = 1.0f;
    args.epilogue.thread.beta = 0.0f;
    args.epilogue.ptr_C = const_cast<const ElementOut**>(t.ptr_d);
    args.epilogue.dC = t.stride_d;
    args.epilogue.ptr_D = t.ptr_d;
    args.epilogue.dD = t.stride_d;
    args.hw_info = hw_info;
    args.scheduler.raster_order = l.raster_along_n ? RasterOrder::AlongN : RasterOrder::AlongM;
    args.scheduler.max_swizzle_size = l.swizzle;
    return args;
  }

  static size_t workspace_bytes(const CudaRaggedDotLaunch& l) {
    const Tables t = carve(nullptr, l.G);
    return t.bytes + align256(Gemm::get_workspace_size(arguments(l, t)));
  }

  static void launch(const CudaRaggedDotLaunch& l) {
    const auto stream = static_cast<cudaStream_t>(l.stream);
    const Tables t = carve(l.workspace, l.G);
    setup_groups<Problem, ElementIn, ElementOut, StrideA, StrideB, StrideD><<<1, 32, 0, stream>>>(
        l.group_sizes, l.G, l.M, l.K, l.N, static_cast<const ElementIn*>(l.lhs),
        static_cast<const ElementIn*>(l.rhs), static_cast<ElementOut*>(l.out), t.problems, t.ptr_a,
        t.ptr_b, t.ptr_d, t.stride_a, t.stride_b, t.stride_d, t.rows);
    check(cudaGetLastError(), "setup_groups");
    zero_tail<ElementOut>
        <<<l.sm_count * 4, 256, 0, stream>>>(t.rows, l.M, l.N, static_cast<ElementOut*>(l.out));
    check(cudaGetLastError(), "zero_tail");
    const typename Gemm::Arguments args = arguments(l, t);
    const Gemm* current = nullptr;  // once initialized: its grid goes into error messages
    auto context = [&] {
      std::string text = "G=" + std::to_string(l.G) + " M=" + std::to_string(l.M) +
                         " K=" + std::to_string(l.K) + " N=" + std::to_string(l.N) + ", block " +
                         dim3_text(GemmKernel::get_block_shape()) + ", cluster " +
                         std::to_string(cute::size<0>(ClusterShape{})) + "x" +
                         std::to_string(cute::size<1>(ClusterShape{})) + ", shared memory " +
                         std::to_string(GemmKernel::SharedStorageSize) + " bytes, " +
                         std::to_string(l.sm_count) + " SMs";
      if (current) text += ", grid " + dim3_text(GemmKernel::get_grid_shape(current->params()));
      return text;
    };
    // Initialized once per key (cuda_init_cache.h says why that is safe), then only launched.
    initialized().with(
        init_key(l),
        [&](Gemm& gemm) {
          check_cutlass(gemm.can_implement(args), "can_implement", context);
          check_cutlass(gemm.initialize(args, t.cutlass_workspace, stream), "initialize", context);
        },
        [&](Gemm& gemm) {
          current = &gemm;
          check_cutlass(gemm.run(stream), "run", context);
        });
  }

  static InitCache<Gemm>& initialized() {
    static InitCache<Gemm> cache(8);
    return cache;
  }
};

}  // namespace tokamax::ragged_cuda

// Defines ragged_dot_cuda_<name>_{workspace_bytes,launch} for one variant, the RaggedGemm type
// given after the name (cuda_kernel.cu dispatches to them by kCudaGemmVariants index).
#define TOKAMAX_RAGGED_DOT_CUDA_VARIANT(NAME, ...)                                               \
  namespace tokamax {                                                                            \
  size_t ragged_dot_cuda_##NAME##_workspace_bytes(const CudaRaggedDotLaunch& l) {                \
    return __VA_ARGS__::workspace_bytes(l);                                                      \
  }                                                                                              \
  void ragged_dot_cuda_##NAME##_launch(const CudaRaggedDotLaunch& l) { __VA_ARGS__::launch(l); } \
  }
