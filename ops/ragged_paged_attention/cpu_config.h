// ragged_paged_attention on CPU: the "cpu" implementation's config, invariants and heuristics.
//
// Dimensions: as base.h; bq query tokens of one sequence per task.
#pragma once

#include <string>
#include <tuple>
#include <vector>

#include "backends/device.h"
#include "ops/ragged_paged_attention/base.h"

namespace tokamax {

struct CpuRpaConfig {
  int block_q = 32;  // bq: a task's query tokens (all of one sequence and kv head)
  // "core": each sequence of more query rows than a decode step (cpu_core.h) runs on the
  // flash-attention core, K and V packed once per kv head from the pages for all of its query
  // blocks; the rest as below. "staged": every sequence in this op's tasks (each query block
  // widens its own copy of the K/V chunks).
  std::string prefill = "core";
  int num_threads = 0;  // 0 = all cores

  void validate() const;
  template <class V>
  void visit(V&& v) {
    v("block_q", block_q);
    v("prefill", prefill);
    v("num_threads", num_threads);
  }
  auto key() const { return std::make_tuple(block_q, prefill, num_threads); }
};

// Threads, and prefill=core only where the core runs the args (rpa_core_refusal).
void check_rpa_config(const RaggedPagedAttentionProblem& p, const CpuRpaConfig& c,
                      const Device& device);
CpuRpaConfig cpu_rpa_heuristics_config(const RaggedPagedAttentionProblem& p, const Device& device);
std::vector<CpuRpaConfig> cpu_rpa_autotuning_configs(const RaggedPagedAttentionProblem& p,
                                                     const Device& device);

}  // namespace tokamax
