// The flash-attention core, backward (every attention op's CPU VJP): what the kernel's driver
// (forward.cc / vjp.cc) hands each task, and its task body (vjp_task.cc).
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
#include "ops/common/flash_attention/problem.h"
#include "ops/common/flash_attention/vjp.h"
#include "ops/framework/tensor.h"

namespace tokamax {

// The problem, its inputs and the block extents, shared read-only by every task.
struct VjpTaskContext {
  const FlashAttentionProblem& p;
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
    return {x, q + p.q_at(b, r0, hq) * xs, p.q_stride(), false};
  }
  GemmOperand dout_rows(int64_t b, int64_t hq, int64_t r0) const {
    return {x, dout + p.out_at(b, r0, hq) * xs, p.out_stride(), false};
  }
  GemmOperand k_rows(int64_t b, int64_t i, int64_t j0, bool transposed) const {
    return {x, k + p.k_at(b, j0, i) * xs, p.k_stride(), transposed};
  }
  GemmOperand v_rows(int64_t b, int64_t i, int64_t j0, bool transposed) const {
    return {x, v + p.v_at(b, j0, i) * xs, p.v_stride(), transposed};
  }
};

// Per-thread scratch of a row-block task, grown once and kept between calls: the task's strips
// of logits (then P), dP (then dS) and the cap's gate, [ceil(t / bkv)][bq][bkv] each (one
// [rows, cols] tile per key block); its dq accumulator [bq, D]; rows of dout / out; P and dS
// rounded to bf16 (native_all); and its q and dout rows, packed once for every key block.
struct VjpScratch {
  std::vector<float> s, gate, dp, dq, row, row2, m, l;
  std::vector<uint16_t> p16, ds16;  // P and dS rounded to bf16 bits (native_all)
  GemmPackStorage rows_storage[4];
};
VjpScratch& vjp_scratch();

inline void grow(std::vector<float>& x, int64_t n) {
  if (static_cast<int64_t>(x.size()) < n) x.resize(static_cast<size_t>(n));
}

// k and v of one key block (keys j0.. of kv head i), packed once per call for every row block
// of its q heads: k^T as the rhs of S, v^T as the rhs of dP, k as the rhs of dq.
struct VjpKeyOperands {
  PackedGemmOperand kt, vt, k;
};
// `storage` holds three buffers (grown, kept by the caller).
VjpKeyOperands vjp_pack_keys(const VjpTaskContext& c, int64_t b, int64_t i, int64_t j0,
                             int64_t cols, GemmPackStorage* storage);

// Where a row-block task adds what it owns only in part: dk and dv of every key (f32, in k's and
// v's layouts, before the scale), and dbias (null without a bias) as stored. Each thread
// has its own copies; the driver sums them.
struct VjpKeyAccumulators {
  float* dk = nullptr;
  float* dv = nullptr;
  float* dbias = nullptr;
};

// The task: every gradient term of rows [r0, r0 + rows) of q head hq. Its q and dout rows are
// packed once. Sweep 1, per key block that the rows can see: S = q k^T and dP = dout v^T into
// the scratch strips (the two products of inputs), the logits finished (scale, bias, cap,
// masks) and each row's running maximum. Then P = exp(S - lse) in place (lse from the maximum
// and the sum of the shifted exponentials, or given), and Dr = rowsum(P dP) (or dout . out when
// out is given). Sweep 2, per visible key block: dS = P (dP - Dr) (cap') in place; dv += P^T
// dout and dk += dS^T q into the thread's accumulators, dq += dS k into the task's own rows,
// which it scales and stores at the end. Five products per block pair, and nothing [T, t]:
// the strips are [bq, t]. keys[j0 / bkv] are the packed key blocks of hq's kv head. The rows'
// lse and Dr go to row_stats where asked for.
void vjp_row_block(const VjpTaskContext& c, const float* lse_in, const char* out, int64_t b,
                   int64_t hq, int64_t r0, int64_t rows, const VjpKeyOperands* keys,
                   const VjpKeyAccumulators& acc, Tensor& dq, const FlashVjpRowStats& row_stats);

}  // namespace tokamax
