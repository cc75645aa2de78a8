// ragged_paged_attention on CPU: one kernel for the whole ragged batch.
//
// Dimensions: as base.h; bq tokens per task, M = g bq rows (the task's tokens times the query
// heads of its kv head), n keys of one chunk of pages.
#pragma once

#include "backends/device.h"
#include "ops/framework/tensor.h"
#include "ops/ragged_paged_attention/base.h"
#include "ops/ragged_paged_attention/cpu_config.h"

namespace tokamax {

// The cache update (a copy of kv_cache with the new rows), then one task per (active sequence,
// kv head, block of bq of its tokens), parallel: the block's queries for the g heads of the kv
// head as one [M, D] f32 tile (divided by q_scale), then over the union of the rows' visible
// keys in chunks of whole pages (256 keys): each page's K and V rows read where they are in the
// cache (row stride 2 Hkv Dp) and widened (fp8: decoded) into the task's f32 staging, which stays
// in L2; S = Q K^T for the chunk, scale, cap and each row's key range, the online softmax, O +=
// P V. A block of at most kCpuStreamRows rows (a decode token's query heads) takes every kv
// head of its sequence instead and streams: each K row read in place once for its rows
// (row_dots_f32), P V on the streaming kernel with V in place. Every GQA head of the kv head
// shares each page load; the cache is never gathered into a copy in memory. Then O / sum /
// v_scale in out_dtype, lse. Invalid tokens are zeros (lse -inf). With prefill=core, sequences
// of more rows than a decode step run first, one at a time, on the flash-attention core
// (cpu_core.h), each parallel over its own tasks.
void ragged_paged_attention_cpu_kernel(const RaggedPagedAttentionProblem& p,
                                       const CpuRpaConfig& config, const Device& device,
                                       const TensorMap& inputs,  // queries, keys, values, kv_cache
                                       // Outputs.
                                       TensorMap& outputs);  // out, updated_kv_cache, lse

}  // namespace tokamax
