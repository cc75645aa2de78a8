// The flash-attention core, backward (every attention op's CPU VJP): the flash-style backward, one
// pass of row-block tasks on the shared GEMM engine.
//
// Dimensions: as vjp.h (B, T, t, H, h, g, D, d, bq, bkv); rows / cols the extents of
// one [bq, bkv] block at the edges; r0, j0 its first row and key.
//
// One task per (b, q head, row block) (vjp_row_block): S = q k^T and dP = dout v^T for every key
// block its rows can see, kept in [bq, t] strips of the thread's scratch; the row statistics
// from them (lse unless given, and Dr = rowsum(P dP), or dout . out when out is given); then,
// per key block, dS = P (dP - Dr) (cap'), dv += P^T dout, dk += dS^T q, dq += dS k. That is the
// five products of the backward and no more: the forward's P v is never recomputed for Dr
// (a two-pass design would run it and S once more in a first pass, 7 products; the strips
// cost 2 bq t floats per thread, O(T), never [T, t]). The task owns its dq rows; dk and dv
// (summed over the g q heads of a kv head and over row blocks) and dbias go into per-thread f32
// copies (O(t D) per thread; kept between calls), summed at the end. The kv heads run in waves:
// each wave packs the k^T, v^T and k of its key blocks once, for all the row blocks of its q
// heads, as many kv heads as fit in wave_bytes. Only P^T, dS and dS^T are packed per block pair.
// bf16 inputs (bf16_path): native_dot runs S and dP, the products of two inputs, on vdpbf16ps;
// native_all also dv, dk and dq, with P and dS rounded to bf16 for them (f32 accumulation
// throughout).
#include "ops/common/flash_attention/vjp.h"

#include <algorithm>
#include <vector>

#include "backends/cpu/thread_pool.h"
#include "ops/common/cpu_gemm/amx_layout.h"
#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/common/cpu_softmax.h"
#include "ops/common/flash_attention/vjp_task.h"
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

void flash_attention_vjp_cpu(const FlashAttentionProblem& p, const FlashVjpOptions& options,
                             const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* bias,
                             const Tensor* mask, const Tensor& dout, const Tensor* lse,
                             const Tensor* out, Tensor& dq, Tensor& dk, Tensor& dv, Tensor* dbias,
                             const FlashVjpRowStats& row_stats, int64_t wave_bytes) {
  if (p.dtype == DType::kF64) {
    throw NotImplemented("cpu flash attention backward: f64 (the GEMMs run in f32)");
  }
  if (p.kv_pages) throw NotImplemented("cpu flash attention backward: paged K and V");
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
                   options.block_q,
                   options.block_kv,
                   CpuGemmOptions{},
                   false};
  if (mask) c.mask_at = p.mask_layout();
  c.inputs_gemm.engine = options.engine;
  c.round_p = options.round_p && options.engine != GemmEngine::kF32Fma;
  if (c.inputs_gemm.engine == GemmEngine::kAmxBf16 &&
      (p.dtype != DType::kBF16 || !gemm_has_amx_bf16())) {
    throw NotImplemented("cpu flash attention backward: amx needs bf16 inputs and AMX tiles");
  }
  if (c.inputs_gemm.engine == GemmEngine::kBf16Dot &&
      (p.dtype != DType::kBF16 || !gemm_has_native_bf16())) {
    throw NotImplemented(
        "cpu flash attention backward: native_dot needs bf16 inputs and "
        "avx512_bf16");
  }
  if (bias) {
    c.bias_at = p.bias_layout();
    c.bias.resize(static_cast<size_t>(bias->num_elements()));
    for (int64_t e = 0; e < bias->num_elements(); ++e) c.bias[e] = static_cast<float>(bias->get(e));
  }
  const int threads = options.num_threads;
  const float* lse_in = lse ? lse->data<float>() : nullptr;
  const char* out_in = out ? static_cast<const char*>(out->raw()) : nullptr;
  const int64_t nq = ceil_div(p.T, c.bq);
  const int64_t nkv = ceil_div(p.t, c.bkv);
  const int64_t g = p.groups();
  // The per-thread copies of dk, dv and dbias of thread index k live in store[k], kept between
  // calls (a fresh allocation per call would be zeroed page by page by the kernel);
  // accumulators[k] points at them once index k has zeroed them for this call. Indexed by the
  // loop's thread index, not owned by an OS thread: every wave's loop sees the same buffers.
  // (The loop bodies run on other threads: they reach these thread_locals through references.)
  const int used = cpu::thread_pool().threads_for(p.B * p.H * nq, threads);
  const size_t copies = static_cast<size_t>(std::max(used, 1));
  thread_local std::vector<std::vector<float>> dk_store_of_caller, dv_store_of_caller,
      dbias_store_of_caller;
  std::vector<std::vector<float>>& dk_store = dk_store_of_caller;
  std::vector<std::vector<float>>& dv_store = dv_store_of_caller;
  std::vector<std::vector<float>>& dbias_store = dbias_store_of_caller;
  for (auto* store : {&dk_store, &dv_store, &dbias_store}) {
    if (store->size() < copies) store->resize(copies);
  }
  std::vector<VjpKeyAccumulators> accumulators(copies);
  const int64_t dk_size = k.num_elements(), dv_size = v.num_elements();
  const int64_t dbias_size = dbias ? dbias->num_elements() : 0;
  auto zeroed = [](std::vector<float>& buffer, int64_t n) {
    grow(buffer, n);
    std::fill_n(buffer.data(), n, 0.0f);
    return buffer.data();
  };
  // Waves of kv heads: the packed k^T, v^T and k of a wave's key blocks stay under wave_bytes
  // (one kv head at least).
  const int64_t key_head_bytes = round_up(p.t, 64) * (2 * p.D + p.d) * 4;
  const int64_t wave_heads =
      std::clamp<int64_t>(wave_bytes / std::max<int64_t>(key_head_bytes, 1), 1, p.B * p.h);
  // Kept between calls, grown as needed: three buffers per packed key block.
  thread_local std::vector<GemmPackStorage> key_storage_of_caller;
  thread_local std::vector<VjpKeyOperands> keys_of_caller;
  std::vector<GemmPackStorage>& key_storage = key_storage_of_caller;
  std::vector<VjpKeyOperands>& keys = keys_of_caller;
  for (int64_t wave0 = 0; wave0 < p.B * p.h; wave0 += wave_heads) {
    const int64_t heads = std::min(wave_heads, p.B * p.h - wave0);
    const int64_t blocks = heads * nkv;
    if (static_cast<int64_t>(key_storage.size()) < 3 * blocks) key_storage.resize(3 * blocks);
    if (static_cast<int64_t>(keys.size()) < blocks) keys.resize(blocks);
    cpu::parallel_for(blocks, threads, [&](int64_t block, int) {
      const int64_t bi = wave0 + block / nkv, j0 = block % nkv * c.bkv;
      keys[block] = vjp_pack_keys(c, bi / p.h, bi % p.h, j0, std::min(c.bkv, p.t - j0),
                                  key_storage.data() + 3 * block);
    });
    // Per kv head: g q heads x nq row blocks.
    cpu::parallel_for(heads * g * nq, threads, [&](int64_t task, int thread) {
      const size_t k_index = static_cast<size_t>(thread);
      VjpKeyAccumulators& acc = accumulators[k_index];
      if (!acc.dk) {
        acc.dk = zeroed(dk_store[k_index], dk_size);
        acc.dv = zeroed(dv_store[k_index], dv_size);
        if (dbias) acc.dbias = zeroed(dbias_store[k_index], dbias_size);
      }
      const int64_t head = task / (g * nq), bi = wave0 + head;
      const int64_t hq = (bi % p.h) * g + task / nq % g, r0 = task % nq * c.bq;
      vjp_row_block(c, lse_in, out_in, bi / p.h, hq, r0, std::min(c.bq, p.T - r0),
                    keys.data() + head * nkv, acc, dq, row_stats);
    });
  }
  // One field of every thread index's accumulators (null where an index ran no task).
  auto copies_of = [&](float* VjpKeyAccumulators::*field) {
    std::vector<float*> out;
    for (const VjpKeyAccumulators& a : accumulators) out.push_back(a.*field);
    return out;
  };
  reduce_copies(copies_of(&VjpKeyAccumulators::dk), dk_size, c.scale, dk.dtype(), dk.raw(),
                threads);
  reduce_copies(copies_of(&VjpKeyAccumulators::dv), dv_size, 1.0f, dv.dtype(), dv.raw(), threads);
  if (dbias) {
    reduce_copies(copies_of(&VjpKeyAccumulators::dbias), dbias_size, 1.0f, dbias->dtype(),
                  dbias->raw(), threads);
  }
}

}  // namespace tokamax
