// ragged_dot_vjp on CPU: validation of the "cpu" config, its heuristics and search space.
//
// Dimensions: as cpu_config.h (tm, tn, tk, pn, mr, nr; L the f32 lanes of the SIMD target).
#include "ops/ragged_dot/vjp/cpu_config.h"

#include <algorithm>
#include <set>
#include <string>

#include "backends/cpu/cpu_device.h"
#include "ops/common/cpu_gemm/checks.h"
#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/framework/config.h"

namespace tokamax {
namespace {

// Below this many multiply-adds the pool's wake-up is comparable to the work: one thread.
constexpr double kSerialMultiplyAdds = double(1 << 17);

}  // namespace

bool is_bf16_vjp_problem(const RaggedDotVjpProblem& p) {
  return p.fwd.lhs_dtype == DType::kBF16 && p.fwd.rhs_dtype == DType::kBF16 &&
         p.dout_dtype == DType::kBF16;
}

void CpuRaggedDotVjpConfig::validate() const {
  validate_gemm_task_config(*this, {.max_scratch = kCpuRaggedDotVjpMaxScratch});
}

CpuRaggedDotVjpConfig cpu_ragged_dot_vjp_heuristics_config(const RaggedDotVjpProblem& vp,
                                                           const Device& target) {
  const RaggedDotProblem& p = vp.fwd;
  const cpu::CpuInfo& device = cpu::cpu_info(target);
  CpuRaggedDotVjpConfig c;
  set_engine_blocking(c, device);
  set_large_tasks(c, std::max(vp.max_group_rows(), p.K));
  const double multiply_adds = 2.0 * static_cast<double>(p.owned_rows()) * p.K * p.N;
  const int threads = multiply_adds < kSerialMultiplyAdds ? 1 : std::max(1, device.cores);
  auto tasks = [&](const CpuRaggedDotVjpConfig& t) {
    int64_t count = 0;
    for (int64_t rows : p.group_sizes) {
      if (rows == 0) continue;
      count += ceil_div(rows, t.tile_m) * ceil_div(std::max<int64_t>(p.K, 1), t.tile_n);
      count += ceil_div(std::max<int64_t>(p.K, 1), t.tile_m) *
               ceil_div(std::max<int64_t>(p.N, 1), t.tile_n);
    }
    return count;
  };
  while (threads > 1 && tasks(c) < 4 * threads && c.tile_m > 4 * c.mr) {
    c.tile_m = static_cast<int>(round_up(c.tile_m / 2, c.mr));
  }
  if (is_bf16_vjp_problem(vp)) c.bf16_path = fastest_bf16_path(device);
  c.num_threads = threads == 1 ? 1 : 0;
  return c;
}

std::vector<CpuRaggedDotVjpConfig> cpu_ragged_dot_vjp_autotuning_configs(
    const RaggedDotVjpProblem& p, const Device& device) {
  const CpuRaggedDotVjpConfig base = cpu_ragged_dot_vjp_heuristics_config(p, device);
  std::set<std::tuple<int, int, int, int, int, int, std::string, int>> seen;
  std::vector<CpuRaggedDotVjpConfig> configs;
  auto add = [&](const CpuRaggedDotVjpConfig& c) {
    if (seen.insert(c.key()).second) configs.push_back(c);
  };
  add(base);
  for (int tile_m : {base.tile_m / 2, base.tile_m * 2}) {
    for (int tile_n : {base.tile_n / 2, base.tile_n, base.tile_n * 2}) {
      CpuRaggedDotVjpConfig c = base;
      c.tile_m = std::max(c.mr, tile_m);
      c.tile_n = std::max(c.nr, tile_n);
      if (int64_t{c.tile_m} * c.tile_n > kCpuRaggedDotVjpMaxScratch) continue;
      add(c);
    }
  }
  for (int tile_k : {base.tile_k / 2, base.tile_k * 2}) {
    CpuRaggedDotVjpConfig c = base;
    c.tile_k = std::max(32, tile_k);
    add(c);
  }
  if (is_bf16_vjp_problem(p)) {
    for (const std::string& path : bf16_paths_for(cpu::cpu_info(device))) {
      CpuRaggedDotVjpConfig c = base;
      c.bf16_path = path;
      add(c);
    }
  }
  return configs;
}

}  // namespace tokamax
