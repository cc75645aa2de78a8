// The flash-attention core (every attention op's CPU kernel): the transposed task body
// (kv_packing=transposed).
//
// Dimensions.
//   T, t   query and key/value positions;  H, h  query and key/value heads
//   D, d   q/k and v head dimensions
//   M      columns of one task: heads * rows, head-major (column m = head_j * rows + rr)
//   Mp     M rounded up to whole strips of nr columns (pad columns are computed and dropped)
//   n      keys of the current block (<= bkv);  mr, nr  the micro-tile
//
// The task of the rows layout (forward.cc) with every tile transposed: S^T [n, Mp] = K Q^T
// has one column per query row, so the online softmax runs down the columns with whole vectors
// of queries (vertical max and sum: no horizontal reductions, no call per row), and P^T is
// already the rhs of O^T [d, Mp] += V^T P^T: S^T is computed strip-major ([n, nr] slabs, the
// micro-kernels' packed rhs layout), so P^T is read in place (f32) or rounded into bf16 pairs,
// where the rows layout packs P into lhs micro-panels every block. K (as lhs panels over all
// of t) and V^T (as lhs panels per block) are packed once per kv head by the driver; the Q tile
// is packed once per task as rhs strips. O^T is transposed back once, when the task stores it.
#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <vector>

#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/common/cpu_softmax.h"
#include "ops/common/flash_attention/forward_task.h"
#include "ops/common/flash_attention/pack.h"
#include "ops/framework/errors.h"

namespace tokamax {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int64_t kStoreGroup = 16;  // rows of O^T transposed together on the way out

// Per-thread scratch: grows to the largest task seen, then is reused without allocation.
struct Scratch {
  std::vector<float> q32;          // [M, D] Q tile, scaled (convert_f32 path)
  std::vector<bf16> q16;           // [M, D] Q tile (native path)
  std::vector<float> q_packed;     // Q^T as rhs strips [Mp / nr][D (pairs: D / 2)][nr]
  std::vector<float> st;           // [Mp / nr][bkv][nr] S^T, then P^T, strip-major
  std::vector<bf16> rounded;       // [bkv, nr] a slab of P^T rounded to bf16 (fallback)
  std::vector<uint32_t> pt_pairs;  // P^T as bf16-pair rhs strips [Mp / nr][bkv / 2][nr]
  std::vector<float> ot;           // [d, Mp] unnormalised O^T
  std::vector<float> o_rows;       // [ceil(d / 16)][Mp][16] O^T transposed back
  std::vector<float> run_max, run_sum, factor;  // [Mp] per column
  std::vector<float> true_max;  // [Mp] the largest scaled logit (unnormalized or row_max only)
  std::vector<int32_t> lo, hi;  // [Mp] visible keys [lo, hi) per column
  std::vector<float> holes;     // [bkv] one row's key-mask holes (-inf) in a block
};

}  // namespace

void run_task_transposed(const TaskContext& ctx, int64_t b, int64_t hq0, int64_t heads, int64_t r0,
                         int64_t rows) {
  const FlashAttentionProblem& p = ctx.p;
  const int64_t D = p.D, d = p.d, h = p.h;
  const int64_t i = hq0 / p.groups();
  const int64_t M = heads * rows, mr = ctx.mr, nr = ctx.nr, bkv = ctx.bkv;
  const int64_t Mp = round_up(M, nr);
  const bool native = ctx.o.engine != GemmEngine::kF32Fma;
  const int64_t q_words = native ? (D + 1) / 2 : D;
  const size_t x_size = dtype_size(p.dtype);
  thread_local Scratch scratch;
  Scratch& sc = scratch;
  grow_scratch(sc.q_packed, static_cast<size_t>(Mp * q_words));
  grow_scratch(sc.st, static_cast<size_t>(bkv * Mp));
  grow_scratch(sc.ot, static_cast<size_t>(d * Mp));
  grow_scratch(sc.o_rows, static_cast<size_t>(round_up(d, kStoreGroup) * Mp));
  for (auto* x : {&sc.run_max, &sc.run_sum, &sc.factor, &sc.true_max}) {
    grow_scratch(*x, static_cast<size_t>(Mp));
  }
  grow_scratch(sc.lo, static_cast<size_t>(Mp));
  grow_scratch(sc.hi, static_cast<size_t>(Mp));
  if (native) {
    grow_scratch(sc.rounded, static_cast<size_t>(bkv * nr));
    grow_scratch(sc.pt_pairs, static_cast<size_t>(Mp * (bkv / 2 + 1)));
  }

  // The keys each column sees; pad columns see all of them (finite logits of a zero query) and
  // are dropped at the end. Blocks outside the union are never computed.
  int64_t kv_lo = p.t, kv_hi = 0;
  for (int64_t rr = 0; rr < rows; ++rr) {
    const auto [lo, hi] = p.key_range(b, r0 + rr);
    for (int64_t jh = 0; jh < heads; ++jh) {
      sc.lo[jh * rows + rr] = static_cast<int32_t>(lo);
      sc.hi[jh * rows + rr] = static_cast<int32_t>(hi);
    }
    if (lo < hi) {
      kv_lo = std::min(kv_lo, lo);
      kv_hi = std::max(kv_hi, hi);
    }
  }
  std::fill(sc.lo.begin() + M, sc.lo.begin() + Mp, 0);
  std::fill(sc.hi.begin() + M, sc.hi.begin() + Mp, static_cast<int32_t>(p.t));
  std::fill(sc.run_max.begin(), sc.run_max.begin() + Mp, kNegInf);
  std::fill(sc.true_max.begin(), sc.true_max.begin() + Mp, kNegInf);
  std::fill(sc.run_sum.begin(), sc.run_sum.begin() + Mp, 0.0f);
  if (!p.sinks.empty()) {  // a sink is one more logit of the row with no value
    for (int64_t m = 0; m < M; ++m) {
      sc.run_max[m] = sc.true_max[m] = p.sinks[hq0 + m / rows];
      sc.run_sum[m] = 1.0f;
    }
  }
  const bool track_max = !p.normalize_output || ctx.row_max;
  std::fill(sc.ot.begin(), sc.ot.begin() + d * Mp, 0.0f);

  // The Q tile [M, D] as stored (the logits scale goes into the exponent, below), then Q^T as
  // rhs strips.
  const int64_t q_at = p.q_at(b, r0, hq0);  // row r0 of head hq0
  if (heads == 1 && (native || p.dtype == DType::kF32)) {
    // One head: its rows are q_stride() apart in q, packed straight from there.
    pack_strips(p.dtype, static_cast<const char*>(ctx.q) + q_at * static_cast<int64_t>(x_size),
                p.q_stride(), rows, D, nr, native, sc.q_packed.data());
  } else if (native) {
    grow_scratch(sc.q16, static_cast<size_t>(M * D));
    for (int64_t jh = 0; jh < heads; ++jh) {
      for (int64_t rr = 0; rr < rows; ++rr) {
        const bf16* src = static_cast<const bf16*>(ctx.q) + p.q_at(b, r0 + rr, hq0 + jh);
        std::copy(src, src + D, &sc.q16[(jh * rows + rr) * D]);
      }
    }
    pack_strips(DType::kBF16, sc.q16.data(), D, M, D, nr, true, sc.q_packed.data());
  } else {
    grow_scratch(sc.q32, static_cast<size_t>(M * D));
    for (int64_t jh = 0; jh < heads; ++jh) {
      for (int64_t rr = 0; rr < rows; ++rr) {
        const int64_t at = p.q_at(b, r0 + rr, hq0 + jh);
        float* dst = &sc.q32[(jh * rows + rr) * D];
        if (p.dtype == DType::kF32) {
          std::copy_n(static_cast<const float*>(ctx.q) + at, D, dst);
        } else {
          for (int64_t x = 0; x < D; ++x) dst[x] = attention_load(p.dtype, ctx.q, at + x);
        }
      }
    }
    pack_strips(DType::kF32, sc.q32.data(), D, M, D, nr, false, sc.q_packed.data());
  }

  const float scale = static_cast<float>(p.logits_scale);
  const float cap = static_cast<float>(p.logits_soft_cap);
  // A positive logits scale goes into the exponent (exp(scale * s - shift), one fused
  // multiply-add, so no pass over S^T) unless a bias or soft cap must see the scaled logits.
  const bool scale_block = ctx.bias || cap > 0.0f || !(scale > 0.0f) || p.bf16_logits;
  const float exp_scale = scale_block ? 1.0f : scale;
  const float* head = ctx.packed + ((b * h + i) - ctx.chunk_first) * ctx.kv_head_floats;
  const float* k_panels = head;
  const float* v_panels = head + ctx.v_offset;
  const int64_t v_block_floats = ceil_div(d, mr) * (native ? bkv / 2 : bkv) * mr;

  for (int64_t j0 = kv_lo / bkv * bkv; j0 < kv_hi; j0 += bkv) {
    const int64_t n = std::min(bkv, p.t - j0);
    bool any = false, all = true;  // some column sees a key of the block; every column all
    for (int64_t m = 0; m < M; ++m) {
      any = any || (sc.lo[m] < j0 + n && sc.hi[m] > j0);
      all = all && sc.lo[m] <= j0 && sc.hi[m] >= j0 + n;
    }
    const KeyBlock key_block = any ? p.key_block(b, r0, rows, j0, n) : KeyBlock::kEmpty;
    if (key_block == KeyBlock::kEmpty) continue;

    // S^T [n, Mp] = K[j0 .. j0 + n) Q^T, strip-major: one [n, nr] slab per strip of nr query
    // columns (element (c, m) at st[(m / nr) * n * nr + c * nr + m % nr]), which is the packed
    // rhs layout of O^T += V^T P^T, so P^T streams contiguously there.
    const int64_t strips = Mp / nr;
    float* st = sc.st.data();
    auto at = [&](int64_t c, int64_t m) { return (m / nr) * n * nr + c * nr + m % nr; };
    // While S^T is computed, this block's V^T panels come into L2 (a long head's packed K and V
    // outgrow the caches, and the micro-kernels would otherwise wait on their first touch).
    const float* v_block = v_panels + (j0 / bkv) * v_block_floats;
    const int64_t v_bytes = ceil_div(d, mr) * (native ? (n + 1) / 2 : n) * mr * 4;
    for (int64_t sp = 0; sp < strips; ++sp) {
      BlockArgs s_args{};
      s_args.lhs_block = k_panels + (j0 / mr) * q_words * mr;
      s_args.rows = n;
      s_args.rhs = sc.q_packed.data() + sp * q_words * nr;
      s_args.rhs_dtype = DType::kF32;
      s_args.rhs_packed = true;
      s_args.rhs_strip_stride = q_words * nr;
      s_args.ldb = nr;
      s_args.cols = nr;
      s_args.depth = D;
      s_args.out = st + sp * n * nr;
      s_args.ldc = nr;
      s_args.accumulate = false;
      s_args.mr = static_cast<int>(mr);
      s_args.nr_vectors = ctx.nr_vectors;
      const int64_t share = ceil_div(v_bytes, strips);
      s_args.next_rhs.base = reinterpret_cast<const char*>(v_block) + sp * share;
      s_args.next_rhs.rows = 1;
      s_args.next_rhs.bytes = std::max<int64_t>(0, std::min(share, v_bytes - sp * share));
      attention_block_product(s_args, native);
    }

    if (scale_block) cpu_scale_row(st, n * Mp, scale);
    if (ctx.bias) {  // a strided walk per column: bias favours the rows layout
      for (int64_t m = 0; m < M; ++m) {
        const int64_t hq = hq0 + m / rows, r = r0 + m % rows;
        const int64_t from = ctx.bias_at.offset(b, hq, r, j0), stride = ctx.bias_at.stride_t;
        for (int64_t c = 0; c < n; ++c) {
          st[at(c, m)] += attention_load(p.bias->dtype, ctx.bias, from + c * stride);
        }
      }
    }
    if (cap > 0.0f) cpu_soft_cap_row(st, n * Mp, cap);
    if (p.bf16_logits) round_row_to_bf16(st, n * Mp);
    if (ctx.mask) {
      for (int64_t m = 0; m < M; ++m) {
        const int64_t hq = hq0 + m / rows, r = r0 + m % rows;
        const bool* row = ctx.mask + ctx.mask_at.offset(b, hq, r, j0);
        for (int64_t c = 0; c < n; ++c) {
          if (!row[c * ctx.mask_at.stride_t]) st[at(c, m)] = kNegInf;
        }
      }
    }
    if (key_block == KeyBlock::kScattered) {
      // The key mask's holes: asked once per row when alike for every head, else per head.
      grow_scratch(sc.holes, static_cast<size_t>(n));
      const bool alike = p.key_mask->alike_for_heads();
      for (int64_t rr = 0; rr < rows; ++rr) {
        const int64_t c_lo = std::clamp<int64_t>(sc.lo[rr] - j0, 0, n);
        const int64_t c_hi = std::clamp<int64_t>(sc.hi[rr] - j0, c_lo, n);
        if (c_lo >= c_hi) continue;
        for (int64_t jh = 0; jh < (alike ? 1 : heads); ++jh) {
          std::fill_n(sc.holes.data(), n, 0.0f);
          p.key_mask->mask_row(b, hq0 + jh, r0 + rr, j0, c_lo, c_hi, sc.holes.data());
          for (int64_t c = c_lo; c < c_hi; ++c) {
            if (sc.holes[c] != kNegInf) continue;
            if (alike) {
              for (int64_t all = 0; all < heads; ++all) st[at(c, all * rows + rr)] = kNegInf;
            } else {
              st[at(c, jh * rows + rr)] = kNegInf;
            }
          }
        }
      }
    }
    for (int64_t sp = 0; sp < strips; ++sp) {
      float* slab = st + sp * n * nr;
      if (!all) cpu_mask_columns(slab, n, nr, nr, j0, &sc.lo[sp * nr], &sc.hi[sp * nr]);
      if (track_max) {
        // The step's shift follows the maximum lazily; the unnormalized output needs the true
        // one (exp(logit - max) per key), so it is tracked here.
        for (int64_t c = 0; c < n; ++c) {
          for (int64_t m = 0; m < nr; ++m) {
            float& mx = sc.true_max[sp * nr + m];
            mx = std::max(mx, exp_scale * slab[c * nr + m]);
          }
        }
      }
      cpu_softmax_columns_step(slab, n, nr, nr, exp_scale, &sc.run_max[sp * nr],
                               &sc.run_sum[sp * nr], &sc.factor[sp * nr]);
      if (ctx.dropout) {  // after the running sums have counted every weight
        for (int64_t ml = 0; ml < nr && sp * nr + ml < M; ++ml) {
          const int64_t m = sp * nr + ml, hq = hq0 + m / rows, r = r0 + m % rows;
          const bool* keep = ctx.dropout + ctx.dropout_at.offset(b, hq, r, j0);
          for (int64_t c = 0; c < n; ++c) {
            float& x = slab[c * nr + ml];
            x = keep[c * ctx.dropout_at.stride_t] ? x * ctx.dropout_scale : 0.0f;
          }
        }
      }
      if (native) {
        pack_pt_pairs_rounded(slab, nr, n, nr, nr, sc.rounded.data(),
                              sc.pt_pairs.data() + sp * ((n + 1) / 2) * nr);
      }
    }
    if (std::any_of(sc.factor.begin(), sc.factor.begin() + M, [](float f) { return f != 1.0f; })) {
      cpu_scale_columns(sc.ot.data(), d, Mp, Mp, sc.factor.data());
    }

    // O^T [d, Mp] += V^T[:, j0 .. j0 + n) P^T, P^T as packed rhs strips: the slabs of S^T (f32)
    // or their bf16 pairs.
    BlockArgs o_args{};
    o_args.lhs_block = v_block;
    o_args.rows = d;
    o_args.rhs = native ? static_cast<const void*>(sc.pt_pairs.data()) : st;
    o_args.rhs_packed = true;
    o_args.rhs_strip_stride = (native ? (n + 1) / 2 : n) * nr;
    o_args.ldb = nr;
    o_args.rhs_dtype = DType::kF32;
    o_args.cols = Mp;
    o_args.depth = n;
    o_args.out = sc.ot.data();
    o_args.ldc = Mp;
    o_args.accumulate = true;
    o_args.mr = static_cast<int>(mr);
    o_args.nr_vectors = ctx.nr_vectors;
    // And while O^T accumulates, the next block's K panels.
    if (j0 + bkv < kv_hi) {
      o_args.next_rhs.base =
          reinterpret_cast<const char*>(k_panels + (j0 + bkv) / mr * q_words * mr);
      o_args.next_rhs.rows = 1;
      o_args.next_rhs.bytes = std::min(bkv, p.t - j0 - bkv) * q_words * 4;
    }
    attention_block_product(o_args, native);
  }

  // Normalise (columns without a visible key have sum 0 and come out as zeros), transpose back
  // 16 rows of O^T at a time ([ceil(d / 16)][Mp][16]) and store each head's rows, out_stride()
  // apart.
  store_task_stats(ctx, b, hq0, heads, r0, rows, [&](int64_t m) {
    return std::array<float, 3>{sc.run_max[m], sc.run_sum[m], sc.true_max[m]};
  });
  for (int64_t m = 0; m < Mp; ++m) {
    const float sum = sc.run_sum[m];
    sc.factor[m] =
        sum > 0.0f ? (p.normalize_output ? 1.0f / sum : std::exp(sc.run_max[m] - sc.true_max[m]))
                   : 0.0f;
  }
  cpu_scale_columns(sc.ot.data(), d, Mp, Mp, sc.factor.data());
  pack_lhs_block(DType::kF32, sc.ot.data(), Mp, d, Mp, kStoreGroup, sc.o_rows.data());
  for (int64_t jh = 0; jh < heads; ++jh) {
    for (int64_t x0 = 0; x0 < d; x0 += kStoreGroup) {
      const int64_t at = p.out_at(b, r0, hq0 + jh) + x0;
      store_rows(&sc.o_rows[(x0 * Mp) + jh * rows * kStoreGroup], kStoreGroup, rows,
                 std::min(kStoreGroup, d - x0), p.dtype,
                 static_cast<char*>(ctx.out) + at * static_cast<int64_t>(x_size), p.out_stride());
    }
  }
}

}  // namespace tokamax
