// ragged_paged_attention's prefill sequences on the flash-attention core (ops/common/
// flash_attention): the core's problem for one sequence, its K and V read from the cache's pages
// in place.
//
// Dimensions: as base.h.
#pragma once

#include <cstdint>
#include <string>

#include "backends/device.h"
#include "ops/common/flash_attention/config.h"
#include "ops/common/flash_attention/problem.h"
#include "ops/framework/tensor.h"
#include "ops/ragged_paged_attention/base.h"

namespace tokamax {

// Why the core cannot run these args ("" when it can): it reads q, the cache and writes out in
// one dtype (f32, bf16 or f16; no fp8 cache), divides by no v_scale, and takes a sliding window
// only under the causal mask (its band is relative to the causal diagonal).
std::string rpa_core_refusal(const RaggedPagedAttentionProblem& p);

// Whether sequence s runs on the core under a core config: more query rows (tokens times g) than
// the streaming decode kernel takes.
bool rpa_sequence_on_core(const RaggedPagedAttentionProblem& p, int64_t s);

// The core's problem for sequence s: one batch of its q_len rows over its kv_lens[s] keys, K and
// V in the cache's pages (row stride 2 Hkv Dp, V Dp after K), causal with offset kv_len - q_len
// (and the sliding window as the band), scale sm_scale / (q_scale k_scale), the soft cap.
FlashAttentionProblem rpa_flash_problem(const RaggedPagedAttentionProblem& p, int64_t s);

// The core's config for the sequence: its heuristics with f32 P V (convert_f32: upstream's
// reference keeps P in f32, and so does this op's error model) and the op's threads.
CpuAttentionConfig rpa_core_config(const FlashAttentionProblem& f, int num_threads,
                                   const Device& device);

// Runs sequence s on the core: its rows of out (and of lse, when given) from queries and the
// (updated) cache.
void rpa_run_sequence_on_core(const RaggedPagedAttentionProblem& p, int64_t s, int num_threads,
                              const Device& device,
                              // Inputs.
                              const Tensor& queries,  // [Tq, Hq, D]
                              const Tensor& cache,    // [pages, page_size, 2 Hkv, Dp]
                              // Outputs.
                              Tensor& out,  // [Tq, Hq, D]
                              float* lse);  // [Tq, Hq] or null

}  // namespace tokamax
