// triangle_multiplication on CPU: config validation, heuristics and search space.
#include "ops/triangle_multiplication/cpu_config.h"

#include <algorithm>
#include <set>
#include <string>

#include "backends/cpu/cpu_device.h"
#include "ops/common/cpu_checks.h"
#include "ops/common/cpu_gemm/checks.h"
#include "ops/common/cpu_gemm/micro_tile.h"

namespace tokamax {

void CpuTriangleConfig::validate() const {
  validate_gemm_task_config(*this, {.tile_n_zero_is_all = true});
  require_config(tile_n == 0, "tile_n", [&] {
    return "tile_n is " + std::to_string(tile_n) + "; expected 0 (a task computes whole rows)";
  });
  require_config(bf16_path == "convert_f32", "bf16_path", [&] {
    return "bf16_path is " + bf16_path + "; the kernel's intermediates are f32: convert_f32";
  });
}

void check_triangle_config(const CpuTriangleConfig& c, const Device& device) {
  require_num_threads(c.num_threads, device);
  require_micro_tile(c.mr, c.nr);
}

CpuTriangleConfig cpu_triangle_heuristics_config(const TriangleMultiplicationProblem& p,
                                                 const Device& target) {
  const cpu::CpuInfo& device = cpu::cpu_info(target);
  CpuTriangleConfig c;
  set_engine_blocking(c, device, std::min(p.C, p.N));
  // 18 micro-panels per task (packing under 0.5% of the multiply-adds), fewer for small N.
  c.tile_m = static_cast<int>(std::clamp<int64_t>(round_up(p.N, c.mr), 1, 18 * int64_t{c.mr}));
  return c;
}

std::vector<CpuTriangleConfig> cpu_triangle_autotuning_configs(
    const TriangleMultiplicationProblem& p, const Device& target) {
  const cpu::CpuInfo& device = cpu::cpu_info(target);
  const CpuTriangleConfig base = cpu_triangle_heuristics_config(p, target);
  const int lanes = kernel_f32_lanes(device);
  std::vector<CpuTriangleConfig> configs = {base};
  std::set<decltype(base.key())> seen = {base.key()};
  for (const MicroKernelShape& shape : micro_kernel_shapes(lanes)) {
    for (int panels : {4, 9, 18, 36}) {
      for (int tk : {base.tile_k, 2 * base.tile_k}) {
        CpuTriangleConfig c = base;
        c.mr = shape.mr;
        c.nr = shape.nr_vectors * lanes;
        c.tile_m = panels * shape.mr;
        c.tile_k = tk;
        if (seen.insert(c.key()).second) configs.push_back(c);
      }
    }
  }
  return configs;
}

}  // namespace tokamax
