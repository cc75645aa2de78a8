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
#include <vector>

#include "backends/cpu/thread_pool.h"
#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/common/cpu_softmax.h"
#include "ops/dot_product_attention/vjp_cpu_task.h"
#include "ops/framework/errors.h"

namespace tokamax {
namespace {

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
  VjpTaskContext c{p,
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
                   config.block_kv,
                   CpuGemmOptions{},
                   false};
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
    vjp_row_statistics(c, lse_in, out_in, bh / p.H, bh % p.H, r0, std::min(c.bq, p.T - r0),
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
      VjpScratch& w = vjp_scratch();
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
    vjp_key_block(c, lse_rows.data(), delta.data(), bi / p.h, bi % p.h, j0,
                  std::min(c.bkv, p.t - j0), dq_acc, dbias_acc, dk, dv);
  });
  reduce_copies(dq_copies, q.num_elements(), c.scale, p.dtype, dq.raw(), threads);
  if (dbias) {
    reduce_copies(dbias_copies, dbias->num_elements(), 1.0f, dbias->dtype(), dbias->raw(), threads);
  }
}

}  // namespace tokamax
