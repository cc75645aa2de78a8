// ragged_paged_attention on CPU: config validation, heuristics and search space.
#include "ops/ragged_paged_attention/cpu_config.h"

#include <algorithm>
#include <string>

#include "backends/cpu/cpu_device.h"
#include "ops/common/cpu_checks.h"
#include "ops/ragged_paged_attention/cpu_core.h"

namespace tokamax {

void CpuRpaConfig::validate() const {
  require_config(block_q >= 1 && block_q <= 4096, "block_q",
                 [&] { return "block_q is " + std::to_string(block_q) + "; expected 1..4096"; });
  require_config(prefill == "core" || prefill == "staged", "prefill",
                 [&] { return "prefill is '" + prefill + "'; expected 'core' or 'staged'"; });
  require_config(num_threads >= 0, "num_threads", [&] {
    return "num_threads is " + std::to_string(num_threads) + "; expected >= 0 (0 = all cores)";
  });
}

void check_rpa_config(const RaggedPagedAttentionProblem& p, const CpuRpaConfig& c,
                      const Device& device) {
  require_num_threads(c.num_threads, device);
  if (c.prefill == "core") {
    const std::string refusal = rpa_core_refusal(p);
    require_config(refusal.empty(), "prefill", [&] { return "prefill=core: " + refusal; });
  }
}

CpuRpaConfig cpu_rpa_heuristics_config(const RaggedPagedAttentionProblem& p, const Device&) {
  // A task's rows are its tokens times the g query heads of its kv head: about 256 rows let
  // each staged K/V chunk feed enough products (prefill chunk 512 over 4096 keys, GQA 4:
  // 257 ms at 64 rows, 212 ms at 256, 213 at 512); decode tokens are one per task.
  CpuRpaConfig c;
  c.block_q = static_cast<int>(std::clamp<int64_t>(256 / std::max<int64_t>(p.groups(), 1), 1, 128));
  // The core packs K and V once per sequence and kv head for every query block, where the
  // staged tasks widen them once per block (prefill chunk 512 over 4096 keys: see
  // docs/ops/ragged_paged_attention.md).
  c.prefill = rpa_core_refusal(p).empty() ? "core" : "staged";
  return c;
}

std::vector<CpuRpaConfig> cpu_rpa_autotuning_configs(const RaggedPagedAttentionProblem& p,
                                                     const Device& device) {
  const CpuRpaConfig first = cpu_rpa_heuristics_config(p, device);
  std::vector<CpuRpaConfig> configs = {first};
  for (int bq : {8, 16, 32, 64, 128}) {
    if (bq != first.block_q) configs.push_back({.block_q = bq, .prefill = first.prefill});
  }
  if (first.prefill == "core") configs.push_back({.block_q = first.block_q, .prefill = "staged"});
  return configs;
}

}  // namespace tokamax
