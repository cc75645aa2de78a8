// A dense, single-threaded GEMM on one thread's tile, for the CPU kernels of ops whose inner
// loops are matrix products (dot_product_attention: Q K^T and P V; gated_linear_unit: x W;
// linear_softmax_cross_entropy_loss: x W over a chunk of V). It runs the packing and the
// register-blocked micro-kernels of the engine (pack.h, micro_kernel.h), as ragged_dot does,
// so every op gets the same ~90%-of-peak inner product; the caller owns threading and tiling
// above it (which rows, which columns, what to do with the f32 result).
//
// Dimensions.
//   M, N   rows and columns of the product C[M, N] (f32)
//   K      contraction extent
//   tk     K block: the depth of the packed panels
//   tn     columns of one packed B panel (rounded up to whole nr strips)
//   mr, nr the micro-tile (a shape of micro_kernel_shapes, micro_tile.h)
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/host_memory.h"
#include "ops/framework/dtype.h"

namespace tokamax {

// A strided matrix operand. Not transposed: element (r, c) at data[r * ld + c]. Transposed: the
// operand is the transpose of what is stored, element (r, c) at data[c * ld + r] (B = K^T for
// attention's Q K^T, with K stored [t, D]).
struct GemmOperand {
  DType dtype = DType::kF32;  // f32, bf16 or f16; or i8 / f8e4m3 codes for B (below)
  const void* data = nullptr;
  int64_t ld = 0;
  bool transposed = false;
  // Quantized B (i8 or f8e4m3 codes, not transposed, f32 engine): element (k, c) is code *
  // scale[(k / scale_block) * scale_ld + c], dequantized to f32 as its panels are packed.
  const float* scale = nullptr;
  int64_t scale_ld = 0;
  int64_t scale_block = 0;
};

// The arithmetic a product runs on. The two bf16 engines take bf16 x bf16 only (NotImplemented
// for other dtypes, and where the CPU lacks the instructions).
enum class GemmEngine {
  kF32Fma,   // f32 FMAs on register micro-tiles; bf16/f16 are widened to f32 while packing
  kBf16Dot,  // vdpbf16ps on bf16 pairs (x86 with avx512_bf16)
  kAmxBf16,  // TDPBF16PS on AMX tiles, or their emulation (backends/cpu/amx.h: tile_mode())
};

struct CpuGemmOptions {
  int mr = 0;          // micro-tile; 0 = the first shape of this CPU's table (AMX: unused)
  int nr_vectors = 0;  // (mr and nr_vectors must both be 0 or both set)
  int64_t tk = 256;
  int64_t tn = 512;
  GemmEngine engine = GemmEngine::kF32Fma;
  // Read B where it lies instead of packing it, where the micro-kernel can (the f32 engine, B
  // f32 / bf16 / f16 not transposed nor quantized, N whole strips of nr columns); otherwise B
  // is packed as usual. For a small B (in L2) multiplied by few rows, as the chunked recurrences'
  // 32-row products, packing it costs about as much as the product.
  bool rhs_in_place = false;
};

// An operand packed once for several products that share it (attention's backward reuses a
// block of keys against every block of queries): the packed blocks in the order cpu_gemm_f32
// consumes them, so a product that takes it packs nothing for that side. A (lhs): for each K
// block, [ceil(M / mr)][depth][mr]; B (rhs): for each K block, for each panel of tn columns,
// [ceil(cols / nr)][depth][nr] (bf16 dot: depth -> ceil(depth / 2) pairs; AMX: the tile
// layouts of amx_layout.h). Only valid with the CpuGemmOptions it was packed for (checked) and
// while its storage lives.
struct PackedGemmOperand {
  const float* data = nullptr;
  bool is_lhs = false;
  int64_t extent = 0;  // M for A, N for B
  int64_t K = 0;
  int mr = 0, nr_vectors = 0;
  int64_t tk = 0, tn = 0;
  GemmEngine engine = GemmEngine::kF32Fma;
};

// Where packed operands live: host buffers (backends/cpu/host_memory.h), 64-byte aligned, so
// that packing can write them with non-temporal stores (pack.h), and on 2 MiB pages from 4 MiB
// like every large buffer (on the backward GLU the pages alone measured within the noise).
using GemmPackStorage = std::vector<float, cpu::HostAllocator<float>>;

// Packs A [M, K] (is_lhs) or B [K, N] for `options` into `storage` (grown, never shrunk).
PackedGemmOperand pack_gemm_lhs(const GemmOperand& a, int64_t M, int64_t K,
                                const CpuGemmOptions& options, GemmPackStorage& storage);
PackedGemmOperand pack_gemm_rhs(const GemmOperand& b, int64_t K, int64_t N,
                                const CpuGemmOptions& options, GemmPackStorage& storage);

// The same packing cut into pieces that several threads can run at once (A: one per K block;
// B: one per panel of each K block), so that one wide operand does not keep a thread packing
// while the others wait. reserve_* sizes `storage` (on one thread, before any piece runs) and
// returns the operand as it is once all gemm_pack_pieces(packed) pieces have run;
// pack_gemm_piece packs piece `piece` (in [0, gemm_pack_pieces)) of `source` into it; `stream`:
// with non-temporal stores where the layout allows (pack.h), fenced before it returns.
// pack_gemm_lhs / pack_gemm_rhs are reserve_* followed by every piece; pack_gemm_operands
// (tiles.h) runs the pieces of several operands on the pool.
PackedGemmOperand reserve_gemm_lhs(int64_t M, int64_t K, const CpuGemmOptions& options,
                                   GemmPackStorage& storage);
PackedGemmOperand reserve_gemm_rhs(int64_t K, int64_t N, const CpuGemmOptions& options,
                                   GemmPackStorage& storage);
int64_t gemm_pack_pieces(const PackedGemmOperand& packed);
void pack_gemm_piece(const GemmOperand& source, const PackedGemmOperand& packed, int64_t piece,
                     bool stream = false);

// C[M, N] (+)= A[M, K] @ B[K, N] in f32 accumulators, row stride ldc. `accumulate` adds to C;
// otherwise C is overwritten (K = 0 writes zeros). Either operand may be transposed (A stored
// [K, M]: ragged_dot_vjp's lhs^T dout, whose contraction is over rows). Uses per-thread
// scratch that grows once and is reused (no allocation per call after the first). Throws
// NotImplemented for a micro-tile shape this CPU lacks or an engine that cannot run here.
void cpu_gemm_f32(const GemmOperand& a, const GemmOperand& b, int64_t M, int64_t N, int64_t K,
                  float* c, int64_t ldc, bool accumulate, const CpuGemmOptions& options = {});
// The same with one side packed beforehand (its extents are the packed ones). Throws
// InvalidArgument if the packed operand does not match `options` or the other extents.
void cpu_gemm_f32(const GemmOperand& a, const PackedGemmOperand& b, int64_t M, float* c,
                  int64_t ldc, bool accumulate, const CpuGemmOptions& options = {});
void cpu_gemm_f32(const PackedGemmOperand& a, const GemmOperand& b, int64_t N, float* c,
                  int64_t ldc, bool accumulate, const CpuGemmOptions& options = {});
void cpu_gemm_f32(const PackedGemmOperand& a, const PackedGemmOperand& b, float* c, int64_t ldc,
                  bool accumulate, const CpuGemmOptions& options = {});

}  // namespace tokamax
