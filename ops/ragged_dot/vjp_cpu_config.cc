// ragged_dot_vjp on CPU: validation of the "cpu" config, its heuristics and search space.
//
// Dimensions: as vjp_cpu_config.h (tm, tn, tk, pn, mr, nr; L the f32 lanes of the SIMD target).
#include "ops/ragged_dot/vjp_cpu_config.h"

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

constexpr int kMaxTile = 1 << 16;
// Used only when the OS reports no cache sizes (some containers and VMs).
constexpr int64_t kFallbackL1Bytes = 32 << 10;
constexpr int64_t kFallbackL2Bytes = 256 << 10;
// Below this many multiply-adds the pool's wake-up is comparable to the work: one thread.
constexpr double kSerialMultiplyAdds = double(1 << 17);

}  // namespace

bool is_bf16_vjp_problem(const RaggedDotVjpProblem& p) {
  return p.fwd.lhs_dtype == DType::kBF16 && p.fwd.rhs_dtype == DType::kBF16 &&
         p.dout_dtype == DType::kBF16;
}

void CpuRaggedDotVjpConfig::validate() const {
  require_range("tile_m", tile_m, 1, kMaxTile);
  require_range("tile_n", tile_n, 1, kMaxTile);
  require_range("tile_k", tile_k, 1, kMaxTile);
  require_range("panel_n", panel_n, 1, kMaxTile);
  require_range("mr", mr, 1, 64);
  require_range("nr", nr, 1, 256);
  require_config(int64_t{tile_m} * tile_n <= kCpuRaggedDotVjpMaxScratch, "tile_m", [&] {
    return "tile_m * tile_n is " + std::to_string(int64_t{tile_m} * tile_n) +
           "; expected <= " + std::to_string(kCpuRaggedDotVjpMaxScratch);
  });
  require_bf16_path_name(bf16_path);
  require_config(num_threads >= 0, "num_threads", [&] {
    return "num_threads is " + std::to_string(num_threads) + "; expected >= 0 (0 = all cores)";
  });
}

CpuRaggedDotVjpConfig cpu_ragged_dot_vjp_heuristics_config(const RaggedDotVjpProblem& vp,
                                                           const Device& target) {
  const RaggedDotProblem& p = vp.fwd;
  const cpu::CpuInfo& device = cpu::cpu_info(target);
  const int64_t l1 = device.l1d_bytes > 0 ? device.l1d_bytes : kFallbackL1Bytes;
  const int64_t l2 = device.l2_bytes > 0 ? device.l2_bytes : kFallbackL2Bytes;
  const int lanes = kernel_f32_lanes(device);
  CpuRaggedDotVjpConfig c;
  const MicroKernelShape shape = micro_kernel_shapes(lanes)[0];
  c.mr = shape.mr;
  c.nr = shape.nr_vectors * lanes;
  // tk: one lhs micro-panel [mr, tk] fills at most half of L1 (reread for every strip).
  c.tile_k = static_cast<int>(std::clamp<int64_t>(l1 / (2 * int64_t{c.mr} * 4) / 32 * 32, 32, 512));
  // pn: the packed panel [tk, pn] fills at most half of L2 (reread by every micro-panel).
  c.panel_n = static_cast<int>(
      std::clamp<int64_t>(l2 / (2 * int64_t{c.tile_k} * 4) / c.nr * c.nr, c.nr, 4096));
  // tm: each task packs its panel columns once for its tm rows (1/tm of the multiply-adds), and
  // tn: its rows once per tn columns. About 512 rows by at least 512 columns (two panels at
  // least): on the 2-core Zen 5 (mr = 14, panels of 288) 36 micro-panels by two panels beat 18 by
  // one on every bench_cpu case (square_2048 f32 73% of the FMA peak against 65%, bf16 75%
  // against 71%, the skewed routing 9-13% faster); on Zen 3 (AVX2, mr = 6, panels of 128) 516
  // rows by 512 columns (the heuristic gives 504) beat 216 by 256 in each of three interleaved
  // rounds (square_2048 f32 5-run medians 279-362 ms against 348-382, skewed 75-91 against
  // 79-103).
  c.tile_n =
      static_cast<int>(round_up(std::max<int64_t>({c.nr, 2 * int64_t{c.panel_n}, 512}), c.panel_n));
  c.tile_m = static_cast<int>(std::clamp<int64_t>(
      round_up(std::max<int64_t>({vp.max_group_rows(), p.K, 1}), c.mr), c.mr, round_up(500, c.mr)));
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
