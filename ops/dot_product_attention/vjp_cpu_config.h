// dot_product_attention_vjp on CPU: the "cpu" implementation's config, heuristics and search
// space.
//
// Dimensions.
//   B      flattened batch;  T, t  query and key/value positions
//   H, h   query and key/value heads, g = H / h
//   D, d   q/k and v head dimensions
//   bq     query rows per block (block_q);  bkv  keys per block and per dk/dv task (block_kv)
#pragma once

#include <tuple>
#include <vector>

#include "backends/device.h"
#include "ops/dot_product_attention/vjp_base.h"

namespace tokamax {

struct CpuAttentionVjpConfig {
  // bq: query rows of one block: the first pass's task (per q head) and the inner step of the
  // dk/dv tasks; S, P, dP and dS are [bq, bkv] f32 per thread.
  int block_q = 128;
  // bkv: keys of one dk/dv task, whose [bkv, D] and [bkv, d] f32 accumulators it owns alone.
  int block_kv = 128;
  int num_threads = 0;  // 0 = all cores

  void validate() const;
  template <class V>
  void visit(V&& v) {
    v("block_q", block_q);
    v("block_kv", block_kv);
    v("num_threads", num_threads);
  }
  auto key() const { return std::make_tuple(block_q, block_kv, num_threads); }
};

CpuAttentionVjpConfig cpu_attention_vjp_heuristics_config(const AttentionVjpProblem& p,
                                                          const Device& device);
std::vector<CpuAttentionVjpConfig> cpu_attention_vjp_autotuning_configs(
    const AttentionVjpProblem& p, const Device& device);

}  // namespace tokamax
