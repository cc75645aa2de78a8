// linear_softmax_cross_entropy_loss_vjp on CPU: dz recomputed per V chunk and consumed at once
// by the dx and dw products on the shared GEMM engine.
//
// Dimensions.
//   B, H, V      rows, hidden size, vocabulary size (see base.h)
//   tv     V chunk (chunk_v); nc = ceil(V / tv) chunks
//   tb     rows per logits / dx GEMM call; th rows of dw per GEMM call
//   nv     V ranges of whole chunks (v_splits <= nc), one task each
//
// Work split. dw[:, j] sums over every row b, dx[b, :] over every column j. A task owns a V range
// and all B rows: per chunk it recomputes z = x w_chunk ([B, tv] f32, tb rows per call), turns it
// into dz in place, and then
//   dw[:, chunk]  = x^T dz          (A transposed: x is stored [B, H]; th rows of dw per call)
//   dx_part      += dz w_chunk^T    (B transposed: w is stored [H, V]; a contraction of tv)
// so dw has a single writer per column and each range accumulates its own dx partial [B, H]
// (nv * B * H f32 in all, the largest scratch: 4 MB per range at B = 256, H = 4096, against the
// B * V * 4 = 131 MB that materialised logits would take at V = 128256). The partials are added
// in range order afterwards: the result does not depend on which thread ran which range.
//
// Memory traffic. Each range streams its slice of w twice per chunk (the logits product and the
// transposed panels of the dx product), while the chunk is still in L2/L3. x [B, H] is packed
// once per call, both ways (rows per tb block for the logits, transposed per th block for dw),
// and shared read-only by the ranges; dz once per chunk as dw's B, for all its th blocks.
// (On the f32 head shape (B 256, H 1024) a 576-column chunk packs 6 MB: w's two layouts and
// dz's two; packing x both ways per chunk, and dz per th block, would make it 9.8 MB.) The dz tile
// [B, tv] f32 stays in the core's share of cache between the three products.
#include "ops/linear_softmax_cross_entropy_loss/vjp/cpu_kernel.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/cpu/scratch.h"
#include "backends/cpu/thread_pool.h"
#include "ops/common/cpu_gemm/gemm.h"
#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/common/cpu_gemm/tiles.h"
#include "ops/common/cpu_softmax.h"

namespace tokamax {
namespace {

// Per-thread scratch, each user its own buffer (cpu_gemm_f32 keeps its packing buffers apart),
// grown once and reused across calls: a training step must not fault in fresh pages.
float* dz_scratch(size_t count) {
  thread_local cpu::ScratchBuffer buffer;
  return buffer.floats(count);
}
bf16* dz16_scratch(size_t count) {
  thread_local cpu::ScratchBuffer buffer;
  return static_cast<bf16*>(buffer.get(count * sizeof(bf16)));
}
float* dw_scratch(size_t count) {
  thread_local cpu::ScratchBuffer buffer;
  return buffer.floats(count);
}
GemmPackStorage& dz_packed_storage() {
  thread_local GemmPackStorage storage;
  return storage;
}
// The dx partials live with the calling thread (the same thread across a benchmark's calls).
float* partial_scratch(size_t count) {
  thread_local cpu::ScratchBuffer buffer;
  return buffer.floats(count);
}

}  // namespace

void lsce_vjp_cpu_kernel(const LinearSoftmaxCrossEntropyVjpProblem& vp,
                         const LsceVjpCpuKernelOptions& options, const void* x,
                         const int32_t* labels, const void* w, const double* lse, const double* c,
                         void* dx, void* dw) {
  const LinearSoftmaxCrossEntropyProblem& p = vp.fwd;
  const int64_t B = p.B, H = p.H, V = p.V;
  const auto x_size = static_cast<int64_t>(dtype_size(p.x_dtype));
  const auto w_size = static_cast<int64_t>(dtype_size(p.w_dtype));
  if (B == 0 || H == 0) {
    // dw sums over no rows (B = 0) or is empty (H = 0); dx is empty either way.
    std::memset(dw, 0, static_cast<size_t>(H * V * w_size));
    return;
  }
  const int64_t tv = std::clamp<int64_t>(options.chunk_v, 1, V);
  const int64_t nc = ceil_div(V, tv);
  const int64_t nv = std::clamp<int64_t>(options.v_splits, 1, nc);
  const int64_t tb = std::clamp<int64_t>(options.tile_b, 1, B);
  const int64_t th = std::clamp<int64_t>(options.tile_h, 1, H);
  const char* x_data = static_cast<const char*>(x);
  const char* w_data = static_cast<const char*>(w);
  char* dw_data = static_cast<char*>(dw);
  // One range and an f32 dx: the range accumulates into dx itself, nothing to add up.
  const bool direct = nv == 1 && p.x_dtype == DType::kF32;
  float* partials =
      direct ? static_cast<float*>(dx) : partial_scratch(static_cast<size_t>(nv * B * H));

  CpuGemmOptions gemm;
  gemm.mr = options.mr;
  gemm.nr_vectors = options.nr_vectors;
  gemm.tk = options.tile_k;
  gemm.tn = options.tile_n;
  // A bf16 engine (bf16 x and w): all three products on bf16, dz rounded to bf16.
  // The two gradient products then take dz rounded to bf16 ([B, tv] bf16 beside the f32 tile),
  // as a mixed-precision backward feeds its matmuls in the compute type; the error model
  // allows that rounding where x and w are both 16-bit (base_numerics.cc, item 3).
  // Otherwise dz stays f32 and 16-bit x and w are widened while packing.
  const bool native = options.engine != GemmEngine::kF32Fma;
  gemm.engine = options.engine;
  const DType dz_dtype = native ? DType::kBF16 : DType::kF32;
  const int64_t dz_size = static_cast<int64_t>(dtype_size(dz_dtype));

  // x packed once for every chunk of every range: its tb-row blocks (the logits' A) and its
  // th-column blocks transposed (dw's A), in the calling thread's storage, on the pool.
  const int64_t nb = ceil_div(B, tb);
  thread_local std::vector<GemmPackStorage> x_storage;
  std::vector<GemmPackRequest> x_requests;
  for (int64_t b0 = 0; b0 < B; b0 += tb) {
    const GemmOperand rows{p.x_dtype, x_data + b0 * H * x_size, H, false};
    x_requests.push_back({rows, true, std::min(tb, B - b0), H});
  }
  for (int64_t h0 = 0; h0 < H; h0 += th) {
    const GemmOperand columns_t{p.x_dtype, x_data + h0 * x_size, H, true};
    x_requests.push_back({columns_t, true, std::min(th, H - h0), B});
  }
  const std::vector<PackedGemmOperand> x_packed =
      pack_gemm_operands(x_requests, gemm, options.num_threads, x_storage);

  cpu::parallel_for(nv, options.num_threads, [&](int64_t range, int) {
    // Whole chunks, as evenly as nc / nv allows (nv <= nc: every range has one at least).
    const int64_t c_begin = range * nc / nv, c_end = (range + 1) * nc / nv;
    float* dx_part = partials + range * B * H;            // [B, H] this range's dx partial
    float* dz = dz_scratch(static_cast<size_t>(B * tv));  // [B, cols] the chunk's logits / dz
    // dz as the gradient products read it: the f32 tile itself, or its bf16 copy.
    char* dz_in = native ? reinterpret_cast<char*>(dz16_scratch(static_cast<size_t>(B * tv)))
                         : reinterpret_cast<char*>(dz);
    for (int64_t chunk = c_begin; chunk < c_end; ++chunk) {
      const int64_t v0 = chunk * tv, cols = std::min(tv, V - v0);
      const bool accumulate = chunk > c_begin;
      // w[:, v0:v0+cols] in place (row stride V), and its transpose [cols, H] for dx.
      const GemmOperand w_chunk{p.w_dtype, w_data + v0 * w_size, V, false};
      const GemmOperand w_chunk_t{p.w_dtype, w_data + v0 * w_size, V, true};
      for (int64_t b0 = 0; b0 < B; b0 += tb) {
        const int64_t rows = std::min(tb, B - b0);
        float* z = dz + b0 * cols;  // rows [b0, b0 + rows) of the chunk, row stride cols
        cpu_gemm_f32(x_packed[b0 / tb], w_chunk, cols, z, cols, /*accumulate=*/false, gemm);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t b = b0 + r;
          float* row = z + r * cols;
          if (c[b] == 0.0) {  // padding (or a zero cotangent): no gradient through this row
            std::memset(row, 0, static_cast<size_t>(cols) * sizeof(float));
            continue;
          }
          // p = exp(z - lse) against the full row's lse (z <= lse up to the logits' rounding,
          // which exp tolerates), then dz = c (p - onehot): three f32 roundings per entry, as
          // the error model allows.
          const auto weight = static_cast<float>(c[b]);
          cpu_exp_shift_sum(row, cols, static_cast<float>(lse[b]));
          cpu_scale_row(row, cols, weight);
          const int64_t label = labels[b];
          if (label >= v0 && label < v0 + cols) row[label - v0] -= weight;
        }
        // dx rows += dz rows [rows, cols] x w_chunk^T [cols, H]; while this row block's dz is
        // hot. The first chunk of the range overwrites (no zero fill of the partial).
        char* dz_rows_in = dz_in + b0 * cols * dz_size;
        if (native) store_rows(z, cols, rows, cols, DType::kBF16, dz_rows_in, cols);
        const GemmOperand dz_rows{dz_dtype, dz_rows_in, cols, false};
        cpu_gemm_f32(dz_rows, w_chunk_t, rows, H, cols, dx_part + b0 * H, H, accumulate, gemm);
      }
      // dw[h0:h0+th, v0:v0+cols] = x[:, h0:h0+th]^T dz: a contraction over all B rows, so each
      // element has this one writer.
      // dz packed once as B for all the th blocks.
      const PackedGemmOperand dz_all =
          pack_gemm_rhs({dz_dtype, dz_in, cols, false}, B, cols, gemm, dz_packed_storage());
      for (int64_t h0 = 0; h0 < H; h0 += th) {
        const int64_t h_rows = std::min(th, H - h0);
        const PackedGemmOperand& x_t = x_packed[nb + h0 / th];
        char* out = dw_data + (h0 * V + v0) * w_size;
        if (p.w_dtype == DType::kF32) {
          cpu_gemm_f32(x_t, dz_all, reinterpret_cast<float*>(out), V, false, gemm);
        } else {
          // 16-bit dw: the f32 tile, then one rounding per element on the store.
          float* tile = dw_scratch(static_cast<size_t>(h_rows * cols));
          cpu_gemm_f32(x_t, dz_all, tile, cols, false, gemm);
          store_rows(tile, cols, h_rows, cols, p.w_dtype, out, V);
        }
      }
    }
  });
  if (direct) return;

  // dx = the partials summed in range order, row blocks in parallel (B H nv adds: cheap).
  const int64_t rows_per_task = std::max<int64_t>(1, (int64_t{1} << 16) / H);
  cpu::parallel_for(ceil_div(B, rows_per_task), options.num_threads, [&](int64_t task, int) {
    const int64_t b0 = task * rows_per_task, rows = std::min(rows_per_task, B - b0);
    float* sum = partials + b0 * H;  // range 0's rows, summed into in place
    for (int64_t range = 1; range < nv; ++range) {
      const float* part = partials + range * B * H + b0 * H;
      for (int64_t i = 0; i < rows * H; ++i) sum[i] += part[i];
    }
    store_rows(sum, H, rows, H, p.x_dtype, static_cast<char*>(dx) + b0 * H * x_size, H);
  });
}

}  // namespace tokamax
