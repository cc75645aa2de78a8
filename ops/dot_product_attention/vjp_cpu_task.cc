// dot_product_attention_vjp on CPU: the task bodies of the backward's two passes (the block
// products, the logits' epilogue, P, dP and dS); the driver is vjp_cpu_kernel.cc.
//
// Dimensions: as vjp_cpu_task.h (B, T, t, H, h, g, D, d, bq, bkv, rows, cols); r0, j0 the first
// row and key of a block.
#include "ops/dot_product_attention/vjp_cpu_task.h"

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
// sequence lengths (the bool mask is applied per entry later).
bool block_visible(const AttentionProblem& p, int64_t b, int64_t r0, int64_t rows, int64_t j0,
                   int64_t cols) {
  for (int64_t r = r0; r < r0 + rows; ++r) {
    const auto [lo, hi] = p.key_range(b, r);
    if (std::max(lo, j0) < std::min(hi, j0 + cols)) return true;
  }
  return false;
}

// S [rows, cols] (row stride cols) from raw q k^T to the forward's logits: scale, bias, cap,
// then -inf outside each row's key range and where the mask is false. With a cap, gate gets
// cap'(z) = 1 - tanh^2(z / c), recovered from the capped value.
void finish_logits(const VjpTaskContext& c, int64_t b, int64_t hq, int64_t r0, int64_t rows,
                   int64_t j0, int64_t cols, float* s, float* gate) {
  const AttentionProblem& p = c.p;
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
    if (c.mask) {
      const bool* m = c.mask + c.mask_at.offset(b, hq, r, j0);
      const int64_t stride = c.mask_at.stride_t;
      for (int64_t j = first; j < last; ++j) {
        if (!m[j * stride]) row[j] = kNegInf;
      }
    }
  }
}

// Row r of head hq of a [B, T, H, d] tensor (dout, out) as f32.
void load_row(const VjpTaskContext& c, const char* x, int64_t b, int64_t hq, int64_t r,
              float* out) {
  dispatch_float(c.x, [&](auto type) {
    using X = decltype(type);
    const X* row = reinterpret_cast<const X*>(x) + ((b * c.p.T + r) * c.p.H + hq) * c.p.d;
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

// Pass 1 task: lse and Dr of rows [r0, r0 + rows) of head hq. With out given, Dr is
// dout . out and only lse (when not given either) needs the logits: no P V product.
void vjp_row_statistics(const VjpTaskContext& c, const float* lse_in, const char* out, int64_t b,
                        int64_t hq, int64_t r0, int64_t rows, const VjpKeyOperands* keys,
                        float* lse_out, float* delta) {
  const AttentionProblem& p = c.p;
  VjpScratch& w = vjp_scratch();
  grow(w.s, c.bq * c.bkv);
  grow(w.gate, c.bq * c.bkv);
  grow(w.acc, c.bq * p.d);
  grow(w.row, p.d);
  grow(w.row2, p.d);
  grow(w.m, c.bq);
  grow(w.l, c.bq);
  float* O = w.acc.data();
  std::fill_n(O, rows * p.d, 0.0f);
  std::fill_n(w.m.data(), rows, kNegInf);
  std::fill_n(w.l.data(), rows, 0.0f);
  const int64_t stat0 = (b * p.H + hq) * p.T + r0;
  // The task's q rows are the lhs of every S block: packed once.
  const PackedGemmOperand q_packed =
      out && lse_in ? PackedGemmOperand{}
                    : pack_gemm_lhs(c.q_rows(b, hq, r0), rows, p.D, c.inputs_gemm, w.q_packed);
  for (int64_t j0 = 0; j0 < p.t && !(out && lse_in); j0 += c.bkv) {
    const int64_t cols = std::min(c.bkv, p.t - j0);
    if (!block_visible(p, b, r0, rows, j0, cols)) continue;
    float* s = w.s.data();
    const VjpKeyOperands& key_ops = keys[j0 / c.bkv];
    cpu_gemm_f32(q_packed, key_ops.kt, s, cols, false, c.inputs_gemm);
    finish_logits(c, b, hq, r0, rows, j0, cols, s, w.gate.data());
    for (int64_t rr = 0; rr < rows; ++rr) {
      float* row = s + rr * cols;
      if (lse_in) {
        cpu_exp_shift_sum(row, cols, lse_in[stat0 + rr]);
        continue;
      }
      // The online softmax: shift by the running maximum, rescale what O has so far.
      const float m_new = std::max(w.m[rr], cpu_row_max(row, cols));
      if (m_new == kNegInf) {
        std::fill_n(row, cols, 0.0f);
        continue;
      }
      const float alpha = w.m[rr] == kNegInf ? 0.0f : std::exp(w.m[rr] - m_new);
      if (alpha != 1.0f && !out) cpu_scale_row(O + rr * p.d, p.d, alpha);
      w.l[rr] = w.l[rr] * alpha + cpu_exp_shift_sum(row, cols, m_new);
      w.m[rr] = m_new;
    }
    if (out) continue;
    GemmOperand p_rows{DType::kF32, s, cols, false};
    if (c.round_p) {
      round_to_bf16(s, rows * cols, w.p16);
      p_rows = {DType::kBF16, w.p16.data(), cols, false};
    }
    cpu_gemm_f32(p_rows, key_ops.v, rows, O, p.d, true, c.weights_gemm());
  }
  for (int64_t rr = 0; rr < rows; ++rr) {
    float lse = 0.0f, inv = 1.0f;
    if (lse_in) {
      lse = lse_in[stat0 + rr];
    } else {
      lse = w.l[rr] > 0.0f ? w.m[rr] + std::log(w.l[rr]) : kNegInf;
      inv = w.l[rr] > 0.0f ? 1.0f / w.l[rr] : 0.0f;
    }
    load_row(c, c.dout, b, hq, r0 + rr, w.row.data());
    const float* o_row = O + rr * p.d;
    if (out) {
      load_row(c, out, b, hq, r0 + rr, w.row2.data());
      o_row = w.row2.data();
      inv = 1.0f;
    }
    float dot = 0.0f;
    for (int64_t e = 0; e < p.d; ++e) dot += w.row[e] * o_row[e];
    lse_out[stat0 + rr] = lse;
    delta[stat0 + rr] = dot * inv;
  }
}

VjpKeyOperands vjp_pack_keys(const VjpTaskContext& c, int64_t b, int64_t i, int64_t j0,
                             int64_t cols, bool with_v, std::vector<float>* storage) {
  const AttentionProblem& p = c.p;
  VjpKeyOperands o;
  o.kt = pack_gemm_rhs(c.k_rows(b, i, j0, true), p.D, cols, c.inputs_gemm, storage[0]);
  if (with_v) {
    o.v = pack_gemm_rhs(c.v_rows(b, i, j0, false), cols, p.d, c.weights_gemm(), storage[1]);
  }
  return o;
}

VjpRowOperands vjp_pack_rows(const VjpTaskContext& c, int64_t b, int64_t hq, int64_t r0,
                             int64_t rows, std::vector<float>* storage) {
  const AttentionProblem& p = c.p;
  VjpRowOperands o;
  o.q_lhs = pack_gemm_lhs(c.q_rows(b, hq, r0), rows, p.D, c.inputs_gemm, storage[0]);
  o.q_rhs = pack_gemm_rhs(c.q_rows(b, hq, r0), rows, p.D, c.weights_gemm(), storage[1]);
  o.dout_lhs = pack_gemm_lhs(c.dout_rows(b, hq, r0), rows, p.d, c.inputs_gemm, storage[2]);
  o.dout_rhs = pack_gemm_rhs(c.dout_rows(b, hq, r0), rows, p.d, c.weights_gemm(), storage[3]);
  return o;
}

// Pass 2 task: dk and dv of keys [j0, j0 + cols) of kv head i; dq (and dbias) into the
// thread's copies.
void vjp_key_block(const VjpTaskContext& c, const float* lse, const float* delta, int64_t b,
                   int64_t i, int64_t j0, int64_t cols, const VjpRowOperands* packed_rows,
                   float* dq_acc, float* dbias_acc, Tensor& dk, Tensor& dv) {
  const AttentionProblem& p = c.p;
  const int64_t g = p.groups();
  VjpScratch& w = vjp_scratch();
  grow(w.s, c.bq * c.bkv);
  grow(w.gate, c.bq * c.bkv);
  grow(w.dp, c.bq * c.bkv);
  grow(w.acc, c.bkv * p.D);
  grow(w.acc2, c.bkv * p.d);
  float* dK = w.acc.data();
  float* dV = w.acc2.data();
  std::fill_n(dK, cols * p.D, 0.0f);
  std::fill_n(dV, cols * p.d, 0.0f);
  // The block's keys and values are the rhs of three products for every row block: packed once.
  const PackedGemmOperand kt =
      pack_gemm_rhs(c.k_rows(b, i, j0, true), p.D, cols, c.inputs_gemm, w.kt_packed);
  const PackedGemmOperand vt =
      pack_gemm_rhs(c.v_rows(b, i, j0, true), p.d, cols, c.inputs_gemm, w.vt_packed);
  const CpuGemmOptions ds_gemm = c.weights_gemm();
  const int64_t nq = ceil_div(p.T, c.bq);
  const PackedGemmOperand k_block =
      pack_gemm_rhs(c.k_rows(b, i, j0, false), cols, p.D, ds_gemm, w.k_packed);
  for (int64_t hq = i * g; hq < (i + 1) * g; ++hq) {
    for (int64_t r0 = 0; r0 < p.T; r0 += c.bq) {
      const int64_t rows = std::min(c.bq, p.T - r0);
      if (!block_visible(p, b, r0, rows, j0, cols)) continue;
      const int64_t stat0 = (b * p.H + hq) * p.T + r0;
      const VjpRowOperands& row_ops = packed_rows[(hq - i * g) * nq + r0 / c.bq];
      float* s = w.s.data();
      float* dp = w.dp.data();
      const float* gate = w.gate.data();
      cpu_gemm_f32(row_ops.q_lhs, kt, s, cols, false, c.inputs_gemm);
      finish_logits(c, b, hq, r0, rows, j0, cols, s, w.gate.data());
      // P = exp(S - lse): the forward's normalised weights, 0 where masked.
      for (int64_t rr = 0; rr < rows; ++rr) cpu_exp_shift_sum(s + rr * cols, cols, lse[stat0 + rr]);
      // dv += P^T dout (P read transposed: the contraction runs over rows).
      GemmOperand p_t{DType::kF32, s, cols, true};
      if (c.round_p) {
        round_to_bf16(s, rows * cols, w.p16);
        p_t = {DType::kBF16, w.p16.data(), cols, true};
      }
      cpu_gemm_f32(p_t, row_ops.dout_rhs, cols, dV, p.d, true, ds_gemm);
      // dP = dout v^T, then dS = P (dP - Dr) (cap') in place.
      cpu_gemm_f32(row_ops.dout_lhs, vt, dp, cols, false, c.inputs_gemm);
      for (int64_t rr = 0; rr < rows; ++rr) {
        const float Dr = delta[stat0 + rr];
        const float* P = s + rr * cols;
        float* dS = dp + rr * cols;
        if (c.cap > 0.0f) {
          const float* G = gate + rr * cols;
          for (int64_t j = 0; j < cols; ++j) dS[j] = P[j] * (dS[j] - Dr) * G[j];
        } else {
          for (int64_t j = 0; j < cols; ++j) dS[j] = P[j] * (dS[j] - Dr);
        }
        if (dbias_acc) {
          float* db = dbias_acc + c.bias_at.offset(b, hq, r0 + rr, j0);
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
      cpu_gemm_f32(ds_t, row_ops.q_rhs, cols, dK, p.D, true, ds_gemm);
      cpu_gemm_f32(ds, k_block, rows, dq_acc + ((b * p.T + r0) * p.H + hq) * p.D, p.H * p.D,
                   true, ds_gemm);
    }
  }
  cpu_scale_row(dK, cols * p.D, c.scale);
  char* dk_dst = static_cast<char*>(dk.raw()) + ((b * p.t + j0) * p.h + i) * p.D * c.xs;
  char* dv_dst = static_cast<char*>(dv.raw()) + ((b * p.t + j0) * p.h + i) * p.d * c.xs;
  store_rows(dK, p.D, cols, p.D, c.x, dk_dst, p.h * p.D);
  store_rows(dV, p.d, cols, p.d, c.x, dv_dst, p.h * p.d);
}

}  // namespace tokamax
