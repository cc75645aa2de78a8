// ragged_paged_attention's prefill sequences on the flash-attention core (cpu_core.h).
#include "ops/ragged_paged_attention/cpu_core.h"

#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/common/flash_attention/forward.h"

namespace tokamax {

std::string rpa_core_refusal(const RaggedPagedAttentionProblem& p) {
  if (p.kv_dtype != p.q_dtype || p.out_dtype != p.q_dtype) {
    return "the flash-attention core reads queries and the cache and writes out in one dtype";
  }
  if (p.v_scale != 1.0) return "the flash-attention core divides by no v_scale";
  if (p.sliding_window > 0 && !p.causal) {
    return "the flash-attention core takes a sliding window only with use_causal_mask";
  }
  return "";
}

bool rpa_sequence_on_core(const RaggedPagedAttentionProblem& p, int64_t s) {
  return (p.cu_q_lens[s + 1] - p.cu_q_lens[s]) * p.groups() > kCpuStreamRows;
}

FlashAttentionProblem rpa_flash_problem(const RaggedPagedAttentionProblem& p, int64_t s) {
  const int64_t q_len = p.cu_q_lens[s + 1] - p.cu_q_lens[s];
  FlashAttentionProblem f;
  f.batch = {1};
  f.B = 1;
  f.T = q_len;
  f.t = p.kv_lens[s];
  f.H = p.Hq;
  f.h = p.Hkv;
  f.D = p.D;
  f.d = p.D;
  f.dtype = p.q_dtype;
  f.logits_scale = p.sm_scale / (p.q_scale * p.k_scale);
  f.logits_soft_cap = p.soft_cap;
  f.is_causal = p.causal;
  f.causal_offset = p.kv_lens[s] - q_len;
  if (p.causal && p.sliding_window > 0) f.causal_window = p.sliding_window;
  FlashKvPages pages;
  pages.pages.assign(p.page_indices.begin() + s * p.P, p.page_indices.begin() + (s + 1) * p.P);
  pages.pages_per_batch = p.P;
  pages.page_size = p.page_size;
  pages.row_stride = 2 * p.Hkv * p.Dp;
  pages.page_stride = p.page_size * pages.row_stride;
  pages.head_stride = 2 * p.Dp;
  pages.value_offset = p.Dp;
  f.kv_pages = std::move(pages);
  return f;
}

CpuAttentionConfig rpa_core_config(const FlashAttentionProblem& f, int num_threads,
                                   const Device& device) {
  CpuAttentionConfig c = cpu_attention_heuristics_config(f, device);
  c.bf16_path = "convert_f32";
  c.num_threads = num_threads;
  return c;
}

void rpa_run_sequence_on_core(const RaggedPagedAttentionProblem& p, int64_t s, int num_threads,
                              const Device& device, const Tensor& queries, const Tensor& cache,
                              Tensor& out, float* lse) {
  const FlashAttentionProblem f = rpa_flash_problem(p, s);
  if (f.T == 0) return;
  const int64_t t0 = p.cu_q_lens[s];
  const size_t row_bytes = static_cast<size_t>(p.Hq * p.D) * dtype_size(p.q_dtype);
  const TensorSpec rows{p.q_dtype, {1, f.T, p.Hq, p.D}};
  const Tensor q = queries.view(rows, static_cast<size_t>(t0) * row_bytes);
  Tensor o = out.view(rows, static_cast<size_t>(t0) * row_bytes);
  Tensor f_lse;
  if (lse) f_lse = Tensor(TensorSpec{DType::kF32, {1, p.Hq, f.T}});
  const CpuAttentionConfig c = rpa_core_config(f, num_threads, device);
  flash_attention_cpu(f, cpu_attention_kernel_options(f, c), q, cache, cache, nullptr, nullptr, o,
                      lse ? &f_lse : nullptr);
  if (!lse) return;
  const float* from = f_lse.data<float>();
  for (int64_t hq = 0; hq < p.Hq; ++hq) {
    for (int64_t r = 0; r < f.T; ++r) lse[(t0 + r) * p.Hq + hq] = from[hq * f.T + r];
  }
}

}  // namespace tokamax
