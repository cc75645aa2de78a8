// gated_linear_unit on CPU: validation of the "cpu" config, its heuristics and search space.
//
// Dimensions.
//   M      rows of x, *B flattened
//   K      contraction extent
//   N      output features (gate and projection each have N columns)
//   tm, tn, tk   tile extents of M, N (gate columns per task), K
//   pn     columns of one packed weight panel inside a task
//   mr, nr the micro-tile
//   L      f32 lanes of the SIMD target
#include "ops/gated_linear_unit/cpu_config.h"

#include <algorithm>
#include <set>
#include <span>
#include <string>

#include "backends/cpu/simd_target.h"
#include "ops/common/cpu_gemm/checks.h"
#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/common/cpu_gemm/micro_tile.h"

namespace tokamax {
namespace {

// Below this many multiply-adds a call takes tens of microseconds on one core, comparable to
// waking the pool, so the heuristics run it on the calling thread.
constexpr double kSerialMultiplyAdds = double(1 << 17);
// The tallest token batch taken as one row tile when the weights stream from memory: 64
// micro-panels of AVX-512's 14-row tile, where it was measured (in rows, so that AVX2's 6-row
// tile takes the same batches).
constexpr int64_t kWholeBatchRows = 896;

}  // namespace

bool is_bf16_glu_problem(const GluProblem& p) {
  return p.x_dtype == DType::kBF16 && p.w_dtype == DType::kBF16;
}

CpuGluConfig clamp_to_problem(CpuGluConfig c, const GluProblem& p) {
  c.tile_m = static_cast<int>(std::clamp<int64_t>(p.M, 1, c.tile_m));
  if (c.tile_n >= p.N) c.tile_n = 0;
  c.tile_k = static_cast<int>(std::clamp<int64_t>(p.K, 1, c.tile_k));
  const int64_t width = c.tile_n == 0 ? 2 * std::max<int64_t>(p.N, 1) : c.tile_n;
  c.panel_n = static_cast<int>(
      std::max<int64_t>(c.nr, std::min<int64_t>(c.panel_n, round_up(width, c.nr))));
  return c;
}

int64_t task_columns(const GluProblem& p, const CpuGluConfig& c) {
  return c.tile_n == 0 ? p.N : std::min<int64_t>(c.tile_n, p.N);
}

void CpuGluConfig::validate() const {
  validate_gemm_task_config(*this, {.tile_n_zero_is_all = true,
                                    .scratch_columns_per_tn = 2,
                                    .max_scratch = kCpuGluMaxScratchElements});
}

CpuGluConfig cpu_glu_heuristics_config(const GluProblem& p, const Device& target) {
  const cpu::CpuInfo& device = cpu::cpu_info(target);
  const int64_t l2 = device.tile_l2_bytes();
  const int64_t cores = std::max(1, device.cores);
  CpuGluConfig c;
  // The first (squarest) micro-tile: rows are plentiful here (no groups to pad).
  set_engine_blocking(c, device, p.K);
  // tm: every task re-packs its weight columns [K, 2 tn], so tall tasks amortise the packing
  // (1/tm of the multiply-adds); 18 micro-panels (252 rows at mr = 14) keep it under 0.5%.
  c.tile_m = static_cast<int>(std::clamp<int64_t>(round_up(p.M, c.mr), 1, 18 * int64_t{c.mr}));
  // tn: the f32 gate and projection tiles [tm, 2 tn] of a task fit in half of L2, so the
  // epilogue (act(gate) * proj, then the store) reads them from cache. All of N when it fits:
  // one product of width 2N packs each x row block once instead of twice.
  const int64_t max_tn =
      std::max<int64_t>(c.nr, l2 / (2 * 2 * int64_t{c.tile_m} * 4) / c.nr * c.nr);
  c.tile_n = p.N <= max_tn ? 0 : static_cast<int>(max_tn);
  // Enough tasks for the cores to balance (dynamic schedule): at least 4 per core where the rows
  // allow, halving tm down to 4 micro-panels.
  const double multiply_adds = 2.0 * static_cast<double>(p.M) * p.K * p.N;
  const int threads = multiply_adds < kSerialMultiplyAdds ? 1 : static_cast<int>(cores);
  auto tasks = [&](const CpuGluConfig& t) {
    const int64_t cols = t.tile_n == 0 ? p.N : t.tile_n;
    return ceil_div(p.M, t.tile_m) *
           ceil_div(std::max<int64_t>(p.N, 1), std::max<int64_t>(cols, 1));
  };
  // Weights past half of the last-level cache come from memory once per row tile: when one row
  // tile of at most kWholeBatchRows covers all of M (a token batch), take it, and the cores'
  // share of the tasks from N instead (4 per core), so that the weights stream once; its f32
  // tiles then outgrow half of L2, which costs less than a second pass over the weights, and
  // the weights are packed once instead of once per row tile (measured:
  // docs/measurement_log.md, "gated_linear_unit whole-batch row tile").
  const double weight_bytes = 2.0 * static_cast<double>(p.K) * p.N * dtype_size(p.w_dtype);
  if (threads > 1 && device.l3_bytes > 0 && weight_bytes > 0.5 * device.l3_bytes &&
      p.M > c.tile_m && p.M <= kWholeBatchRows) {
    c.tile_m = static_cast<int>(round_up(p.M, c.mr));
    const int64_t tn = round_up(ceil_div(std::max<int64_t>(p.N, 1), 4 * threads), c.nr);
    c.tile_n = tn >= p.N ? 0 : static_cast<int>(tn);
    while (c.tile_n != 0 && int64_t{c.tile_m} * 2 * c.tile_n > kCpuGluMaxScratchElements &&
           c.tile_m > c.mr) {
      c.tile_m = static_cast<int>(round_up(c.tile_m / 2, c.mr));
    }
  }
  while (threads > 1 && tasks(c) < 4 * threads && c.tile_m > 4 * c.mr) {
    c.tile_m = static_cast<int>(round_up(c.tile_m / 2, c.mr));
  }
  // bf16: the fastest engine the CPU has (checks.h); a bf16 engine also halves the packed
  // panels' bytes.
  if (is_bf16_glu_problem(p) && p.M > c.mr) c.bf16_path = fastest_bf16_path(device);
  c.num_threads = threads == 1 ? 1 : 0;
  return clamp_to_problem(c, p);
}

std::vector<CpuGluConfig> cpu_glu_autotuning_configs(const GluProblem& p, const Device& target) {
  const cpu::CpuInfo& device = cpu::cpu_info(target);
  const CpuGluConfig base = cpu_glu_heuristics_config(p, target);
  const int lanes = kernel_f32_lanes(device);
  std::vector<CpuGluConfig> configs;
  std::set<decltype(base.key())> seen;
  auto add = [&](const CpuGluConfig& candidate) {
    const CpuGluConfig c = clamp_to_problem(candidate, p);
    if (int64_t{c.tile_m} * 2 * task_columns(p, c) <= kCpuGluMaxScratchElements &&
        seen.insert(c.key()).second) {
      configs.push_back(c);
    }
  };
  add(base);
  const std::vector<std::string> bf16_paths =
      is_bf16_glu_problem(p) ? bf16_paths_for(device) : std::vector<std::string>{"convert_f32"};
  for (const std::string& path : bf16_paths) {
    for (const MicroKernelShape& shape : micro_kernel_shapes(lanes)) {
      // The tiles ignore the micro-tile: one shape is enough.
      if (path == "amx" && !(shape == micro_kernel_shapes(lanes)[0])) continue;
      const int nr = shape.nr_vectors * lanes;
      for (int panels_m : {4, 9, 18, 36}) {
        for (int tn : {0, 128, 256, 512}) {
          CpuGluConfig c = base;
          c.bf16_path = path;
          c.mr = shape.mr;
          c.nr = nr;
          c.tile_m = panels_m * shape.mr;
          c.tile_n = tn == 0 ? 0 : static_cast<int>(round_up(tn, nr));
          c.panel_n = static_cast<int>(round_up(base.panel_n, nr));
          add(c);
        }
      }
    }
    for (int tk : {64, 128, 256, 512}) {
      CpuGluConfig c = base;
      c.bf16_path = path;
      c.tile_k = tk;
      add(c);
    }
  }
  for (int threads : {1, 0}) {
    CpuGluConfig c = base;
    c.num_threads = threads;
    add(c);
  }
  return configs;
}

}  // namespace tokamax
