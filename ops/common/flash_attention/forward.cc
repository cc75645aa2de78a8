// The flash-attention core (every attention op's CPU kernel): the flash-attention kernel body.
//
// Dimensions.
//   B      flattened batch;  T, t  query and key/value positions
//   H, h   query and key/value heads, g = H / h; kv head i serves q heads [g*i, g*i+g)
//   D, d   q/k and v head dimensions
//   bq, bkv  query rows per task and head (block_q), keys per inner block (block_kv)
//   G_t    q heads per task: g with group_heads, else 1
//   M      rows of one task's tiles: G_t * bq, head-major (row m = head_j * rows + rr)
//   n      keys of the current block (<= bkv)
//
// One task = (batch b, G_t q heads sharing kv head i, a tile of bq query rows). It streams the
// visible keys in blocks of bkv: S = Q K^T [M, n], then per row scale, bias, soft cap and mask,
// the block maximum and exp (cpu_softmax), the online-softmax merge (rescaling that row's
// accumulators), and O += P V [M, d]. Masks by causal, local window and sequence lengths are an
// interval of keys per row, so blocks that no row of the task can see are never computed; a
// task's rows see the union of their intervals.
//
// This file holds the driver (tasks, kv-head chunks and their packing) and the rows layout; the
// transposed layout (kv_packing=transposed: S^T = K Q^T, softmax down columns) is the task body
// in forward_transposed.cc.
//
// The two GEMMs run the GEMM engine's register-blocked micro-kernels (ops/common/cpu_gemm/).
// kv_packing=shared: K^T and V of a chunk of kv heads are packed once into micro-kernel panels
// (pack.h) and the Q tile once per task, so a block costs only the packing of P; the f32 Q
// tile carries the logits scale. kv_packing=per_block: every block goes through cpu_gemm_f32
// with K read in place as the transposed operand (row stride h*D) and V in place (row stride
// h*d), which repacks K, V and Q on every call. native_dot (bf16): vdpbf16ps on bf16 pairs, P
// rounded to bf16.
#include "ops/common/flash_attention/forward.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "backends/cpu/simd_target.h"
#include "backends/cpu/thread_pool.h"
#include "ops/common/cpu_gemm/gemm.h"
#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/common/cpu_softmax.h"
#include "ops/common/flash_attention/forward_task.h"
#include "ops/common/flash_attention/pack.h"
#include "ops/common/online_softmax.h"
#include "ops/framework/errors.h"

namespace tokamax {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Per-thread scratch: grows to the largest task seen, then is reused without allocation.
struct Scratch {
  std::vector<float> q32;                   // [M, D] Q tile (convert_f32 path)
  std::vector<bf16> q16;                    // [M, D] Q tile (native path)
  std::vector<float> s;                     // [M, bkv] logits, then P
  std::vector<bf16> p16;                    // [M, bkv] P rounded to bf16 (native path)
  std::vector<float> o;                     // [M, d] unnormalised output accumulators
  std::vector<OnlineSoftmax<float>> state;  // [M]
  std::vector<int64_t> lo, hi;              // [bq] visible key interval per query row
  std::vector<float> q_packed;              // packed lhs block of the Q tile [ceil(M / mr)][D][mr]
  std::vector<float> p_packed;              // packed lhs block of P [ceil(M / mr)][n][mr]
  std::vector<char> kv_staging;             // a paged K or V block crossing pages (per_block)
};

}  // namespace

// The transposed layout's micro-tile: its lhs rows are keys (any block length) and d (fixed),
// its columns the task's M query rows, so the shape that pads d up to whole panels and M up to
// whole strips least wins. Shapes of fewer than 24 accumulators are left out: too few
// independent FMA chains to hide the latency.
MicroKernelShape attention_transposed_shape(int lanes, int64_t M, int64_t d) {
  MicroKernelShape best = micro_kernel_shapes(lanes)[0];
  int64_t best_cost = -1;
  for (const MicroKernelShape& shape : micro_kernel_shapes(lanes)) {
    if (shape.mr * shape.nr_vectors < 24 && best_cost >= 0) continue;
    const int64_t cost = round_up(d, shape.mr) * round_up(M, int64_t{shape.nr_vectors} * lanes);
    if (best_cost < 0 || cost < best_cost) {
      best = shape;
      best_cost = cost;
    }
  }
  return best;
}

void attention_block_product(const BlockArgs& args, bool native) {
  if (!(native ? block_product_bf16(args) : block_product_f32(args))) {
    throw NotImplemented("cpu dot_product_attention: no micro-kernel for this shape");
  }
}

// One task: rows [r0, r0 + rows) of q heads [hq0, hq0 + heads) of batch b.
void run_task_rows(const TaskContext& ctx, int64_t b, int64_t hq0, int64_t heads, int64_t r0,
                   int64_t rows) {
  const FlashAttentionProblem& p = ctx.p;
  const int64_t D = p.D, d = p.d, h = p.h;
  const int64_t i = hq0 / p.groups();
  const bool shared = ctx.packed != nullptr;
  const int64_t bkv =
      shared ? ctx.bkv : std::min<int64_t>(ctx.o.block_kv, std::max<int64_t>(p.t, 1));
  const int64_t M = heads * rows;
  const bool native = ctx.o.engine != GemmEngine::kF32Fma;
  const size_t x_size = dtype_size(p.dtype);
  thread_local Scratch scratch;
  Scratch& sc = scratch;
  grow_scratch(sc.s, static_cast<size_t>(M * bkv));
  grow_scratch(sc.o, static_cast<size_t>(M * d));
  grow_scratch(sc.state, static_cast<size_t>(M));
  grow_scratch(sc.lo, static_cast<size_t>(rows));
  grow_scratch(sc.hi, static_cast<size_t>(rows));

  // The keys the tile's rows can see; blocks outside their union are never computed.
  int64_t kv_lo = p.t, kv_hi = 0;
  for (int64_t rr = 0; rr < rows; ++rr) {
    const auto [lo, hi] = p.key_range(b, r0 + rr);
    sc.lo[rr] = lo;
    sc.hi[rr] = hi;
    if (lo < hi) {
      kv_lo = std::min(kv_lo, lo);
      kv_hi = std::max(kv_hi, hi);
    }
  }
  std::fill(sc.o.begin(), sc.o.begin() + M * d, 0.0f);
  // A sink is one more logit of the row with no value: the state starts from it.
  for (int64_t m = 0; m < M; ++m) {
    sc.state[m] = p.sinks.empty() ? OnlineSoftmax<float>{}
                                  : OnlineSoftmax<float>{p.sinks[hq0 + m / rows], 1.0f};
  }

  // Gather the Q tile [M, D] (rows of G_t heads are D apart in q; one contiguous operand lets a
  // single GEMM serve every head of the group).
  GemmOperand q_tile;
  q_tile.ld = D;
  if (native) {
    grow_scratch(sc.q16, static_cast<size_t>(M * D));
    for (int64_t jh = 0; jh < heads; ++jh) {
      for (int64_t rr = 0; rr < rows; ++rr) {
        const bf16* src = static_cast<const bf16*>(ctx.q) + p.q_at(b, r0 + rr, hq0 + jh);
        std::memcpy(&sc.q16[(jh * rows + rr) * D], src, D * sizeof(bf16));
      }
    }
    q_tile.dtype = DType::kBF16;
    q_tile.data = sc.q16.data();
  } else {
    grow_scratch(sc.q32, static_cast<size_t>(M * D));
    const float q_scale = static_cast<float>(p.logits_scale);
    for (int64_t jh = 0; jh < heads; ++jh) {
      for (int64_t rr = 0; rr < rows; ++rr) {
        const int64_t at = p.q_at(b, r0 + rr, hq0 + jh);
        float* dst = &sc.q32[(jh * rows + rr) * D];
        // The f32 tile carries logits_scale (one rounding of scale * q, within the error
        // model's allowance for the scale), which saves a pass over every row of S.
        if (p.dtype == DType::kF32) {
          const float* src = static_cast<const float*>(ctx.q) + at;
          for (int64_t x = 0; x < D; ++x) dst[x] = q_scale * src[x];
        } else {
          for (int64_t x = 0; x < D; ++x) dst[x] = q_scale * attention_load(p.dtype, ctx.q, at + x);
        }
      }
    }
    q_tile.dtype = DType::kF32;
    q_tile.data = sc.q32.data();
  }
  if (native) grow_scratch(sc.p16, static_cast<size_t>(M * bkv));
  // Shared path: the Q tile is packed once for every kv block (cpu_gemm_f32 would repack it,
  // and K and V, on every call).
  // ctx.mr is 0 without the shared path (nothing is packed into micro-panels then).
  const int64_t mr = ctx.mr, panels_rows = mr > 0 ? (M + mr - 1) / mr * mr : 0;
  const float* k_panels = nullptr;
  const float* v_panels = nullptr;
  if (shared) {
    const int64_t q_depth = native ? (D + 1) / 2 : D;
    grow_scratch(sc.q_packed, static_cast<size_t>(panels_rows * q_depth));
    grow_scratch(sc.p_packed, static_cast<size_t>(panels_rows * (native ? bkv / 2 : bkv)));
    if (native) {
      pack_lhs_block_pairs(sc.q16.data(), D, M, D, mr,
                           reinterpret_cast<uint32_t*>(sc.q_packed.data()));
    } else {
      pack_lhs_block(DType::kF32, sc.q32.data(), D, M, D, mr, sc.q_packed.data());
    }
    const float* head = ctx.packed + ((b * h + i) - ctx.chunk_first) * ctx.kv_head_floats;
    k_panels = head;
    v_panels = head + ctx.v_offset;
  }

  CpuGemmOptions gemm;
  gemm.engine = ctx.o.engine;
  const float scale = static_cast<float>(p.logits_scale);
  const float cap = static_cast<float>(p.logits_soft_cap);
  // The f32 Q tile carries the logits scale. The bf16 one cannot (it is the inputs' bits): a
  // positive scale goes into the exponent (exp(scale * s - scale * max)) unless a bias or soft
  // cap must see the scaled logits first, which then takes a pass over S.
  const bool scale_rows = native && (ctx.bias || cap > 0.0f || !(scale > 0.0f) || p.bf16_logits);
  const float exp_scale = native && !scale_rows ? scale : 1.0f;

  // Shared panels are cut on a fixed grid of bkv keys; keys of a block before kv_lo are masked
  // like any other invisible key.
  const int64_t j_start = shared ? kv_lo / bkv * bkv : kv_lo;
  for (int64_t j0 = j_start; j0 < kv_hi; j0 += bkv) {
    const int64_t n = std::min(bkv, (shared ? p.t : kv_hi) - j0);
    // Keys past the tile's last visible one (the shared grid's last block of a causal tile)
    // need no logits: S is computed for n_used columns, and the f32 P V stops there too
    // (the bf16-pair kernel derives its strip stride from the depth, so it keeps n; the row
    // loop below sets P to 0 past each row's visible keys either way).
    const int64_t n_used = std::min(n, kv_hi - j0);
    const int64_t pv_depth = native ? n : n_used;
    // Skip blocks no row sees (a local window narrower than the tile's spread of rows).
    bool any = false;
    for (int64_t rr = 0; rr < rows && !any; ++rr) any = sc.lo[rr] < j0 + n && sc.hi[rr] > j0;
    const KeyBlock key_block = any ? p.key_block(b, r0, rows, j0, n) : KeyBlock::kEmpty;
    if (key_block == KeyBlock::kEmpty) continue;

    // S[M, n] = Q K^T: K's rows j0.. of head i, stored [n, D] with row stride h*D.
    if (shared) {
      BlockArgs args{};
      args.lhs_block = sc.q_packed.data();
      args.rows = M;
      args.rhs = k_panels + (j0 / ctx.nr) * (native ? (D + 1) / 2 : D) * ctx.nr;
      args.rhs_dtype = DType::kF32;
      args.rhs_packed = true;
      args.rhs_strip_stride = D * ctx.nr;
      args.ldb = ctx.nr;
      args.cols = n_used;
      args.depth = D;
      args.out = sc.s.data();
      args.ldc = bkv;
      args.accumulate = false;
      args.mr = ctx.mr;
      args.nr_vectors = ctx.nr_vectors;
      attention_block_product(args, native);
    } else {
      const KvRows rows_k = kv_rows(p, ctx.k, /*value=*/false, b, i, j0, n, sc.kv_staging);
      GemmOperand k_t;
      k_t.dtype = p.dtype;
      k_t.data = rows_k.data;
      k_t.ld = rows_k.ld;
      k_t.transposed = true;
      cpu_gemm_f32(q_tile, k_t, M, n, D, sc.s.data(), bkv, /*accumulate=*/false, gemm);
    }

    for (int64_t jh = 0; jh < heads; ++jh) {
      const int64_t hq = hq0 + jh;
      for (int64_t rr = 0; rr < rows; ++rr) {
        const int64_t m = jh * rows + rr, r = r0 + rr;
        float* s = &sc.s[m * bkv];
        // The row's visible part of this block, [c_lo, c_hi); the rest is -inf.
        const int64_t c_lo = std::clamp<int64_t>(sc.lo[rr] - j0, 0, n);
        const int64_t c_hi = std::clamp<int64_t>(sc.hi[rr] - j0, c_lo, n);
        std::fill(s, s + c_lo, kNegInf);
        std::fill(s + c_hi, s + n, kNegInf);
        if (c_lo < c_hi) {
          if (scale_rows) cpu_scale_row(s + c_lo, c_hi - c_lo, scale);
          if (ctx.bias) {
            add_bias_row(p.bias->dtype, ctx.bias, ctx.bias_at.offset(b, hq, r, j0),
                         ctx.bias_at.stride_t, c_lo, c_hi, s);
          }
          if (cap > 0.0f) cpu_soft_cap_row(s + c_lo, c_hi - c_lo, cap);
          if (p.bf16_logits) round_row_to_bf16(s + c_lo, c_hi - c_lo);
          if (key_block == KeyBlock::kScattered) p.key_mask->mask_row(b, hq, r, j0, c_lo, c_hi, s);
          if (ctx.mask) {
            const bool* mask_row = ctx.mask + ctx.mask_at.offset(b, hq, r, j0);
            for (int64_t c = c_lo; c < c_hi; ++c) {
              if (!mask_row[c * ctx.mask_at.stride_t]) s[c] = kNegInf;
            }
          }
        }
        // Exponentiate against the new running maximum directly, so P needs no second rescale;
        // the row's accumulators are rescaled by exp(old max - new max) before P V adds to them.
        OnlineSoftmax<float>& state = sc.state[m];
        const float target = std::max(state.max, exp_scale * cpu_row_max(s, n));
        const float block_sum = cpu_exp_shift_sum(s, n, target, exp_scale);
        if (ctx.dropout) {
          const bool* keep = ctx.dropout + ctx.dropout_at.offset(b, hq, r, j0);
          for (int64_t c = c_lo; c < c_hi; ++c) {
            s[c] = keep[c * ctx.dropout_at.stride_t] ? s[c] * ctx.dropout_scale : 0.0f;
          }
        }
        const float rescale = state.merge(target, block_sum);
        if (rescale != 1.0f) cpu_scale_row(&sc.o[m * d], d, rescale);
      }
    }

    // O[M, d] += P V: V's rows j0.. of head i, stored [n, d] with row stride h*d.
    if (shared) {
      if (native) {
        pack_p_pairs_rounded(sc.s.data(), bkv, M, n, mr, sc.p16.data(),
                             reinterpret_cast<uint32_t*>(sc.p_packed.data()));
      } else {
        pack_lhs_block(DType::kF32, sc.s.data(), bkv, M, pv_depth, mr, sc.p_packed.data());
      }
      const int64_t d_strips = (d + ctx.nr - 1) / ctx.nr;
      BlockArgs args{};
      args.lhs_block = sc.p_packed.data();
      args.rows = M;
      args.rhs = v_panels + (j0 / bkv) * d_strips * (native ? bkv / 2 : bkv) * ctx.nr;
      args.rhs_dtype = DType::kF32;
      args.rhs_packed = true;
      args.rhs_strip_stride = n * ctx.nr;
      args.ldb = ctx.nr;
      args.cols = d;
      args.depth = pv_depth;
      args.out = sc.o.data();
      args.ldc = d;
      args.accumulate = true;
      args.mr = ctx.mr;
      args.nr_vectors = ctx.nr_vectors;
      attention_block_product(args, native);
      continue;
    }
    GemmOperand p_tile, v_blk;
    p_tile.ld = bkv;
    if (native) {
      for (int64_t m = 0; m < M; ++m) {
        for (int64_t c = 0; c < n; ++c) sc.p16[m * bkv + c] = float_to_bf16(sc.s[m * bkv + c]);
      }
      p_tile.dtype = DType::kBF16;
      p_tile.data = sc.p16.data();
    } else {
      p_tile.dtype = DType::kF32;
      p_tile.data = sc.s.data();
    }
    const KvRows rows_v = kv_rows(p, ctx.v, /*value=*/true, b, i, j0, n, sc.kv_staging);
    v_blk.dtype = p.dtype;
    v_blk.data = rows_v.data;
    v_blk.ld = rows_v.ld;
    cpu_gemm_f32(p_tile, v_blk, M, d, n, sc.o.data(), d, /*accumulate=*/true, gemm);
  }

  // Normalise (unless normalize_output is false) and store; rows without a visible key have
  // sum 0 and come out as zeros. The rows
  // of one head are out_stride() apart in out.
  for (int64_t m = 0; m < M; ++m) {
    const float sum = sc.state[m].sum;
    cpu_scale_row(&sc.o[m * d], d, sum > 0.0f ? (p.normalize_output ? 1.0f / sum : 1.0f) : 0.0f);
  }
  store_task_stats(ctx, b, hq0, heads, r0, rows, [&](int64_t m) {
    return std::array<float, 3>{sc.state[m].max, sc.state[m].sum, sc.state[m].max};
  });
  for (int64_t jh = 0; jh < heads; ++jh) {
    const int64_t at = p.out_at(b, r0, hq0 + jh);
    store_rows(&sc.o[jh * rows * d], d, rows, d, p.dtype,
               static_cast<char*>(ctx.out) + at * static_cast<int64_t>(x_size), p.out_stride());
  }
}

void flash_attention_cpu(const FlashAttentionProblem& p, const CpuAttentionKernelOptions& options,
                         const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* bias,
                         const Tensor* mask, Tensor& out, Tensor* lse, const Tensor* dropout_mask,
                         Tensor* row_max) {
  if (p.dtype != DType::kF32 && p.dtype != DType::kBF16 && p.dtype != DType::kF16) {
    throw NotImplemented("cpu dot_product_attention: " + std::string(dtype_name(p.dtype)) +
                         " inputs; the kernel runs f32, bf16 and f16");
  }
  if (p.B == 0 || p.T == 0 || p.H == 0 || p.d == 0) return;
  TaskContext ctx{p,
                  options,
                  q.raw(),
                  k.raw(),
                  v.raw(),
                  bias ? bias->raw() : nullptr,
                  mask ? mask->data<bool>() : nullptr,
                  out.raw(),
                  {},
                  {},
                  nullptr,
                  0,
                  0,
                  0,
                  0,
                  0,
                  0,
                  0};
  if (bias) ctx.bias_at = p.bias_layout();
  if (mask) ctx.mask_at = p.mask_layout();
  if (dropout_mask) {
    ctx.dropout = dropout_mask->data<bool>();
    ctx.dropout_at = p.dropout_layout();
    ctx.dropout_scale = static_cast<float>(p.dropout_scale());
  }
  if (lse) ctx.lse = lse->data<float>();
  if (row_max) ctx.row_max = row_max->data<float>();
  const int64_t heads = options.group_heads ? p.groups() : 1;
  const int64_t bq = std::clamp<int64_t>(options.block_q, 1, p.T);
  const int64_t nT = (p.T + bq - 1) / bq;
  const int64_t head_tasks = p.H / heads;
  if (!options.shared_kv_packing) {
    const int64_t per_tile = p.B * head_tasks;
    // Late query tiles first: under causal masks they see the most keys, and handing out the
    // costly tasks first lets the cheap ones fill in at the end.
    cpu::parallel_for(nT * per_tile, options.num_threads, [&](int64_t task, int) {
      const int64_t tile = nT - 1 - task / per_tile;
      const int64_t b = (task % per_tile) / head_tasks, hq0 = (task % head_tasks) * heads;
      const int64_t r0 = tile * bq;
      run_task_rows(ctx, b, hq0, heads, r0, std::min(bq, p.T - r0));
    });
    return;
  }

  // Shared packing: K and V of a chunk of kv heads are packed once (in parallel), then every
  // task of those heads reads the panels. A chunk holds just enough kv heads to give each
  // thread several tasks, so the packed copy stays O(t * (D + d)) per kv head in flight.
  // Rows layout: K^T as rhs strips and V as rhs panels per block, of the first (widest)
  // micro-tile. Transposed layout: K as lhs panels and V^T as lhs panels per block, of the
  // micro-tile that wastes least on d rows and M columns (attention_transposed_shape).
  const bool transposed = options.transposed;
  const bool native = options.engine != GemmEngine::kF32Fma;
  if (options.engine == GemmEngine::kAmxBf16 && options.shared_kv_packing) {
    throw NotImplemented("cpu dot_product_attention: amx runs kv_packing=per_block only");
  }
  const int lanes = cpu::simd_f32_lanes();
  const MicroKernelShape shape =
      transposed
          ? attention_transposed_shape(lanes, std::min<int64_t>(heads * bq, heads * p.T), p.d)
          : micro_kernel_shapes(lanes)[0];
  ctx.mr = shape.mr;
  ctx.nr_vectors = shape.nr_vectors;
  ctx.nr = int64_t{shape.nr_vectors} * lanes;
  // Blocks start on whole strips of K^T (rows layout) or whole panels of K (transposed).
  const int64_t grain = transposed ? ctx.mr : ctx.nr;
  const int64_t t_pad = std::max<int64_t>(round_up(std::max<int64_t>(p.t, 1), grain), grain);
  ctx.bkv = std::min(round_up(std::max<int64_t>(options.block_kv, 1), grain), t_pad);
  if (native && ctx.bkv % 2) ctx.bkv += grain;  // whole bf16 pairs per block
  const int64_t k_words = native ? (p.D + 1) / 2 : p.D;
  const int64_t k_floats = t_pad * k_words;
  const int64_t v_width = transposed ? ctx.mr : ctx.nr;  // V panels: rhs strips or V^T panels
  const int64_t v_floats = ceil_div(std::max<int64_t>(p.t, 1), ctx.bkv) * ceil_div(p.d, v_width) *
                           (native ? ctx.bkv / 2 : ctx.bkv) * v_width;
  ctx.v_offset = round_up(k_floats, 16);
  ctx.kv_head_floats = ctx.v_offset + round_up(v_floats, 16);
  const int64_t kv_heads = p.B * p.h, groups_per_kv = p.groups() / heads;
  const int64_t tasks_per_kv = groups_per_kv * nT;
  const int threads = cpu::thread_pool().threads_for(kv_heads * tasks_per_kv, options.num_threads);
  // At least 32 tasks per thread in a chunk: each chunk ends in a barrier, and with few tasks
  // per thread the last round leaves threads idle (alphafold: 3 tiles per kv head, 1536 kv
  // heads). The packed copy is capped at 32 MiB per chunk unless one kv head needs more. The
  // kv heads are then spread evenly over the chunks (4 heads in chunks of 3 would leave a last
  // chunk of 1, with a third of the tasks per thread).
  int64_t chunk = std::clamp<int64_t>(ceil_div(32 * int64_t{threads}, tasks_per_kv), 1, kv_heads);
  chunk = std::max<int64_t>(1, std::min(chunk, (int64_t{1} << 23) / ctx.kv_head_floats));
  chunk = ceil_div(kv_heads, ceil_div(kv_heads, chunk));
  std::unique_ptr<float, decltype(&std::free)> buffer(
      static_cast<float*>(
          std::aligned_alloc(64, static_cast<size_t>(chunk * ctx.kv_head_floats) * sizeof(float))),
      &std::free);
  if (!buffer) throw std::bad_alloc();
  ctx.packed = buffer.get();
  for (int64_t first = 0; first < kv_heads; first += chunk) {
    const int64_t count = std::min(chunk, kv_heads - first);
    ctx.chunk_first = first;
    cpu::parallel_for(2 * count, options.num_threads, [&](int64_t task, int) {
      const int64_t kvh = first + task / 2;
      float* head = buffer.get() + (kvh - first) * ctx.kv_head_floats;
      if (task % 2 == 1) {
        pack_v(p, ctx.v, kvh / p.h, kvh % p.h, v_width, ctx.bkv, native, head + ctx.v_offset);
      } else if (transposed) {
        pack_k_panels(p, ctx.k, kvh / p.h, kvh % p.h, ctx.mr, native, head);
      } else {
        pack_k(p, ctx.k, kvh / p.h, kvh % p.h, ctx.nr, native, head);
      }
    });
    const int64_t per_tile = count * groups_per_kv;
    cpu::parallel_for(nT * per_tile, options.num_threads, [&](int64_t task, int) {
      const int64_t tile = nT - 1 - task / per_tile;
      const int64_t kvh = first + (task % per_tile) / groups_per_kv;
      const int64_t b = kvh / p.h, i = kvh % p.h;
      const int64_t hq0 = i * p.groups() + (task % groups_per_kv) * heads;
      const int64_t r0 = tile * bq;
      if (transposed) {
        run_task_transposed(ctx, b, hq0, heads, r0, std::min(bq, p.T - r0));
      } else {
        run_task_rows(ctx, b, hq0, heads, r0, std::min(bq, p.T - r0));
      }
    });
  }
}

}  // namespace tokamax
