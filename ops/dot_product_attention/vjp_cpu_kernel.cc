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
// (unless given too) only S; with both, pass 1 reads out and dout and nothing else. Each key
// block's k^T and v are packed once per call, in waves of kv heads, for all the row blocks of
// their q heads.
// Pass 2, one task per (b, kv head, key block): for every row block of the g q heads that can
// see the block, S is recomputed and P = exp(S - lse) (exactly the forward's P), then
//   dv += P^T dout,  dP = dout v^T,  dS = P (dP - Dr) (cap'),  dk += dS^T q,  dq += dS k
// The task owns its [bkv, D] and [bkv, d] accumulators, so dk and dv need no reduction; dq
// rows are shared by every key block, so each thread adds into its own f32 copy of dq (O(T D)
// per thread, not O(T t); kept between calls) and the copies are summed at the end (dbias
// likewise). The five block products run on cpu_gemm_f32. Inputs are packed once per use, not
// once per block pair: q and dout row blocks once per call, in waves of kv heads (both layouts
// each: lhs of S / dP, rhs of dk / dv), and k^T, v^T, k once per key block (pass 1's k^T and v
// likewise); only P, P^T, dS and dS^T are packed per block pair. Nothing [T, t] is ever
// allocated. bf16 inputs (bf16_path): native_dot runs S and dP, the products of two inputs, on
// vdpbf16ps; native_all also dv, dk, dq and pass 1's P v, with P and dS rounded to bf16 for them
// (f32 accumulation throughout).
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
                                          Tensor* dbias, int64_t wave_bytes) {
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
  const int64_t nkv = ceil_div(p.t, c.bkv);
  const int64_t g = p.groups();
  // The kv heads run in waves: each wave first packs k^T and v of its key blocks (once, for the
  // g nq row blocks that read each), then runs its q heads' row blocks; as many kv heads as fit
  // in wave_bytes of packed keys (one at least). Given lse and out, pass 1 runs no product and
  // packs nothing (one wave); given out alone, only S: no v.
  const bool keys_needed = !(out_in && lse_in), with_v = !out_in;
  const int64_t key_head_bytes = round_up(p.t, 64) * (p.D + (with_v ? p.d : 0)) * 4;
  const int64_t key_wave_heads =
      keys_needed
          ? std::clamp<int64_t>(wave_bytes / std::max<int64_t>(key_head_bytes, 1), 1, p.B * p.h)
          : p.B * p.h;
  // Kept between calls, grown as needed: two buffers per packed key block.
  thread_local std::vector<std::vector<float>> key_storage_of_caller;
  thread_local std::vector<VjpKeyOperands> keys_of_caller;
  std::vector<std::vector<float>>& key_storage = key_storage_of_caller;
  std::vector<VjpKeyOperands>& keys = keys_of_caller;
  for (int64_t wave0 = 0; wave0 < p.B * p.h; wave0 += key_wave_heads) {
    const int64_t heads = std::min(key_wave_heads, p.B * p.h - wave0);
    if (keys_needed) {
      const int64_t blocks = heads * nkv;
      if (static_cast<int64_t>(key_storage.size()) < 2 * blocks) key_storage.resize(2 * blocks);
      if (static_cast<int64_t>(keys.size()) < blocks) keys.resize(blocks);
      cpu::parallel_for(blocks, threads, [&](int64_t block, int) {
        const int64_t bi = wave0 + block / nkv, j0 = block % nkv * c.bkv;
        keys[block] = vjp_pack_keys(c, bi / p.h, bi % p.h, j0, std::min(c.bkv, p.t - j0), with_v,
                                    key_storage.data() + 2 * block);
      });
    }
    // Per kv head: g q heads x nq row blocks.
    cpu::parallel_for(heads * g * nq, threads, [&](int64_t task, int) {
      const int64_t head = task / (g * nq), bi = wave0 + head;
      const int64_t hq = (bi % p.h) * g + task / nq % g, r0 = task % nq * c.bq;
      vjp_row_statistics(c, lse_in, out_in, bi / p.h, hq, r0, std::min(c.bq, p.T - r0),
                         keys_needed ? keys.data() + head * nkv : nullptr, lse_rows.data(),
                         delta.data());
    });
  }

  // Pass 2: dk, dv per key block; dq and dbias into per-thread copies, summed afterwards. The kv
  // heads run in waves: each wave first packs the q and dout row blocks of its q heads (once,
  // for all its key blocks), then runs its key blocks. A wave holds as many kv heads as fit in
  // wave_bytes of packed rows (one at least), so the packing stays O(T D), never O(B H T D).
  const int used = cpu::thread_pool().threads_for(p.B * p.h * nkv, threads);
  // The copies of thread index k live in dq_store[k] / dbias_store[k], kept between calls (a
  // fresh 4 MiB allocation per call would be zeroed page by page by the kernel); copies[k]
  // points at them once index k has zeroed them for this call. Indexed by the loop's thread
  // index, not owned by an OS thread: every wave's loop sees the same buffers.
  // (The loop bodies run on other threads: they reach these thread_locals through references.)
  thread_local std::vector<std::vector<float>> dq_store_of_caller, dbias_store_of_caller;
  std::vector<std::vector<float>>& dq_store = dq_store_of_caller;
  std::vector<std::vector<float>>& dbias_store = dbias_store_of_caller;
  const size_t copies = static_cast<size_t>(std::max(used, 1));
  if (dq_store.size() < copies) dq_store.resize(copies);
  if (dbias_store.size() < copies) dbias_store.resize(copies);
  std::vector<float*> dq_copies(copies, nullptr);
  std::vector<float*> dbias_copies(copies, nullptr);
  const int64_t dq_size = q.num_elements(), dbias_size = dbias ? dbias->num_elements() : 0;
  const int64_t head_bytes = g * round_up(p.T, 64) * 2 * (p.D + p.d) * 4;
  const int64_t wave_heads = std::clamp<int64_t>(wave_bytes / std::max<int64_t>(head_bytes, 1),
                                                 1, p.B * p.h);
  // Kept between calls, grown as needed: four buffers per packed row block.
  thread_local std::vector<std::vector<float>> storage_of_caller;
  thread_local std::vector<VjpRowOperands> packed_of_caller;
  std::vector<std::vector<float>>& storage = storage_of_caller;
  std::vector<VjpRowOperands>& packed = packed_of_caller;
  for (int64_t wave0 = 0; wave0 < p.B * p.h; wave0 += wave_heads) {
    const int64_t heads = std::min(wave_heads, p.B * p.h - wave0);
    const int64_t blocks = heads * g * nq;  // per kv head: g q heads x nq row blocks
    if (static_cast<int64_t>(storage.size()) < 4 * blocks) storage.resize(4 * blocks);
    if (static_cast<int64_t>(packed.size()) < blocks) packed.resize(blocks);
    cpu::parallel_for(blocks, threads, [&](int64_t block, int) {
      const int64_t bi = wave0 + block / (g * nq), hq = (bi % p.h) * g + block / nq % g;
      const int64_t r0 = block % nq * c.bq;
      packed[block] = vjp_pack_rows(c, bi / p.h, hq, r0, std::min(c.bq, p.T - r0),
                                    storage.data() + 4 * block);
    });
    cpu::parallel_for(heads * nkv, threads, [&](int64_t task, int thread) {
      float*& dq_acc = dq_copies[static_cast<size_t>(thread)];
      float*& dbias_acc = dbias_copies[static_cast<size_t>(thread)];
      if (!dq_acc) {
        std::vector<float>& dq_copy = dq_store[static_cast<size_t>(thread)];
        grow(dq_copy, dq_size);
        std::fill_n(dq_copy.data(), dq_size, 0.0f);
        dq_acc = dq_copy.data();
        if (dbias) {
          std::vector<float>& dbias_copy = dbias_store[static_cast<size_t>(thread)];
          grow(dbias_copy, dbias_size);
          std::fill_n(dbias_copy.data(), dbias_size, 0.0f);
          dbias_acc = dbias_copy.data();
        }
      }
      const int64_t j0 = (task % nkv) * c.bkv, head = task / nkv, bi = wave0 + head;
      vjp_key_block(c, lse_rows.data(), delta.data(), bi / p.h, bi % p.h, j0,
                    std::min(c.bkv, p.t - j0), packed.data() + head * g * nq, dq_acc, dbias_acc,
                    dk, dv);
    });
  }
  reduce_copies(dq_copies, q.num_elements(), c.scale, p.dtype, dq.raw(), threads);
  if (dbias) {
    reduce_copies(dbias_copies, dbias->num_elements(), 1.0f, dbias->dtype(), dbias->raw(), threads);
  }
}

}  // namespace tokamax
