// gated_linear_unit_vjp on CPU: validation of the "cpu" config, its heuristics and search space.
//
// Dimensions: as cpu_config.h.
#include "ops/gated_linear_unit/vjp/cpu_config.h"

#include <algorithm>
#include <set>
#include <string>

#include "backends/cpu/cpu_device.h"
#include "ops/common/cpu_gemm/checks.h"
#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/framework/config.h"
#include "ops/gated_linear_unit/cpu_config.h"

namespace tokamax {
namespace {

constexpr double kSerialMultiplyAdds = double(1 << 17);

}  // namespace

void CpuGluVjpConfig::validate() const {
  validate_gemm_task_config(*this, {.max_scratch = kCpuGluVjpMaxScratch});
}

CpuGluVjpConfig cpu_glu_vjp_heuristics_config(const GluVjpProblem& vp, const Device& target) {
  const GluProblem& p = vp.fwd;
  const cpu::CpuInfo& device = cpu::cpu_info(target);
  CpuGluVjpConfig c;
  set_engine_blocking(c, device);
  set_large_tasks(c, std::max(p.M, p.K));
  // Then (the panels sized as above) the shortest of the three contractions (K in the H phase,
  // 2N or N in the dx phase, M in the dW phase) as one K block when it is at most twice tk: a
  // micro-panel of up to all of L1 (the rhs strips stream from L2 either way), and that phase
  // reads and writes its outputs once instead of once per block (docs/measurement_log.md, "GEMM
  // task shapes").
  const int64_t shortest = std::min({p.K, p.fused_weights ? 2 * p.N : p.N, p.M});
  if (shortest > c.tile_k && shortest <= 2 * int64_t{c.tile_k}) {
    c.tile_k = static_cast<int>(shortest);
  }
  const double multiply_adds = 6.0 * static_cast<double>(p.M) * p.K * p.N;
  const int threads = multiply_adds < kSerialMultiplyAdds ? 1 : std::max(1, device.cores);
  // Enough tasks in each phase for the cores to balance (2 per core where the shape allows; the
  // scheduler is dynamic): the phases tile both dimensions, so tm shrinks only when columns
  // cannot make up for it.
  auto tasks = [&](const CpuGluVjpConfig& t) {
    const int64_t row_tiles = ceil_div(std::max<int64_t>(p.M, 1), t.tile_m);
    return std::min(row_tiles * ceil_div(std::max<int64_t>(p.N, 1), t.tile_n),
                    row_tiles * ceil_div(std::max<int64_t>(p.K, 1), t.tile_n));
  };
  while (threads > 1 && tasks(c) < 2 * threads && c.tile_m > 4 * c.mr) {
    c.tile_m = static_cast<int>(round_up(c.tile_m / 2, c.mr));
  }
  // Row tiles in a multiple of the threads: the dx phase has as many tasks as row tiles when K
  // fits one column tile, and 5 equal tasks on 2 cores take 3 rounds while 6 take 3 shorter
  // ones (measured: docs/measurement_log.md, "gated_linear_unit_vjp row tiles").
  // (tile_m also caps the K row tiles of the dW phase: left alone when M already divides well.)
  const int64_t row_tiles = ceil_div(std::max<int64_t>(p.M, 1), c.tile_m);
  if (threads > 1 && row_tiles % threads != 0) {
    c.tile_m = static_cast<int>(
        round_up(ceil_div(std::max<int64_t>(p.M, 1), round_up(row_tiles, threads)), c.mr));
  }
  // No thin last column tile: N = 2816 in tiles of 896 leaves one of 128 per half in the H and
  // dW phases (and K = 1024 one in the dx phase), tasks with a whole task's overheads for a
  // seventh of the work. Whole panels are added (up to 4x) until the last tile of N and of K is
  // at least half a tile, while every phase keeps a task per core (measured:
  // docs/measurement_log.md, "gated_linear_unit_vjp column tiles").
  auto thin = [](int64_t extent, int64_t tn) {
    return extent > tn && extent % tn != 0 && extent % tn < tn / 2;
  };
  for (CpuGluVjpConfig t = c; t.tile_n <= 4 * c.tile_n; t.tile_n += c.panel_n) {
    if (tasks(t) < threads || int64_t{t.tile_m} * t.tile_n > kCpuGluVjpMaxScratch) break;
    if (!thin(p.N, t.tile_n) && !thin(p.K, t.tile_n)) {
      c.tile_n = t.tile_n;
      break;
    }
  }
  // bf16 x and weights: the three products on the fastest bf16 engine, as the forward's.
  if (is_bf16_glu_problem(p) && p.M > c.mr) c.bf16_path = fastest_bf16_path(device);
  c.num_threads = threads == 1 ? 1 : 0;
  return c;
}

std::vector<CpuGluVjpConfig> cpu_glu_vjp_autotuning_configs(const GluVjpProblem& p,
                                                            const Device& device) {
  const CpuGluVjpConfig base = cpu_glu_vjp_heuristics_config(p, device);
  std::set<decltype(base.key())> seen;
  std::vector<CpuGluVjpConfig> configs;
  auto add = [&](const CpuGluVjpConfig& c) {
    if (seen.insert(c.key()).second) configs.push_back(c);
  };
  add(base);
  for (int tile_m : {base.tile_m / 2, base.tile_m * 2}) {
    CpuGluVjpConfig c = base;
    c.tile_m = std::max(c.mr, tile_m);
    add(c);
  }
  for (int tile_n : {base.tile_n / 2, base.tile_n * 2}) {
    CpuGluVjpConfig c = base;
    c.tile_n = std::max(c.nr, tile_n);
    add(c);
  }
  for (int tile_k : {base.tile_k / 2, base.tile_k * 2}) {
    CpuGluVjpConfig c = base;
    c.tile_k = std::max(32, tile_k);
    add(c);
  }
  if (is_bf16_glu_problem(p.fwd)) {
    for (const std::string& path : bf16_paths_for(cpu::cpu_info(device))) {
      CpuGluVjpConfig c = base;
      c.bf16_path = path;
      add(c);
    }
  }
  return configs;
}

}  // namespace tokamax
