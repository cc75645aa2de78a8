// A single-threaded GEMM tile over the engine's packing and micro-kernels.
//
// Dimensions: see cpu_gemm.h. depth = the K extent of the current block (<= tk).
#include "ops/common/cpu_gemm/gemm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "backends/cpu/scratch.h"
#include "backends/cpu/simd_target.h"
#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/framework/errors.h"

namespace tokamax {
namespace {

// Per-thread scratch that only grows (backends/cpu/scratch.h says why).
float* scratch_floats(size_t count) {
  thread_local cpu::ScratchBuffer buffer;
  return buffer.floats(count);
}

}  // namespace

void cpu_gemm_f32(const GemmOperand& a, const GemmOperand& b, int64_t M, int64_t N, int64_t K,
                  float* c, int64_t ldc, bool accumulate, const CpuGemmOptions& options) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (!accumulate) {
      for (int64_t r = 0; r < M; ++r) std::memset(c + r * ldc, 0, N * sizeof(float));
    }
    return;
  }
  const int lanes = cpu::simd_f32_lanes();
  MicroKernelShape shape{options.mr, options.nr_vectors};
  if (shape.mr == 0 && shape.nr_vectors == 0) shape = micro_kernel_shapes(lanes)[0];
  if (!has_micro_kernel_shape(lanes, shape.mr, shape.nr_vectors)) {
    throw NotImplemented("cpu gemm: no " + std::to_string(shape.mr) + "x" +
                         std::to_string(shape.nr_vectors) + " micro-kernel for the " +
                         cpu::simd_target_name() + " target");
  }
  const bool native = options.native_bf16;
  if (native && (!gemm_has_native_bf16() || a.dtype != DType::kBF16 || b.dtype != DType::kBF16)) {
    throw NotImplemented("cpu gemm: native bf16 needs bf16 operands and a CPU with avx512_bf16");
  }
  const int64_t mr = shape.mr, nr = int64_t{shape.nr_vectors} * lanes;
  const int64_t tk = std::max<int64_t>(2, std::min(options.tk, K));
  const int64_t tn = round_up(std::max<int64_t>(1, std::min(options.tn, N)), nr);
  const int64_t lhs_elems = round_up(M, mr) * round_up(tk, 2);
  const int64_t rhs_elems = tn * round_up(tk, 2);
  float* lhs_block = scratch_floats(static_cast<size_t>(lhs_elems + rhs_elems + 16));
  float* rhs_panel = lhs_block + round_up(lhs_elems, 16);
  const size_t a_size = dtype_size(a.dtype), b_size = dtype_size(b.dtype);
  const char* a_data = static_cast<const char*>(a.data);
  const char* b_data = static_cast<const char*>(b.data);

  for (int64_t k0 = 0; k0 < K; k0 += tk) {
    const int64_t depth = std::min(tk, K - k0);
    BlockArgs args{};
    args.lhs_block = lhs_block;
    args.rows = M;
    args.depth = depth;
    args.ldc = ldc;
    args.accumulate = accumulate || k0 > 0;
    args.mr = shape.mr;
    args.nr_vectors = shape.nr_vectors;
    args.rhs_packed = true;
    // A transposed is stored [K, M]: its micro-panel layout [panels][depth][mr] is the rhs
    // panel layout of the stored rows with mr columns per strip, so the rhs packer builds it.
    if (a.transposed && native) {
      pack_rhs_panel_pairs(reinterpret_cast<const bf16*>(a_data) + k0 * a.ld, a.ld, depth, M, mr,
                           reinterpret_cast<uint32_t*>(lhs_block));
    } else if (a.transposed) {
      pack_rhs_panel(a.dtype, a_data + k0 * a.ld * static_cast<int64_t>(a_size), a.ld, depth, M,
                     mr, lhs_block);
    } else if (native) {
      pack_lhs_block_pairs(reinterpret_cast<const bf16*>(a_data) + k0, a.ld, M, depth, mr,
                           reinterpret_cast<uint32_t*>(lhs_block));
    } else {
      pack_lhs_block(a.dtype, a_data + k0 * static_cast<int64_t>(a_size), a.ld, M, depth, mr,
                     lhs_block);
    }
    for (int64_t n0 = 0; n0 < N; n0 += tn) {
      const int64_t cols = std::min(tn, N - n0);
      args.cols = cols;
      args.out = c + n0;
      // Prefetch the panel after this one (the next columns of this K block, or the first of
      // the next) into L2 while this one is multiplied: with few rows of A, reading B from
      // memory is otherwise a stall at every panel.
      const int64_t next_n0 = n0 + tn < N ? n0 + tn : 0;
      const int64_t next_k0 = n0 + tn < N ? k0 : k0 + tk;
      args.next_rhs = {};
      if (next_k0 < K) {
        const int64_t next_depth = std::min(tk, K - next_k0);
        const int64_t next_cols = std::min(tn, N - next_n0);
        if (b.transposed) {
          args.next_rhs.base = b_data + (next_n0 * b.ld + next_k0) * static_cast<int64_t>(b_size);
          args.next_rhs.rows = next_cols;
          args.next_rhs.bytes = next_depth * static_cast<int64_t>(b_size);
        } else {
          args.next_rhs.base = b_data + (next_k0 * b.ld + next_n0) * static_cast<int64_t>(b_size);
          args.next_rhs.rows = next_depth;
          args.next_rhs.bytes = next_cols * static_cast<int64_t>(b_size);
        }
        args.next_rhs.stride = b.ld * static_cast<int64_t>(b_size);
      }
      if (native) {
        const bf16* bt = reinterpret_cast<const bf16*>(b_data);
        // B transposed is stored [N, K]: its strips [depth][nr] are the lhs micro-panel layout of
        // the stored rows with nr rows per panel, so the lhs packer (register transposes) builds
        // them.
        if (b.transposed) {
          pack_lhs_block_pairs(bt + n0 * b.ld + k0, b.ld, cols, depth, nr,
                               reinterpret_cast<uint32_t*>(rhs_panel));
        } else {
          pack_rhs_panel_pairs(bt + k0 * b.ld + n0, b.ld, depth, cols, nr,
                               reinterpret_cast<uint32_t*>(rhs_panel));
        }
        args.rhs = rhs_panel;
        if (!block_product_bf16(args)) throw NotImplemented("cpu gemm: no such bf16 micro-kernel");
        continue;
      }
      if (b.transposed) {
        pack_lhs_block(b.dtype, b_data + (n0 * b.ld + k0) * static_cast<int64_t>(b_size), b.ld,
                       cols, depth, nr, rhs_panel);
      } else {
        pack_rhs_panel(b.dtype, b_data + (k0 * b.ld + n0) * static_cast<int64_t>(b_size), b.ld,
                       depth, cols, nr, rhs_panel);
      }
      args.rhs = rhs_panel;
      args.rhs_strip_stride = depth * nr;
      args.ldb = nr;
      if (!block_product_f32(args)) throw NotImplemented("cpu gemm: no such f32 micro-kernel");
    }
  }
}

}  // namespace tokamax
