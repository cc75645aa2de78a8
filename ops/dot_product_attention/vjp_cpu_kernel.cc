// dot_product_attention_vjp on CPU: the flash-style backward, two passes of block tasks on the
// shared GEMM engine.
//
// Dimensions: as vjp_cpu_kernel.h (B, T, t, H, h, g, D, d, bq, bkv); rows / cols the extents of
// one [bq, bkv] block at the edges; r0, j0 its first row and key.
//
// Pass 1, one task per (b, q head, row block): the forward again, S = q k^T block by block with
// the online softmax (or P = exp(S - lse) when lse is given), O = P v in a [bq, d] tile, then
// the row statistics the backward needs: lse and Dr = rowsum(dout * out) ([B, H, T] f32 each,
// O(T), never out itself). With the forward's out as an input, Dr needs no product and lse
// (unless given too) only S; with both, pass 1 reads out and dout and nothing else.
// Pass 2, one task per (b, kv head, key block): for every row block of the g q heads that can
// see the block, S is recomputed and P = exp(S - lse) (exactly the forward's P), then
//   dv += P^T dout,  dP = dout v^T,  dS = P (dP - Dr) (cap'),  dk += dS^T q,  dq += dS k
// The task owns its [bkv, D] and [bkv, d] accumulators, so dk and dv need no reduction; dq
// rows are shared by every key block, so each thread adds into its own f32 copy of dq (O(T D)
// per thread, not O(T t); kept in thread_local scratch between calls) and the copies are summed
// at the end (dbias likewise). The five block products run on cpu_gemm_f32 with the transposes
// as strided operands; nothing [T, t] is ever allocated. bf16 inputs (bf16_path): native_dot
// runs S and dP, the products of two inputs, on vdpbf16ps; native_all also dv, dk, dq and
// pass 1's P v, with P and dS rounded to bf16 for them (f32 accumulation throughout).
#include "ops/dot_product_attention/vjp_cpu_kernel.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "backends/cpu/thread_pool.h"
#include "ops/common/cpu_gemm/gemm.h"
#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/common/cpu_softmax.h"
#include "ops/framework/dtype_dispatch.h"
#include "ops/framework/errors.h"

namespace tokamax {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Ctx {
  const AttentionProblem& p;
  DType x;           // q, k, v and dout
  int64_t xs;        // bytes per element
  const char* q;     // [B, T, H, D]
  const char* k;     // [B, t, h, D]
  const char* v;     // [B, t, h, d]
  const char* dout;  // [B, T, H, d]
  const bool* mask;
  AttentionBroadcast mask_at, bias_at;
  std::vector<float> bias;  // the bias in f32, as stored (broadcast by bias_at)
  float scale = 1.0f, cap = 0.0f;
  int64_t bq = 0, bkv = 0;
  CpuGemmOptions inputs_gemm;  // for the products of two inputs (S, dP): native bf16 or not
  bool round_p = false;        // dv, dk, dq natively too, with P and dS rounded to bf16

  // Operands of one block: rows r0.. of q / dout head hq, keys j0.. of k / v head i.
  // The gemm options of a product with P or dS: native only when they were rounded to bf16.
  CpuGemmOptions inputs_gemm_if(bool rounded) const {
    return rounded ? inputs_gemm : CpuGemmOptions{};
  }
  GemmOperand q_rows(int64_t b, int64_t hq, int64_t r0) const {
    return {x, q + ((b * p.T + r0) * p.H + hq) * p.D * xs, p.H * p.D, false};
  }
  GemmOperand dout_rows(int64_t b, int64_t hq, int64_t r0) const {
    return {x, dout + ((b * p.T + r0) * p.H + hq) * p.d * xs, p.H * p.d, false};
  }
  GemmOperand k_rows(int64_t b, int64_t i, int64_t j0, bool transposed) const {
    return {x, k + ((b * p.t + j0) * p.h + i) * p.D * xs, p.h * p.D, transposed};
  }
  GemmOperand v_rows(int64_t b, int64_t i, int64_t j0, bool transposed) const {
    return {x, v + ((b * p.t + j0) * p.h + i) * p.d * xs, p.h * p.d, transposed};
  }
};

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
void finish_logits(const Ctx& c, int64_t b, int64_t hq, int64_t r0, int64_t rows, int64_t j0,
                   int64_t cols, float* s, float* gate) {
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
void load_row(const Ctx& c, const char* x, int64_t b, int64_t hq, int64_t r, float* out) {
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

// Per-thread scratch of one block.
struct Scratch {
  std::vector<float> s, gate, dp, acc, acc2, row, row2, m, l;
  std::vector<float> dq, dbias;     // the thread's f32 copies of dq and dbias (pass 2)
  std::vector<uint16_t> p16, ds16;  // P and dS rounded to bf16 bits (native_all)
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}
void grow(std::vector<float>& x, int64_t n) {
  if (static_cast<int64_t>(x.size()) < n) x.resize(static_cast<size_t>(n));
}

// Pass 1 task: lse and Dr of rows [r0, r0 + rows) of head hq. With out given, Dr is
// dout . out and only lse (when not given either) needs the logits: no P V product.
void row_statistics(const Ctx& c, const float* lse_in, const char* out, int64_t b, int64_t hq,
                    int64_t r0, int64_t rows, float* lse_out, float* delta) {
  const AttentionProblem& p = c.p;
  const int64_t i = hq / p.groups();
  Scratch& w = scratch();
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
  for (int64_t j0 = 0; j0 < p.t && !(out && lse_in); j0 += c.bkv) {
    const int64_t cols = std::min(c.bkv, p.t - j0);
    if (!block_visible(p, b, r0, rows, j0, cols)) continue;
    float* s = w.s.data();
    cpu_gemm_f32(c.q_rows(b, hq, r0), c.k_rows(b, i, j0, true), rows, cols, p.D, s, cols, false,
                 c.inputs_gemm);
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
    cpu_gemm_f32(p_rows, c.v_rows(b, i, j0, false), rows, p.d, cols, O, p.d, true,
                 c.inputs_gemm_if(c.round_p));
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

// Pass 2 task: dk and dv of keys [j0, j0 + cols) of kv head i; dq (and dbias) into the
// thread's copies.
void key_block(const Ctx& c, const float* lse, const float* delta, int64_t b, int64_t i, int64_t j0,
               int64_t cols, float* dq_acc, float* dbias_acc, Tensor& dk, Tensor& dv) {
  const AttentionProblem& p = c.p;
  const int64_t g = p.groups();
  Scratch& w = scratch();
  grow(w.s, c.bq * c.bkv);
  grow(w.gate, c.bq * c.bkv);
  grow(w.dp, c.bq * c.bkv);
  grow(w.acc, c.bkv * p.D);
  grow(w.acc2, c.bkv * p.d);
  float* dK = w.acc.data();
  float* dV = w.acc2.data();
  std::fill_n(dK, cols * p.D, 0.0f);
  std::fill_n(dV, cols * p.d, 0.0f);
  for (int64_t hq = i * g; hq < (i + 1) * g; ++hq) {
    for (int64_t r0 = 0; r0 < p.T; r0 += c.bq) {
      const int64_t rows = std::min(c.bq, p.T - r0);
      if (!block_visible(p, b, r0, rows, j0, cols)) continue;
      const int64_t stat0 = (b * p.H + hq) * p.T + r0;
      float* s = w.s.data();
      float* dp = w.dp.data();
      const float* gate = w.gate.data();
      cpu_gemm_f32(c.q_rows(b, hq, r0), c.k_rows(b, i, j0, true), rows, cols, p.D, s, cols, false,
                   c.inputs_gemm);
      finish_logits(c, b, hq, r0, rows, j0, cols, s, w.gate.data());
      // P = exp(S - lse): the forward's normalised weights, 0 where masked.
      for (int64_t rr = 0; rr < rows; ++rr) cpu_exp_shift_sum(s + rr * cols, cols, lse[stat0 + rr]);
      // dv += P^T dout (P read transposed: the contraction runs over rows).
      GemmOperand p_t{DType::kF32, s, cols, true};
      if (c.round_p) {
        round_to_bf16(s, rows * cols, w.p16);
        p_t = {DType::kBF16, w.p16.data(), cols, true};
      }
      cpu_gemm_f32(p_t, c.dout_rows(b, hq, r0), cols, p.d, rows, dV, p.d, true,
                   c.inputs_gemm_if(c.round_p));
      // dP = dout v^T, then dS = P (dP - Dr) (cap') in place.
      cpu_gemm_f32(c.dout_rows(b, hq, r0), c.v_rows(b, i, j0, true), rows, cols, p.d, dp, cols,
                   false, c.inputs_gemm);
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
      cpu_gemm_f32(ds_t, c.q_rows(b, hq, r0), cols, p.D, rows, dK, p.D, true,
                   c.inputs_gemm_if(c.round_p));
      cpu_gemm_f32(ds, c.k_rows(b, i, j0, false), rows, p.D, cols,
                   dq_acc + ((b * p.T + r0) * p.H + hq) * p.D, p.H * p.D, true,
                   c.inputs_gemm_if(c.round_p));
    }
  }
  cpu_scale_row(dK, cols * p.D, c.scale);
  char* dk_dst = static_cast<char*>(dk.raw()) + ((b * p.t + j0) * p.h + i) * p.D * c.xs;
  char* dv_dst = static_cast<char*>(dv.raw()) + ((b * p.t + j0) * p.h + i) * p.d * c.xs;
  store_rows(dK, p.D, cols, p.D, c.x, dk_dst, p.h * p.D);
  store_rows(dV, p.d, cols, p.d, c.x, dv_dst, p.h * p.d);
}

// out[e] = scale * sum over the threads' copies of acc[e], in out's dtype, in parallel chunks.
void reduce_copies(const std::vector<float*>& copies, int64_t n, float scale, DType dtype,
                   void* out, int num_threads) {
  constexpr int64_t kChunk = 1 << 14;
  const int64_t size = static_cast<int64_t>(dtype_size(dtype));
  cpu::parallel_for(ceil_div(n, kChunk), num_threads, [&](int64_t task, int) {
    const int64_t e0 = task * kChunk, len = std::min(kChunk, n - e0);
    thread_local std::vector<float> sum;
    grow(sum, len);
    std::fill_n(sum.data(), len, 0.0f);
    for (const float* copy : copies) {
      if (!copy) continue;
      for (int64_t e = 0; e < len; ++e) sum[e] += copy[e0 + e];
    }
    if (scale != 1.0f) cpu_scale_row(sum.data(), len, scale);
    store_rows(sum.data(), len, 1, len, dtype, static_cast<char*>(out) + e0 * size, len);
  });
}

}  // namespace

void dot_product_attention_vjp_cpu_kernel(const AttentionProblem& p,
                                          const CpuAttentionVjpConfig& config, const Tensor& q,
                                          const Tensor& k, const Tensor& v, const Tensor* bias,
                                          const Tensor* mask, const Tensor& dout, const Tensor* lse,
                                          const Tensor* out, Tensor& dq, Tensor& dk, Tensor& dv,
                                          Tensor* dbias) {
  if (p.dtype == DType::kF64) {
    throw NotImplemented("cpu dot_product_attention_vjp: f64 (the GEMMs run in f32)");
  }
  Ctx c{p,
        p.dtype,
        static_cast<int64_t>(dtype_size(p.dtype)),
        static_cast<const char*>(q.raw()),
        static_cast<const char*>(k.raw()),
        static_cast<const char*>(v.raw()),
        static_cast<const char*>(dout.raw()),
        mask ? mask->data<bool>() : nullptr,
        {},
        {},
        {},
        static_cast<float>(p.logits_scale),
        static_cast<float>(p.logits_soft_cap),
        config.block_q,
        config.block_kv};
  if (mask) c.mask_at = p.mask_layout();
  c.inputs_gemm.native_bf16 = config.bf16_path != "convert_f32";
  c.round_p = config.bf16_path == "native_all";
  if (c.inputs_gemm.native_bf16 && (p.dtype != DType::kBF16 || !gemm_has_native_bf16())) {
    throw NotImplemented(
        "cpu dot_product_attention_vjp: native_dot needs bf16 inputs and "
        "avx512_bf16");
  }
  if (bias) {
    c.bias_at = p.bias_layout();
    c.bias.resize(static_cast<size_t>(bias->num_elements()));
    for (int64_t e = 0; e < bias->num_elements(); ++e) c.bias[e] = static_cast<float>(bias->get(e));
  }
  const int threads = config.num_threads;

  // Pass 1: lse (unless given) and Dr per row.
  std::vector<float> lse_rows(static_cast<size_t>(p.B * p.H * p.T));
  std::vector<float> delta(lse_rows.size());
  const float* lse_in = lse ? lse->data<float>() : nullptr;
  const char* out_in = out ? static_cast<const char*>(out->raw()) : nullptr;
  const int64_t nq = ceil_div(p.T, c.bq);
  cpu::parallel_for(p.B * p.H * nq, threads, [&](int64_t task, int) {
    const int64_t r0 = (task % nq) * c.bq, bh = task / nq;
    row_statistics(c, lse_in, out_in, bh / p.H, bh % p.H, r0, std::min(c.bq, p.T - r0),
                   lse_rows.data(), delta.data());
  });

  // Pass 2: dk, dv per key block; dq and dbias into per-thread copies, summed afterwards.
  const int64_t nkv = ceil_div(p.t, c.bkv);
  const int64_t tasks = p.B * p.h * nkv;
  const int used = cpu::thread_pool().threads_for(tasks, threads);
  // Each thread's copies live in its thread_local scratch (kept between calls: a fresh 4 MiB
  // allocation per call would be zeroed page by page by the kernel); copies[thread] points at
  // them once the thread has zeroed them for this call.
  std::vector<float*> dq_copies(static_cast<size_t>(std::max(used, 1)), nullptr);
  std::vector<float*> dbias_copies(dq_copies.size(), nullptr);
  const int64_t dq_size = q.num_elements(), dbias_size = dbias ? dbias->num_elements() : 0;
  cpu::parallel_for(tasks, threads, [&](int64_t task, int thread) {
    float*& dq_acc = dq_copies[static_cast<size_t>(thread)];
    float*& dbias_acc = dbias_copies[static_cast<size_t>(thread)];
    if (!dq_acc) {
      Scratch& w = scratch();
      grow(w.dq, dq_size);
      std::fill_n(w.dq.data(), dq_size, 0.0f);
      dq_acc = w.dq.data();
      if (dbias) {
        grow(w.dbias, dbias_size);
        std::fill_n(w.dbias.data(), dbias_size, 0.0f);
        dbias_acc = w.dbias.data();
      }
    }
    const int64_t j0 = (task % nkv) * c.bkv, bi = task / nkv;
    key_block(c, lse_rows.data(), delta.data(), bi / p.h, bi % p.h, j0, std::min(c.bkv, p.t - j0),
              dq_acc, dbias_acc, dk, dv);
  });
  reduce_copies(dq_copies, q.num_elements(), c.scale, p.dtype, dq.raw(), threads);
  if (dbias) {
    reduce_copies(dbias_copies, dbias->num_elements(), 1.0f, dbias->dtype(), dbias->raw(), threads);
  }
}

}  // namespace tokamax
