// The flash-attention core, backward (every attention op's CPU VJP): the row-block task of the
// backward (the block products, the logits' epilogue, P, dP and dS) and the key packing; the driver
// is vjp.cc.
//
// Dimensions: as vjp_task.h (B, T, t, H, h, g, D, d, bq, bkv, rows, cols); r0, j0 the first
// row and key of a block.
#include "ops/common/flash_attention/vjp_task.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "ops/common/cpu_gemm/gemm.h"
#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/common/cpu_softmax.h"
#include "ops/framework/dtype_dispatch.h"

namespace tokamax {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Whether any row of [r0, r0 + rows) sees a key of [j0, j0 + cols) under causal, window and
// sequence lengths and the key mask (the bool mask and the key mask's holes are applied per
// entry later).
bool block_visible(const FlashAttentionProblem& p, int64_t b, int64_t r0, int64_t rows, int64_t j0,
                   int64_t cols) {
  if (p.key_block(b, r0, rows, j0, cols) == KeyBlock::kEmpty) return false;
  for (int64_t r = r0; r < r0 + rows; ++r) {
    const auto [lo, hi] = p.key_range(b, r);
    if (std::max(lo, j0) < std::min(hi, j0 + cols)) return true;
  }
  return false;
}

// S [rows, cols] (row stride cols) from raw q k^T to the forward's logits: scale, bias, cap,
// then -inf outside each row's key range, in the key mask's holes and where the mask is false. With
// a cap, gate gets cap'(z) = 1 - tanh^2(z / c), recovered from the capped value.
void finish_logits(const VjpTaskContext& c, int64_t b, int64_t hq, int64_t r0, int64_t rows,
                   int64_t j0, int64_t cols, float* s, float* gate) {
  const FlashAttentionProblem& p = c.p;
  const bool scattered = p.key_block(b, r0, rows, j0, cols) == KeyBlock::kScattered;
  for (int64_t rr = 0; rr < rows; ++rr) {
    const int64_t r = r0 + rr;
    float* row = s + rr * cols;
    cpu_scale_row(row, cols, c.scale);
    if (p.bias) {
      const float* bias = c.bias.data() + c.bias_at.offset(b, hq, r, j0);
      const int64_t stride = c.bias_at.stride_t;
      for (int64_t j = 0; j < cols; ++j) row[j] += bias[j * stride];
    }
    if (c.cap > 0.0f) {
      cpu_soft_cap_row(row, cols, c.cap);
      float* g = gate + rr * cols;
      const float inv = 1.0f / c.cap;
      for (int64_t j = 0; j < cols; ++j) {
        const float y = row[j] * inv;
        g[j] = 1.0f - y * y;
      }
    }
    const auto [lo, hi] = p.key_range(b, r);
    const int64_t first = std::clamp<int64_t>(lo - j0, 0, cols);
    const int64_t last = std::clamp<int64_t>(hi - j0, first, cols);
    std::fill(row, row + first, kNegInf);
    std::fill(row + last, row + cols, kNegInf);
    if (scattered && first < last) p.key_mask->mask_row(b, hq, r, j0, first, last, row);
    if (c.mask) {
      const bool* m = c.mask + c.mask_at.offset(b, hq, r, j0);
      const int64_t stride = c.mask_at.stride_t;
      for (int64_t j = first; j < last; ++j) {
        if (!m[j * stride]) row[j] = kNegInf;
      }
    }
  }
}

// Row r of head hq of dout or out (their layout) as f32.
void load_row(const VjpTaskContext& c, const char* x, int64_t b, int64_t hq, int64_t r,
              float* out) {
  dispatch_float(c.x, [&](auto type) {
    using X = decltype(type);
    const X* row = reinterpret_cast<const X*>(x) + c.p.out_at(b, r, hq);
    for (int64_t e = 0; e < c.p.d; ++e) out[e] = static_cast<float>(to_double(row[e]));
  });
}

// x[0..n) rounded to nearest even bf16 into out (grown as needed). P and dS are finite, so the
// bit trick needs no NaN case, and the loop vectorizes (float_to_bf16 is an out-of-line call).
void round_to_bf16(const float* x, int64_t n, std::vector<uint16_t>& out) {
  if (static_cast<int64_t>(out.size()) < n) out.resize(static_cast<size_t>(n));
  uint16_t* dst = out.data();
  for (int64_t e = 0; e < n; ++e) {
    const uint32_t bits = std::bit_cast<uint32_t>(x[e]);
    dst[e] = static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
  }
}

}  // namespace

VjpScratch& vjp_scratch() {
  thread_local VjpScratch s;
  return s;
}

VjpKeyOperands vjp_pack_keys(const VjpTaskContext& c, int64_t b, int64_t i, int64_t j0,
                             int64_t cols, GemmPackStorage* storage) {
  const FlashAttentionProblem& p = c.p;
  VjpKeyOperands o;
  o.kt = pack_gemm_rhs(c.k_rows(b, i, j0, true), p.D, cols, c.inputs_gemm, storage[0]);
  o.vt = pack_gemm_rhs(c.v_rows(b, i, j0, true), p.d, cols, c.inputs_gemm, storage[1]);
  o.k = pack_gemm_rhs(c.k_rows(b, i, j0, false), cols, p.D, c.weights_gemm(), storage[2]);
  return o;
}

void vjp_row_block(const VjpTaskContext& c, const float* lse_in, const char* out, int64_t b,
                   int64_t hq, int64_t r0, int64_t rows, const VjpKeyOperands* keys,
                   const VjpKeyAccumulators& acc, Tensor& dq, const FlashVjpRowStats& row_stats) {
  const FlashAttentionProblem& p = c.p;
  const int64_t i = hq / p.groups();
  const int64_t nkv = ceil_div(p.t, c.bkv), tile = c.bq * c.bkv;
  VjpScratch& w = vjp_scratch();
  grow(w.s, nkv * tile);
  grow(w.dp, nkv * tile);
  if (c.cap > 0.0f) grow(w.gate, nkv * tile);
  grow(w.dq, c.bq * p.D);
  grow(w.row, p.d);
  grow(w.row2, p.d);
  grow(w.m, c.bq);
  grow(w.l, c.bq);
  const int64_t stat0 = (b * p.H + hq) * p.T + r0;
  // The task's rows: q as the lhs of S and the rhs of dk, dout as the lhs of dP and the rhs of
  // dv, packed once for every key block.
  const CpuGemmOptions ds_gemm = c.weights_gemm();
  const PackedGemmOperand q_lhs =
      pack_gemm_lhs(c.q_rows(b, hq, r0), rows, p.D, c.inputs_gemm, w.rows_storage[0]);
  const PackedGemmOperand q_rhs =
      pack_gemm_rhs(c.q_rows(b, hq, r0), rows, p.D, ds_gemm, w.rows_storage[1]);
  const PackedGemmOperand dout_lhs =
      pack_gemm_lhs(c.dout_rows(b, hq, r0), rows, p.d, c.inputs_gemm, w.rows_storage[2]);
  const PackedGemmOperand dout_rhs =
      pack_gemm_rhs(c.dout_rows(b, hq, r0), rows, p.d, ds_gemm, w.rows_storage[3]);
  // The key blocks the rows can see (causal, window, sequence lengths), each with its tiles.
  auto for_each_block = [&](auto&& body) {
    for (int64_t jb = 0; jb < nkv; ++jb) {
      const int64_t j0 = jb * c.bkv, cols = std::min(c.bkv, p.t - j0);
      if (!block_visible(p, b, r0, rows, j0, cols)) continue;
      body(j0, cols, w.s.data() + jb * tile, w.dp.data() + jb * tile,
           c.cap > 0.0f ? w.gate.data() + jb * tile : nullptr, keys[jb]);
    }
  };

  // Sweep 1: the two products of inputs, the finished logits and each row's maximum.
  // A sink is one more logit of the row (no value): the maximum starts there.
  std::fill_n(w.m.data(), rows, p.sinks.empty() ? kNegInf : p.sinks[hq]);
  for_each_block(
      [&](int64_t j0, int64_t cols, float* s, float* dp, float* gate, const VjpKeyOperands& key) {
        cpu_gemm_f32(q_lhs, key.kt, s, cols, false, c.inputs_gemm);
        finish_logits(c, b, hq, r0, rows, j0, cols, s, gate);
        cpu_gemm_f32(dout_lhs, key.vt, dp, cols, false, c.inputs_gemm);
        if (!lse_in) {
          for (int64_t rr = 0; rr < rows; ++rr) {
            w.m[rr] = std::max(w.m[rr], cpu_row_max(s + rr * cols, cols));
          }
        }
      });
  // P = exp(S - lse) in place: given lse, directly; else exp(S - m) over the row's sum l, with
  // lse = m + log l (a row that sees no key: P = 0).
  for (int64_t rr = 0; rr < rows; ++rr) {
    w.l[rr] = p.sinks.empty() || lse_in ? 0.0f : std::exp(p.sinks[hq] - w.m[rr]);
  }
  for_each_block([&](int64_t, int64_t cols, float* s, float*, float*, const VjpKeyOperands&) {
    for (int64_t rr = 0; rr < rows; ++rr) {
      const float shift = lse_in ? lse_in[stat0 + rr] : w.m[rr];
      w.l[rr] += cpu_exp_shift_sum(s + rr * cols, cols, shift);
    }
  });
  if (row_stats.lse) {
    for (int64_t rr = 0; rr < rows; ++rr) {
      row_stats.lse[stat0 + rr] = lse_in ? lse_in[stat0 + rr] : w.m[rr] + std::log(w.l[rr]);
    }
  }
  if (!lse_in) {
    for_each_block([&](int64_t, int64_t cols, float* s, float*, float*, const VjpKeyOperands&) {
      for (int64_t rr = 0; rr < rows; ++rr) {
        if (w.l[rr] > 0.0f) cpu_scale_row(s + rr * cols, cols, 1.0f / w.l[rr]);
      }
    });
  }
  // Dr = rowsum(dout * out): dout . out when out is given, else rowsum(P dP) (the same sum,
  // since out = P v and dP = dout v^T). Kept in w.l.
  float* delta = w.l.data();
  if (out) {
    for (int64_t rr = 0; rr < rows; ++rr) {
      load_row(c, c.dout, b, hq, r0 + rr, w.row.data());
      load_row(c, out, b, hq, r0 + rr, w.row2.data());
      delta[rr] = cpu_dot_row(w.row.data(), w.row2.data(), p.d);
    }
  } else {
    std::fill_n(delta, rows, 0.0f);
    for_each_block([&](int64_t, int64_t cols, float* s, float* dp, float*, const VjpKeyOperands&) {
      for (int64_t rr = 0; rr < rows; ++rr) {
        delta[rr] += cpu_dot_row(s + rr * cols, dp + rr * cols, cols);
      }
    });
  }

  if (row_stats.delta) std::copy_n(delta, rows, row_stats.delta + stat0);

  // Sweep 2: dS, then the three products with P or dS.
  float* dQ = w.dq.data();
  std::fill_n(dQ, rows * p.D, 0.0f);
  for_each_block([&](int64_t j0, int64_t cols, float* s, float* dp, float* gate,
                     const VjpKeyOperands& key) {
    // dv += P^T dout (P read transposed: the contraction runs over rows).
    GemmOperand p_t{DType::kF32, s, cols, true};
    if (c.round_p) {
      round_to_bf16(s, rows * cols, w.p16);
      p_t = {DType::kBF16, w.p16.data(), cols, true};
    }
    cpu_gemm_f32(p_t, dout_rhs, cols, acc.dv + p.v_at(b, j0, i), p.v_stride(), true, ds_gemm);
    // dS = P (dP - Dr) (cap') in place of dP.
    for (int64_t rr = 0; rr < rows; ++rr) {
      float* dS = dp + rr * cols;
      cpu_softmax_grad_row(s + rr * cols, dS, cols, delta[rr], gate ? gate + rr * cols : nullptr);
      if (acc.dbias) {
        float* db = acc.dbias + c.bias_at.offset(b, hq, r0 + rr, j0);
        const int64_t stride = c.bias_at.stride_t;
        for (int64_t j = 0; j < cols; ++j) db[j * stride] += dS[j];
      }
    }
    // dk += dS^T q and dq += dS k (the scale is applied once, at the stores).
    GemmOperand ds{DType::kF32, dp, cols, false};
    if (c.round_p) {
      round_to_bf16(dp, rows * cols, w.ds16);
      ds = {DType::kBF16, w.ds16.data(), cols, false};
    }
    GemmOperand ds_t = ds;
    ds_t.transposed = true;
    cpu_gemm_f32(ds_t, q_rhs, cols, acc.dk + p.k_at(b, j0, i), p.k_stride(), true, ds_gemm);
    cpu_gemm_f32(ds, key.k, rows, dQ, p.D, true, ds_gemm);
  });
  cpu_scale_row(dQ, rows * p.D, c.scale);
  char* dq_dst = static_cast<char*>(dq.raw()) +
                 p.q_at(b, r0, hq) * static_cast<int64_t>(dtype_size(dq.dtype()));
  store_rows(dQ, p.D, rows, p.D, dq.dtype(), dq_dst, p.q_stride());
}

}  // namespace tokamax
