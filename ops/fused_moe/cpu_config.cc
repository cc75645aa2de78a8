// fused_moe on CPU: config validation, heuristics and search space.
#include "ops/fused_moe/cpu_config.h"

#include <algorithm>
#include <set>
#include <string>

#include "backends/cpu/cpu_device.h"
#include "ops/common/cpu_checks.h"
#include "ops/common/cpu_gemm/checks.h"
#include "ops/common/cpu_gemm/micro_tile.h"

namespace tokamax {
namespace {

int64_t scratch_elements(const FusedMoeProblem& p, int64_t tm) { return tm * (3 * p.I + p.H); }

// bf16 x with float weights (quantized experts are dequantized to f32 for the f32 engine).
bool bf16_problem(const FusedMoeProblem& p) { return p.x_dtype == DType::kBF16 && !p.quantized(); }

}  // namespace

void CpuFusedMoeConfig::validate() const {
  validate_gemm_task_config(*this, {.tile_n_zero_is_all = true});
  require_config(tile_n == 0, "tile_n", [&] {
    return "tile_n is " + std::to_string(tile_n) + "; expected 0 (a task computes whole rows)";
  });
}

void check_fused_moe_config(const FusedMoeProblem& p, const CpuFusedMoeConfig& c,
                            const Device& device) {
  require_num_threads(c.num_threads, device);
  require_micro_tile(c.mr, c.nr);
  require_bf16_path(c.bf16_path, bf16_problem(p), "bf16 x and weights");
  require_config(scratch_elements(p, c.tile_m) <= kCpuFusedMoeMaxScratchElements, "tile_m", [&] {
    return "tile_m " + std::to_string(c.tile_m) + " needs " +
           std::to_string(scratch_elements(p, c.tile_m)) +
           " f32 of scratch per thread; expected <= " +
           std::to_string(kCpuFusedMoeMaxScratchElements);
  });
}

CpuFusedMoeConfig cpu_fused_moe_heuristics_config(const FusedMoeProblem& p, const Device& target) {
  const cpu::CpuInfo& device = cpu::cpu_info(target);
  CpuFusedMoeConfig c;
  set_engine_blocking(c, device, std::min(p.H, p.I));
  // tm: a task packs its expert's weights once, so the more of the expert's routes it takes the
  // less packing per multiply-add; about 256 rows (whole micro-panels) keeps packing under 1%
  // and the task's f32 scratch [tm, 3 I + H] within L2's reach for the scaled-down layers. Fewer
  // where the routes per expert are few (they cap a task anyway) or the tasks too few to balance.
  const int64_t cores = std::max(1, device.cores);
  const int64_t per_expert = std::max<int64_t>(1, ceil_div(p.routes(), p.E));
  int64_t tm = std::min<int64_t>(round_up(per_expert, c.mr), 18 * int64_t{c.mr});
  while (tm > c.mr && ceil_div(p.routes(), tm) < 4 * cores) tm = round_up(tm / 2, c.mr);
  while (tm > c.mr && scratch_elements(p, tm) > kCpuFusedMoeMaxScratchElements) tm -= c.mr;
  c.tile_m = static_cast<int>(std::max<int64_t>(tm, 1));
  if (bf16_problem(p) && per_expert > c.mr) c.bf16_path = fastest_bf16_path(device);
  return c;
}

std::vector<CpuFusedMoeConfig> cpu_fused_moe_autotuning_configs(const FusedMoeProblem& p,
                                                                const Device& target) {
  const cpu::CpuInfo& device = cpu::cpu_info(target);
  const CpuFusedMoeConfig base = cpu_fused_moe_heuristics_config(p, target);
  const int lanes = kernel_f32_lanes(device);
  std::vector<CpuFusedMoeConfig> configs;
  std::set<decltype(base.key())> seen;
  auto add = [&](const CpuFusedMoeConfig& c) {
    if (scratch_elements(p, c.tile_m) <= kCpuFusedMoeMaxScratchElements &&
        seen.insert(c.key()).second) {
      configs.push_back(c);
    }
  };
  add(base);
  const std::vector<std::string> paths =
      bf16_problem(p) ? bf16_paths_for(device) : std::vector<std::string>{"convert_f32"};
  for (const std::string& path : paths) {
    for (const MicroKernelShape& shape : micro_kernel_shapes(lanes)) {
      if (path == "amx" && !(shape == micro_kernel_shapes(lanes)[0])) continue;
      for (int panels : {2, 9, 18, 36}) {
        for (int tk : {base.tile_k, 2 * base.tile_k}) {
          CpuFusedMoeConfig c = base;
          c.bf16_path = path;
          c.mr = shape.mr;
          c.nr = shape.nr_vectors * lanes;
          c.tile_m = panels * shape.mr;
          c.tile_k = tk;
          add(c);
        }
      }
    }
  }
  return configs;
}

}  // namespace tokamax
