// ragged_dot on CPU: the task loop that packs operands and feeds them to the micro-kernels.
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens), split into consecutive groups by group_sizes
//   K      contraction extent
//   N      output features
//   rows   sum(group_sizes) <= M; output rows past it are zero
//   tm, tn, tk, task_n   tile extents (from the work list, see cpu_tiling.h)
//   mr, nr               the micro-tile: mr rows x nr = NRV * L columns of accumulators
//   L      lanes of one vector of the accumulation type (f32: 16 on AVX-512, 8 on AVX2)
//   depth  K extent of the current block (<= tk); pairs = ceil(depth / 2) for bf16 pairs
//
// GotoBLAS/BLIS structure. A task owns output rows [m_start, m_end) of one group and columns
// [n_start, n_end); for each K block it
//   1. packs its lhs rows [rows, depth] into k-major micro-panels (L2/L3: reused by every
//      column of the task, so the transposition is paid once per K block, not per panel);
//   2. for each panel of tn columns packs rhs [depth, tn] into nr-wide strips (L2: reused by
//      every micro-panel of the task), widening bf16/f16 to f32 once per element (the GEMM
//      engine's pack.cc, ops/common/cpu_gemm/);
//   3. runs the micro-kernel over (micro-panel, strip) pairs: mr x NRV accumulator vectors stay
//      in registers for the whole depth; each k step loads NRV rhs vectors, broadcasts mr lhs
//      values and issues mr * NRV FMAs, so loads per FMA are (mr + NRV) / (mr * NRV)
//      (ops/common/cpu_gemm/micro_kernel.cc).
// The K block loop is outermost so that only one rhs panel is live per thread; the partial sums
// go straight to an f32 output (or to an f32 scratch that is rounded to bf16/f16 at the end,
// convert.cc). Variants of step 2-3: bf16 x bf16 with bf16_path=native_dot packs both
// operands as bf16 pairs for vdpbf16ps (bf16_kernel.cc); tasks of one micro-panel read rhs
// in place (no copy for a single use), and tasks of <= kCpuStreamRows rows stream it row by row
// (stream_kernel.cc); all of these in ops/common/cpu_gemm/.
#include "ops/ragged_dot/cpu_kernel.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/scratch.h"
#include "backends/cpu/simd_target.h"
#include "backends/cpu/thread_pool.h"
#include "ops/common/cpu_gemm/amx_layout.h"
#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/framework/errors.h"
#include "ops/ragged_dot/cpu_config.h"
#include "ops/ragged_dot/cpu_epilogue.h"
#include "ops/ragged_dot/cpu_int8_kernel.h"
#include "ops/ragged_dot/cpu_quantize_lhs.h"

namespace tokamax {
namespace {

constexpr size_t kAlignment = 64;  // a cache line; also the widest SIMD register (AVX-512)

size_t align_up(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

// Per-thread scratch that only grows. Pool threads are persistent, so after the first call a
// kernel launch allocates nothing: fresh multi-megabyte allocations would come from mmap and
// page-fault on first touch, a cost that shows up on every small call.
char* thread_scratch(size_t bytes) {
  thread_local cpu::ScratchBuffer buffer;
  return static_cast<char*>(buffer.get(bytes));
}

// Everything a task needs besides its coordinates; shared read-only by all threads.
struct Launch {
  const RaggedDotWorkList* work;
  CpuKernelOptions options;
  int64_t K, N, out_N;
  const char* lhs;  // [M, K] lhs_dtype
  const char* rhs;  // [G, K, N] rhs_dtype
  char* out;        // [M, out_N] out_dtype
  DType lhs_dtype, rhs_dtype, out_dtype;
  int64_t nr;           // micro-tile columns in accumulator lanes
  TaskScratch scratch;  // element counts, in the accumulation type
  // The epilogue (RaggedDotProblem): bias [G, N] in the accumulation type (empty: none), then
  // the activation or act(gate) * up.
  bool epilogue = false;
  const RaggedDotEpilogue* epilogue_f32 = nullptr;  // f32 accumulation
  const double* bias_f64 = nullptr;                 // f64 accumulation
  // Quantized rhs (codes of rhs_dtype): rhs_scale [G, scale_blocks, N] in f32, K blocks of
  // block_k rows; the packed panels hold the dequantized weights.
  const float* scale = nullptr;
  int64_t scale_blocks = 1, block_k = 1;
  // The int8 path (cpu_int8_kernel.h): lhs codes + 128 of the owned rows from codes_row0 on
  // [owned + mr, Kq] and their scales [owned, scale_blocks]; K blocks of int8_tk (a multiple of
  // 4 within one scale block).
  bool int8 = false;
  const uint8_t* lhs_codes = nullptr;
  const float* lhs_scales = nullptr;
  int64_t codes_row0 = 0, Kq = 0, int8_tk = 0;
  Activation activation = Activation::kNone;
  GateUp gate_up = GateUp::kNone;
  SituGlu situ;
};

// The source rows of one rhs panel: rows [k0, k0 + depth) x `cols` elements from column n0 of
// rhs_g (rows N apart, elements of elem_size bytes).
PrefetchPlan panel_rows(const char* rhs_g, size_t elem_size, int64_t N, int64_t k0, int64_t depth,
                        int64_t n0, int64_t cols) {
  const int64_t elem = static_cast<int64_t>(elem_size);
  PrefetchPlan plan;
  plan.base = rhs_g + (k0 * N + n0) * elem;
  plan.rows = depth;
  plan.stride = N * elem;
  plan.bytes = cols * elem;
  return plan;
}

// The source rows of the rhs panel a task packs after the one at (k0, n0): the next columns of
// this K block, or the task's first columns of the next block; past K, the first panel of
// then_g (the up half of [gate | up], which the task multiplies next), else nothing. rhs_g and
// then_g are the group's rhs from a column offset, elements of elem_size bytes, rows N apart.
PrefetchPlan next_panel(const char* rhs_g, size_t elem_size, int64_t K, int64_t N, int64_t tk,
                        int64_t tn, const RaggedDotTask& task, int64_t k0, int64_t n0,
                        const char* then_g) {
  const bool last_panel = n0 + tn >= task.n_end;
  const int64_t next_n0 = last_panel ? task.n_start : n0 + tn;
  int64_t next_k0 = last_panel ? k0 + tk : k0;
  if (next_k0 >= K) {
    if (then_g == nullptr) return {};
    rhs_g = then_g;
    next_k0 = 0;
  }
  return panel_rows(rhs_g, elem_size, N, next_k0, std::min(tk, K - next_k0), next_n0,
                    std::min(tn, task.n_end - next_n0));
}

void block_product(BlockArgs& args, bool f64) {
  const bool ok = f64 ? block_product_f64(args) : block_product_f32(args);
  if (!ok) {
    throw NotImplemented("cpu ragged_dot: no " + std::to_string(args.mr) + "x" +
                         std::to_string(args.nr_vectors) + " micro-kernel for this SIMD target");
  }
}

// The rhs of the columns a task multiplies after those from col_offset (the up half after the
// gate half of [gate | up]), for next_panel; nullptr when nothing follows.
const char* then_rhs(const Launch& launch, const RaggedDotTask& task, int64_t col_offset) {
  if (launch.gate_up == GateUp::kNone || col_offset != 0) return nullptr;
  const int64_t first = task.group * launch.K * launch.N + launch.out_N;
  return launch.rhs + first * static_cast<int64_t>(dtype_size(launch.rhs_dtype));
}

// acc [rows, cols] (row stride ldc) (+)= product [rows, cols] (row stride ld) * scale[column]:
// one scale block's products of fp8 codes, scaled as the dequantized weights would be.
void add_scaled_columns(const float* product, int64_t ld, int64_t rows, int64_t cols,
                        const float* scale, bool accumulate, float* acc, int64_t ldc) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* p = product + r * ld;
    float* a = acc + r * ldc;
    if (accumulate) {
      for (int64_t c = 0; c < cols; ++c) a[c] += p[c] * scale[c];
    } else {
      for (int64_t c = 0; c < cols; ++c) a[c] = p[c] * scale[c];
    }
  }
}

// Partial sums of the task's rows for rhs columns [task.n_start, task.n_end) + col_offset into
// acc [rows, ldc] (col_offset = out_N: the up half of [gate | up]).
template <typename Acc>
void compute_columns(const Launch& launch, const RaggedDotTask& task, int64_t col_offset,
                     Acc* lhs_block, Acc* rhs_panel, Acc* acc, int64_t ldc) {
  const RaggedDotWorkList& work = *launch.work;
  const CpuKernelOptions& options = launch.options;
  const int64_t K = launch.K, N = launch.N, nr = launch.nr, mr = options.mr;
  const int64_t rows = task.m_end - task.m_start, task_cols = task.n_end - task.n_start;
  constexpr bool f64 = std::is_same_v<Acc, double>;
  const size_t lhs_size = dtype_size(launch.lhs_dtype), rhs_size = dtype_size(launch.rhs_dtype);
  const char* lhs_rows = launch.lhs + task.m_start * K * lhs_size;
  // rhs[g] from its column col_offset on; its rows keep the stride N.
  const char* rhs_g = launch.rhs + (task.group * K * N + col_offset) * rhs_size;
  // A task of one micro-panel reads each rhs element once: packing would copy it for nothing.
  // Quantized codes are always packed: the pack dequantizes them.
  const bool quantized = launch.scale != nullptr;
  const bool in_place_rhs = !f64 && !quantized && options.engine == GemmEngine::kF32Fma &&
                            (!options.pack_rhs || rows <= mr);
  if (in_place_rhs && rows <= kCpuStreamRows) {
    StreamArgs args{};
    args.lhs = lhs_rows;
    args.lhs_dtype = launch.lhs_dtype;
    args.rows = rows;
    args.rhs = rhs_g + task.n_start * rhs_size;
    args.rhs_dtype = launch.rhs_dtype;
    args.ldb = N;
    args.K = K;
    args.cols = task_cols;
    args.out = reinterpret_cast<float*>(acc);
    args.ldc = ldc;
    if (!stream_rows_f32(args)) {
      throw NotImplemented("cpu ragged_dot: no streaming kernel for these dtypes");
    }
    return;
  }

  // fp8 weights on a bf16 engine: the codes decoded to bf16 (exact) and multiplied as they are;
  // each segment's products land in `product` and are added to acc times the segment's scale
  // row, so segments end at scale-block boundaries as well as at K blocks.
  const bool scaled = quantized && options.engine != GemmEngine::kF32Fma;
  thread_local cpu::ScratchBuffer product_buffer, decoded_buffer;
  float* product = nullptr;
  bf16* decoded = nullptr;
  if constexpr (!f64) {
    if (scaled) {
      product = static_cast<float*>(product_buffer.get(rows * work.tn * sizeof(float)));
      decoded = static_cast<bf16*>(decoded_buffer.get(work.tk * work.tn * sizeof(bf16)));
    }
  }
  for (int64_t k0 = 0; k0 < K;) {
    int64_t depth = std::min(work.tk - k0 % work.tk, K - k0);
    if (scaled) depth = std::min(depth, launch.block_k - k0 % launch.block_k);
    BlockArgs args{};
    args.lhs_block = lhs_block;
    args.rows = rows;
    args.depth = depth;
    args.ldc = scaled ? work.tn : ldc;
    args.accumulate = !scaled && k0 > 0;
    args.mr = options.mr;
    args.nr_vectors = options.nr_vectors;
    if (options.engine == GemmEngine::kAmxBf16) {
      pack_lhs_block_amx(reinterpret_cast<const bf16*>(lhs_rows) + k0, K, false, rows, depth,
                         reinterpret_cast<uint32_t*>(lhs_block));
    } else if (options.engine == GemmEngine::kBf16Dot) {
      pack_lhs_block_pairs(reinterpret_cast<const bf16*>(lhs_rows) + k0, K, rows, depth, mr,
                           reinterpret_cast<uint32_t*>(lhs_block));
    } else {
      pack_lhs_block(launch.lhs_dtype, lhs_rows + k0 * lhs_size, K, rows, depth, mr, lhs_block);
    }
    for (int64_t n0 = task.n_start; n0 < task.n_end; n0 += work.tn) {
      const int64_t cols = std::min(work.tn, task.n_end - n0);
      const char* rhs_block = rhs_g + (k0 * N + n0) * rhs_size;
      args.out = acc + (n0 - task.n_start);
      if (scaled) args.out = product;
      args.next_rhs = next_panel(rhs_g, rhs_size, K, N, work.tk, work.tn, task, k0, n0,
                                 then_rhs(launch, task, col_offset));
      if (options.engine != GemmEngine::kF32Fma) {
        // bf16 rhs as stored, or fp8 codes decoded into a dense [depth, cols] bf16 block.
        const bf16* rhs_bf16 = reinterpret_cast<const bf16*>(rhs_block);
        int64_t ld = N;
        if (scaled) {
          decode_f8e4m3_to_bf16(reinterpret_cast<const uint8_t*>(rhs_block), N, depth, cols,
                                decoded);
          rhs_bf16 = decoded;
          ld = cols;
        }
        args.rhs = rhs_panel;
        args.cols = cols;
        if (options.engine == GemmEngine::kAmxBf16) {
          pack_rhs_panel_amx(rhs_bf16, ld, false, depth, cols,
                             reinterpret_cast<uint32_t*>(rhs_panel));
          if (!block_product_amx_bf16(args)) {
            throw NotImplemented("cpu ragged_dot: the AMX tiles are not available");
          }
        } else {
          pack_rhs_panel_pairs(rhs_bf16, ld, depth, cols, nr,
                               reinterpret_cast<uint32_t*>(rhs_panel));
          if (!block_product_bf16(args))
            throw NotImplemented("cpu ragged_dot: no such bf16 micro-kernel");
        }
        if constexpr (!f64) {
          if (scaled) {
            const float* scale_row = launch.scale +
                                     (task.group * launch.scale_blocks + k0 / launch.block_k) * N +
                                     col_offset + n0;
            add_scaled_columns(product, work.tn, rows, cols, scale_row, k0 > 0,
                               acc + (n0 - task.n_start), ldc);
          }
        }
        continue;
      }
      int64_t packed_from = 0;  // columns [packed_from, cols) go through a packed panel
      if (in_place_rhs) {
        // Whole strips in place; the last partial strip is packed so nothing past N is read.
        packed_from = cols / nr * nr;
        if (packed_from > 0) {
          args.rhs = rhs_block;
          args.rhs_dtype = launch.rhs_dtype;
          args.rhs_packed = false;
          args.rhs_strip_stride = nr;
          args.ldb = N;
          args.cols = packed_from;
          block_product(args, f64);
        }
      }
      if (packed_from < cols) {
        if (quantized) {
          const float* scale_g =
              launch.scale + task.group * launch.scale_blocks * N + col_offset + n0;
          pack_rhs_panel_dequant(launch.rhs_dtype, rhs_block, N, depth, cols, nr, scale_g, N, k0,
                                 launch.block_k, reinterpret_cast<float*>(rhs_panel));
        } else {
          pack_rhs_panel(launch.rhs_dtype, rhs_block + packed_from * rhs_size, N, depth,
                         cols - packed_from, nr, rhs_panel);
        }
        args.rhs = rhs_panel;
        args.rhs_packed = true;
        args.rhs_strip_stride = depth * nr;
        args.ldb = nr;
        args.cols = cols - packed_from;
        args.out = acc + (n0 - task.n_start) + packed_from;
        block_product(args, f64);
      }
    }
    k0 += depth;
  }
}

// One panel of the int8 path: rhs columns [col, col + cols) of the group over every K block
// (packed per block into quads), into acc [rows, ldc]; each micro-tile's int32 sums become f32
// partial sums after every block. Each lhs micro-panel runs over all the panel's strips in turn:
// its [mr, depth] codes stay in L1 while the strips (too deep for L1 at the long int8 K blocks)
// stream from L2 either way. The micro-tiles prefetch into L2 the panel's next K block, and over
// the last block `then` (the panel the task multiplies next).
void panel_int8(const Launch& launch, const RaggedDotTask& task, int64_t col, int64_t cols,
                const PrefetchPlan& then, float* acc, int64_t ldc) {
  const int64_t K = launch.K, N = launch.N, tk = launch.int8_tk;
  // On AMX tiles a call covers a block of two 16-column strips and 32 rows, and the strips'
  // quads are padded to whole tiles.
  const bool tiles = launch.options.int8_tiles;
  const int mr = tiles ? kInt8AmxRows : launch.options.mr, nr = static_cast<int>(launch.nr);
  const int64_t strips_per_call = tiles ? kInt8AmxCols / kInt8AmxStrip : 1;
  const int64_t rows = task.m_end - task.m_start, strips = (cols + nr - 1) / nr;
  const int64_t max_strips = (launch.work->tn + nr - 1) / nr;
  const int64_t max_quads = tiles ? int8_amx_quads(tk) : (tk + 3) / 4;
  thread_local cpu::ScratchBuffer panel_buffer, sums_buffer;
  auto* panel =
      static_cast<int8_t*>(panel_buffer.get(static_cast<size_t>(max_strips * max_quads * nr * 4)));
  // Per strip: 128 * column sums, then the block's rhs scales (zero past the panel's columns).
  auto* sums = static_cast<int32_t*>(sums_buffer.get(static_cast<size_t>(max_strips * nr) * 8));
  float* scales = reinterpret_cast<float*>(sums + max_strips * nr);
  const int8_t* rhs_g = reinterpret_cast<const int8_t*>(launch.rhs) + task.group * K * N;
  const char* rhs_bytes = reinterpret_cast<const char*>(rhs_g);
  for (int64_t k0 = 0; k0 < K; k0 += tk) {
    const int64_t depth = std::min(tk, K - k0);
    const int64_t quads = tiles ? int8_amx_quads(depth) : (depth + 3) / 4;
    const int64_t block = k0 / launch.block_k;
    const float* scale_row = launch.scale + (task.group * launch.scale_blocks + block) * N + col;
    std::fill(sums, sums + strips * nr, 0);
    std::fill(scales, scales + strips * nr, 0.0f);
    std::copy(scale_row, scale_row + cols, scales);
    if (tiles) {
      pack_rhs_int8_amx(rhs_g + k0 * N + col, N, depth, cols, panel, sums);
    } else {
      pack_rhs_int8_quads(rhs_g + k0 * N + col, N, depth, cols, nr, panel, sums);
    }
    const int64_t next_k0 = k0 + tk;
    PrefetchCursor prefetch(
        next_k0 < K ? panel_rows(rhs_bytes, 1, N, next_k0, std::min(tk, K - next_k0), col, cols)
                    : then,
        (strips + strips_per_call - 1) / strips_per_call * ((rows + mr - 1) / mr));
    Int8TileArgs args;
    args.quads = quads;
    args.ld_lhs = launch.Kq;
    args.ld_scale = launch.scale_blocks;
    args.ldc = ldc;
    args.accumulate = k0 > 0;
    for (int64_t m0 = 0; m0 < rows; m0 += mr) {
      const int64_t row = task.m_start + m0 - launch.codes_row0;
      args.lhs = launch.lhs_codes + row * launch.Kq + k0;
      args.rows = static_cast<int>(std::min<int64_t>(mr, rows - m0));
      args.lhs_scale = launch.lhs_scales + row * launch.scale_blocks + block;
      for (int64_t s = 0; s < strips; s += strips_per_call) {
        args.rhs = panel + s * quads * nr * 4;
        args.colsum = sums + s * nr;
        args.rhs_scale = scales + s * nr;
        args.cols = static_cast<int>(std::min<int64_t>(strips_per_call * nr, cols - s * nr));
        args.out = acc + m0 * ldc + s * nr;
        args.prefetch = prefetch.take();
        if (tiles) {
          if (!int8_amx_block(args)) {
            throw NotImplemented("cpu ragged_dot: the AMX int8 tiles are not available");
          }
          continue;
        }
        if (!int8_tile(mr, nr, args)) {
          throw NotImplemented("cpu ragged_dot: no " + std::to_string(mr) + "x" +
                               std::to_string(nr) + " int8 micro-kernel on this CPU");
        }
      }
    }
  }
}

// A task of the int8 path, panel by panel: the gate half's panel, the up half's (with
// fuse_gateup_activation), then the epilogue and the store of those columns while their partial
// sums are still in L2. The lhs codes are shared by every panel (nothing is packed per task),
// so this order costs no re-packing, and each panel's codes are prefetched during the one
// before (only the task's first is not). acc and up are the partial sums [rows, ldc] (up:
// nullptr without gate/up); out_tile is the task's first output element.
void run_task_int8(const Launch& launch, const RaggedDotTask& task, float* acc, float* up,
                   int64_t ldc, bool in_place, char* out_tile) {
  const int64_t N = launch.N, tn = launch.work->tn, tk = launch.int8_tk;
  const int64_t rows = task.m_end - task.m_start;
  const size_t out_size = dtype_size(launch.out_dtype);
  const char* rhs_g = launch.rhs + task.group * launch.K * N;  // int8 codes: bytes
  const int64_t up_offset = launch.out_N;                      // the up half's first column in rhs
  const int64_t first_depth = std::min(tk, launch.K);
  for (int64_t n0 = task.n_start; n0 < task.n_end; n0 += tn) {
    const int64_t cols = std::min(tn, task.n_end - n0), c = n0 - task.n_start;
    const int64_t next_n0 = n0 + tn;
    const PrefetchPlan next_gate =
        next_n0 < task.n_end
            ? panel_rows(rhs_g, 1, N, 0, first_depth, next_n0, std::min(tn, task.n_end - next_n0))
            : PrefetchPlan{};
    if (up == nullptr) {
      panel_int8(launch, task, n0, cols, next_gate, acc + c, ldc);
    } else {
      const PrefetchPlan up_panel = panel_rows(rhs_g, 1, N, 0, first_depth, up_offset + n0, cols);
      panel_int8(launch, task, n0, cols, up_panel, acc + c, ldc);
      panel_int8(launch, task, up_offset + n0, cols, next_gate, up + c, ldc);
    }
    if (launch.epilogue) {
      for (int64_t r = 0; r < rows; ++r) {
        launch.epilogue_f32->row(task.group, n0, cols, acc + r * ldc + c,
                                 up != nullptr ? up + r * ldc + c : nullptr);
      }
    }
    if (!in_place) {
      store_rows(acc + c, ldc, rows, cols, launch.out_dtype, out_tile + c * out_size, launch.out_N);
    }
  }
}

// The epilogue of one row of the task, in place in `gate` (the row's partial sums; `up` holds
// the up half's with fuse_gateup_activation): + bias, then the activation or act(gate) * up.
void epilogue_row(const Launch& launch, const RaggedDotTask& task, float* gate, float* up) {
  launch.epilogue_f32->row(task.group, task.n_start, task.n_end - task.n_start, gate, up);
}

void epilogue_row(const Launch& launch, const RaggedDotTask& task, double* gate, double* up) {
  const int64_t cols = task.n_end - task.n_start;
  for (int64_t c = 0; c < cols; ++c) {
    double g = gate[c], u = up != nullptr ? up[c] : 0.0;
    if (launch.bias_f64 != nullptr) {
      const double* bias = launch.bias_f64 + task.group * launch.N + task.n_start;
      g += bias[c];
      if (up != nullptr) u += bias[launch.out_N + c];
    }
    gate[c] = launch.gate_up != GateUp::kNone ? apply_gate_up(launch.gate_up, launch.situ, g, u)
                                              : apply_activation(launch.activation, g);
  }
}

template <typename Acc>
void run_task(const Launch& launch, const RaggedDotTask& task) {
  const RaggedDotWorkList& work = *launch.work;
  const int64_t out_N = launch.out_N;
  const size_t out_size = dtype_size(launch.out_dtype);
  const int64_t rows = task.m_end - task.m_start, task_cols = task.n_end - task.n_start;
  char* out_tile = launch.out + (task.m_start * out_N + task.n_start) * out_size;
  if (task.group == kZeroRowsTask || (launch.K == 0 && !launch.epilogue)) {
    // +0.0 is all-zero bits in every float dtype, so zeroing is a memset per row.
    for (int64_t r = 0; r < rows; ++r)
      std::memset(out_tile + r * out_N * out_size, 0, task_cols * out_size);
    return;
  }
  constexpr bool f64 = std::is_same_v<Acc, double>;
  // Accumulate straight into the output when it has the accumulator's type and nothing follows
  // the product; otherwise into a scratch [tm, task_n] (twice: gate and up) that the epilogue
  // and the rounding to the output dtype read once, after the last K block.
  const bool in_place = !launch.epilogue && launch.out_dtype == (f64 ? DType::kF64 : DType::kF32);
  const TaskScratch& sizes = launch.scratch;
  char* scratch = thread_scratch(
      sizeof(Acc) * (align_up(sizes.lhs_block) + align_up(sizes.rhs_panel) + sizes.acc));
  Acc* lhs_block = reinterpret_cast<Acc*>(scratch);
  Acc* rhs_panel = lhs_block + align_up(sizes.lhs_block);
  Acc* acc = in_place ? reinterpret_cast<Acc*>(out_tile) : rhs_panel + align_up(sizes.rhs_panel);
  const int64_t ldc = in_place ? out_N : work.task_n;
  Acc* up = launch.gate_up != GateUp::kNone ? acc + work.tm * work.task_n : nullptr;
  if constexpr (!f64) {
    if (launch.int8) return run_task_int8(launch, task, acc, up, ldc, in_place, out_tile);
  }
  // The partial sums of rhs columns from col_offset on into dst (K = 0: zeros, which the
  // epilogue then sees).
  auto columns = [&](int64_t col_offset, Acc* dst) {
    if (launch.K == 0) {
      for (int64_t r = 0; r < rows; ++r)
        std::fill(dst + r * ldc, dst + r * ldc + task_cols, Acc(0));
      return;
    }
    compute_columns(launch, task, col_offset, lhs_block, rhs_panel, dst, ldc);
  };
  columns(0, acc);
  if (up != nullptr) columns(out_N, up);  // the up half of [gate | up]
  if (launch.epilogue) {
    for (int64_t r = 0; r < rows; ++r) {
      epilogue_row(launch, task, acc + r * ldc, up != nullptr ? up + r * ldc : nullptr);
    }
  }
  if (in_place) return;
  if constexpr (f64) {
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(out_tile + r * out_N * out_size, acc + r * ldc, task_cols * sizeof(double));
    }
  } else {
    store_rows(acc, ldc, rows, task_cols, launch.out_dtype, out_tile, out_N);
  }
}

void check_shape(const Tensor& tensor, const std::vector<int64_t>& dims, const char* name) {
  if (tensor.dims() != dims) {
    throw InvalidArgument(std::string("ragged_dot cpu kernel: ") + name + " is " +
                              tensor.spec().to_string() + ", which does not match the problem",
                          name);
  }
}

}  // namespace

void ragged_dot_cpu_kernel(const RaggedDotProblem& p, const RaggedDotWorkList& work,
                           const CpuKernelOptions& options, const Tensor& lhs, const Tensor& rhs,
                           Tensor& out, const Tensor* bias, const Tensor* scale) {
  check_shape(lhs, {p.M, p.K}, "lhs");
  check_shape(rhs, {p.G, p.K, p.N}, "rhs");
  check_shape(out, {p.M, p.out_N()}, "out");
  if (p.has_bias != (bias != nullptr)) {
    throw InvalidArgument("ragged_dot cpu kernel: rhs_bias given without the problem's, or missing",
                          "rhs_bias");
  }
  if (bias != nullptr) check_shape(*bias, {p.G, p.N}, "rhs_bias");
  const bool f64 = out.dtype() == DType::kF64;
  if (!f64 && (lhs.dtype() == DType::kF64 || rhs.dtype() == DType::kF64)) {
    throw NotImplemented("cpu ragged_dot: f64 inputs need an f64 output");
  }
  if (p.quantized() != (scale != nullptr)) {
    throw InvalidArgument(
        "ragged_dot cpu kernel: rhs_scale given without quantized rhs, or missing", "rhs_scale");
  }
  if (p.quantized() && f64) {
    throw NotImplemented("cpu ragged_dot: quantized rhs runs in f32 (no f64 output)");
  }
  if (p.quantized() && options.engine != GemmEngine::kF32Fma &&
      (p.rhs_dtype != DType::kF8E4M3 || p.lhs_dtype != DType::kBF16 || p.quantize_lhs)) {
    throw NotImplemented(
        "cpu ragged_dot: quantized rhs on native_dot or amx needs bf16 lhs and f8e4m3 rhs "
        "(decoded to bf16 exactly) without maybe_quantize_lhs");
  }
  Launch launch{};
  launch.work = &work;
  launch.options = options;
  launch.K = p.K;
  launch.N = p.N;
  launch.out_N = p.out_N();
  launch.epilogue = p.has_epilogue();
  launch.activation = p.activation;
  launch.gate_up = p.gate_up;
  launch.situ = p.situ;
  // The bias once in the accumulation type: G * N values, read by every row of its group.
  const RaggedDotEpilogue epilogue_f32(p, f64 ? nullptr : bias);
  launch.epilogue_f32 = &epilogue_f32;
  std::vector<double> bias_f64;
  if (bias != nullptr && f64) {
    bias_f64.resize(static_cast<size_t>(p.G * p.N));
    for (int64_t i = 0; i < p.G * p.N; ++i) bias_f64[i] = bias->get(i);
    launch.bias_f64 = bias_f64.data();
  }
  launch.lhs = static_cast<const char*>(lhs.raw());
  launch.rhs = static_cast<const char*>(rhs.raw());
  launch.out = static_cast<char*>(out.raw());
  launch.lhs_dtype = lhs.dtype();
  // Quantized weights: the scales once in f32; maybe_quantize_lhs: the owned rows of lhs as the
  // values s * q their products are taken of, once per call, then an f32 lhs like any other.
  // Grow-only across calls (thread_local): a fresh buffer would page-fault on every call.
  thread_local std::vector<float> scale_f32, lhs_dequantized;
  if (scale != nullptr) {
    scale_f32.resize(static_cast<size_t>(p.G * p.scale_blocks * p.N));
    for (size_t i = 0; i < scale_f32.size(); ++i) scale_f32[i] = static_cast<float>(scale->get(i));
    launch.scale = scale_f32.data();
    launch.scale_blocks = p.scale_blocks;
    launch.block_k = p.block_k();
  }
  thread_local std::vector<uint8_t> lhs_codes;
  thread_local std::vector<float> lhs_scales;
  if (options.int8 && p.K > 0) {
    if (!is_int8_problem(p)) {
      throw NotImplemented(
          "cpu ragged_dot: int8_path=vnni needs maybe_quantize_lhs with i8 rhs, per column or in "
          "scale blocks of a multiple of 4 rows");
    }
    if (options.int8_tiles ? !gemm_has_amx_int8() : !int8_vnni_available()) {
      throw NotImplemented(options.int8_tiles
                               ? "cpu ragged_dot: int8_path=amx needs a CPU with amx_int8 whose "
                                 "tiles Linux grants"
                               : "cpu ragged_dot: int8_path=vnni needs a CPU with avx512_vnni");
    }
    launch.int8 = true;
    launch.Kq = (p.K + 3) / 4 * 4;
    // K blocks: the config's tile_k as a multiple of 4 (K is padded to quads); with scale
    // blocks, one that divides the block, so that no K block straddles two scales.
    int64_t tk = std::max<int64_t>(4, std::min<int64_t>(work.tk, launch.Kq) / 4 * 4);
    if (p.scale_blocks > 1) {
      tk = std::min(tk, p.block_k());
      while (p.block_k() % tk != 0) tk -= 4;
    }
    launch.int8_tk = tk;
    // Codes + 128 of the owned rows, and mr rows of padding that the micro-kernel may read past
    // the last row. Nothing is filled: the padding's values never reach an output (columns
    // [K, Kq) meet the zero codes the rhs pack puts past K, and rows past a panel's are not
    // stored), and the quantization writes every owned code and scale (filling the buffer
    // first costs ~1% of a call).
    launch.codes_row0 = p.first_row();
    // The AMX tiles read whole 32-row blocks, and up to 63 bytes past a K block's end (codes
    // that meet zero quads), so one more row.
    const int64_t padding_rows = options.int8_tiles ? kInt8AmxRows + 1 : options.mr;
    lhs_codes.resize(static_cast<size_t>((p.owned_rows() + padding_rows) * launch.Kq));
    lhs_scales.resize(static_cast<size_t>(p.owned_rows() * p.scale_blocks));
    quantize_lhs_codes(p, lhs, options.num_threads, launch.Kq, lhs_codes.data(), lhs_scales.data());
    launch.lhs_codes = lhs_codes.data();
    launch.lhs_scales = lhs_scales.data();
  } else if (p.quantize_lhs && p.K > 0) {
    // The values s * q of every owned row (int8 or e4m3), then an f32 lhs like any other.
    lhs_dequantized.resize(static_cast<size_t>(p.M * p.K));
    quantize_lhs_values(p, lhs, options.num_threads, lhs_dequantized.data());
    launch.lhs = reinterpret_cast<const char*>(lhs_dequantized.data());
    launch.lhs_dtype = DType::kF32;
  }
  launch.rhs_dtype = rhs.dtype();
  launch.out_dtype = out.dtype();
  if (f64) {
    // The f64 path runs the first shape of the table in f64 lanes.
    const MicroKernelShape shape = micro_kernel_shapes(cpu::simd_f32_lanes())[0];
    launch.options.mr = shape.mr;
    launch.options.nr_vectors = shape.nr_vectors;
    launch.options.engine = GemmEngine::kF32Fma;
    launch.nr = int64_t{shape.nr_vectors} * cpu::simd_f64_lanes();
  } else if (options.int8 && options.int8_tiles) {
    launch.nr = kInt8AmxStrip;
  } else if (options.int8) {
    if (!has_int8_micro_kernel(options.mr, options.nr_vectors * 16)) {
      throw NotImplemented("cpu ragged_dot: no " + std::to_string(options.mr) + "x" +
                           std::to_string(options.nr_vectors * 16) +
                           " int8 micro-kernel (8x48 and 6x64)");
    }
    launch.nr = int64_t{options.nr_vectors} * 16;
  } else {
    if (!has_micro_kernel_shape(cpu::simd_f32_lanes(), options.mr, options.nr_vectors)) {
      throw NotImplemented("cpu ragged_dot: no " + std::to_string(options.mr) + "x" +
                           std::to_string(options.nr_vectors) + " micro-kernel for the " +
                           cpu::simd_target_name() + " target");
    }
    launch.nr = int64_t{options.nr_vectors} * cpu::simd_f32_lanes();
  }
  const GemmEngine engine = launch.options.engine;
  if (engine == GemmEngine::kBf16Dot && !gemm_has_native_bf16()) {
    throw NotImplemented("cpu ragged_dot: native_dot needs a CPU with avx512_bf16");
  }
  if (engine == GemmEngine::kAmxBf16 && !gemm_has_amx_bf16()) {
    throw NotImplemented("cpu ragged_dot: amx needs a CPU with amx_bf16 whose tiles Linux grants");
  }
  if (engine != GemmEngine::kF32Fma &&
      (lhs.dtype() != DType::kBF16 || (rhs.dtype() != DType::kBF16 && !p.quantized()))) {
    throw NotImplemented("cpu ragged_dot: a bf16 engine needs bf16 lhs and bf16 or fp8 rhs");
  }
  launch.scratch =
      task_scratch(work, launch.options.mr, launch.nr,
                   launch.epilogue || out.dtype() != (f64 ? DType::kF64 : DType::kF32));
  if (engine == GemmEngine::kAmxBf16) {
    // The tile layouts: 16-row panels and 16-column strips, K pairs padded to whole tiles.
    launch.scratch.lhs_block = round_up(work.tm, kAmxTileRows) * amx_pairs(work.tk);
    launch.scratch.rhs_panel = round_up(work.tn, kAmxTileCols) * amx_pairs(work.tk);
  }
  if (p.gate_up != GateUp::kNone) launch.scratch.acc *= 2;  // gate and up
  cpu::parallel_for(static_cast<int64_t>(work.tasks.size()), options.num_threads,
                    [&](int64_t task, int /*thread*/) {
                      const RaggedDotTask& t = work.tasks[static_cast<size_t>(task)];
                      if (f64) {
                        run_task<double>(launch, t);
                      } else {
                        run_task<float>(launch, t);
                      }
                    });
}

}  // namespace tokamax
