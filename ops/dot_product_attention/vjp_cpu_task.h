// dot_product_attention_vjp on CPU: what the kernel's driver (vjp_cpu_kernel.cc) hands each task,
// and the task bodies of its two passes (vjp_cpu_task.cc).
//
// Dimensions.
//   B      flattened batch;  T, t  query and key/value positions
//   H, h   query and key/value heads, g = H / h
//   D, d   q/k and v head dimensions
//   bq, bkv  query rows and keys of one block; rows / cols their extents at the edges
#pragma once

#include <cstdint>
#include <vector>

#include "ops/common/cpu_gemm/gemm.h"
#include "ops/dot_product_attention/base.h"
#include "ops/framework/tensor.h"

namespace tokamax {

// The problem, its inputs and the block extents, shared read-only by every task.
struct VjpTaskContext {
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
  // The options of the products with P or dS (dv, dk, dq).
  CpuGemmOptions weights_gemm() const { return inputs_gemm_if(round_p); }
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

// Per-thread scratch: the [bq, bkv] tiles of one block and the dk/dv accumulators of a pass-2
// task. It grows once and is kept between calls.
struct VjpScratch {
  std::vector<float> s, gate, dp, acc, acc2, row, row2, m, l;
  std::vector<uint16_t> p16, ds16;  // P and dS rounded to bf16 bits (native_all)
  // Operands packed once per task and reused by every block of the other side: pass 1's q
  // rows; pass 2's k^T (S), v^T (dP) and k (dq). (Pass 1's key blocks are packed by the
  // driver: vjp_pack_keys.)
  std::vector<float> q_packed, kt_packed, vt_packed, k_packed;
};
VjpScratch& vjp_scratch();

inline void grow(std::vector<float>& x, int64_t n) {
  if (static_cast<int64_t>(x.size()) < n) x.resize(static_cast<size_t>(n));
}

// k and v of one key block (keys j0.. of kv head i) packed for every row block of pass 1: k^T
// as the rhs of S, v (with_v) as the rhs of P v. Packed once per call instead of once per (row
// block, key block) pair.
struct VjpKeyOperands {
  PackedGemmOperand kt, v;
};
// `storage` holds two buffers (grown, kept by the caller).
VjpKeyOperands vjp_pack_keys(const VjpTaskContext& c, int64_t b, int64_t i, int64_t j0,
                             int64_t cols, bool with_v, std::vector<float>* storage);

// Pass 1 task: lse and Dr = rowsum(dout * out) of rows [r0, r0 + rows) of q head hq into
// lse_out and delta ([B, H, T] f32 each). lse_in (or null) is the given lse, out (or null) the
// given forward output. keys[j0 / bkv] are the packed key blocks of q head hq's kv head (v
// packed unless out is given; unused, may be null, when lse and out are both given).
void vjp_row_statistics(const VjpTaskContext& c, const float* lse_in, const char* out, int64_t b,
                        int64_t hq, int64_t r0, int64_t rows, const VjpKeyOperands* keys,
                        float* lse_out, float* delta);

// q and dout of one row block (rows r0.. of q head hq) packed for every key block of pass 2: q
// as the lhs of S and the rhs of dk, dout as the lhs of dP and the rhs of dv. Packed once per
// call instead of once per key block.
struct VjpRowOperands {
  PackedGemmOperand q_lhs, q_rhs, dout_lhs, dout_rhs;
};
// `storage` holds four buffers (grown, kept by the caller).
VjpRowOperands vjp_pack_rows(const VjpTaskContext& c, int64_t b, int64_t hq, int64_t r0,
                             int64_t rows, std::vector<float>* storage);

// Pass 2 task: dk and dv of keys [j0, j0 + cols) of kv head i, written to dk and dv; dq (before
// the scale) and dbias added into the thread's copies dq_acc [B, T, H, D] and dbias_acc (null
// without a bias).
// rows[(hq - i g) * ceil(T / bq) + r0 / bq] are the packed row blocks of kv head i's q heads.
void vjp_key_block(const VjpTaskContext& c, const float* lse, const float* delta, int64_t b,
                   int64_t i, int64_t j0, int64_t cols, const VjpRowOperands* rows,
                   float* dq_acc, float* dbias_acc, Tensor& dk, Tensor& dv);

}  // namespace tokamax
