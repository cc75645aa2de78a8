// ragged_dot on CPU: validation of the "cpu" config and the config arithmetic shared by the checks,
// the heuristics and the launch.
//
// Dimensions.
//   M      rows of lhs (tokens), split into consecutive groups by group_sizes
//   K      contraction extent
//   N      output features
//   tm, tn, tk   tile extents of M, N, K (tile_m, tile_n, tile_k); task_n columns per task
//   mr, nr       the micro-tile (mr rows x nr columns of accumulators in registers)
#include "ops/ragged_dot/cpu_config.h"

#include <algorithm>
#include <string>

#include "ops/common/cpu_gemm/checks.h"
#include "ops/ragged_dot/cpu_tiling.h"

namespace tokamax {
namespace {

constexpr int kMaxTile = 1 << 16;
// Scratch bound per thread for one rhs panel [tk, tn]; beyond it the panel is no longer a cache
// block and only wastes memory.
constexpr int64_t kMaxPanelElements = int64_t{1} << 24;

}  // namespace

int64_t max_group_size(const RaggedDotProblem& p) {
  return p.group_sizes.empty() ? 0 : *std::max_element(p.group_sizes.begin(), p.group_sizes.end());
}

bool is_bf16_problem(const RaggedDotProblem& p) {
  const bool bf16_rhs = p.rhs_dtype == DType::kBF16 ||
                        (p.rhs_dtype == DType::kF8E4M3 && p.quantized() && !p.quantize_lhs);
  return p.lhs_dtype == DType::kBF16 && bf16_rhs && p.out_dtype != DType::kF64;
}

bool is_int8_problem(const RaggedDotProblem& p) {
  return p.quantize_lhs && p.rhs_dtype == DType::kI8 &&
         (p.scale_blocks == 1 || p.block_k() % 4 == 0) && p.out_dtype != DType::kF64;
}

// Tiles larger than the problem only cost scratch: clamp them (tn to whole micro-tiles).
CpuRaggedDotConfig clamp_to_problem(CpuRaggedDotConfig c, const RaggedDotProblem& p) {
  c.tile_m = static_cast<int>(std::clamp<int64_t>(max_group_size(p), 1, c.tile_m));
  c.tile_n = static_cast<int>(std::max<int64_t>(
      c.nr, std::min<int64_t>(c.tile_n, round_up(std::max<int64_t>(p.N, 1), c.nr))));
  c.tile_k = static_cast<int>(std::clamp<int64_t>(p.K, 1, c.tile_k));
  if (c.task_n != 0) c.task_n = static_cast<int>(round_up(c.task_n, c.tile_n));
  if (c.task_n >= p.N) c.task_n = 0;
  return c;
}

// f32 partial sums a thread keeps for outputs that are not the accumulator type: [tm, task_n].
int64_t acc_elements(const RaggedDotProblem& p, const CpuRaggedDotConfig& c) {
  if (p.out_dtype == DType::kF32 || p.out_dtype == DType::kF64) return 0;
  return int64_t{c.tile_m} * (c.task_n == 0 ? round_up(p.N, c.tile_n) : c.task_n);
}

void CpuRaggedDotConfig::validate() const {
  require_range("tile_m", tile_m, 1, kMaxTile);
  require_range("mr", mr, 1, 64);
  require_range("nr", nr, 1, 256);
  // tile_n need not be a multiple of nr (a panel then ends in a zero-padded strip), so configs
  // cached before nr existed still load; the heuristics and the search space keep it one.
  require_range("tile_n", tile_n, 1, kMaxTile);
  require_range("tile_k", tile_k, 1, kMaxTile);
  require_config(int64_t{tile_k} * tile_n <= kMaxPanelElements, "tile_k", [&] {
    return "tile_k * tile_n is " + std::to_string(int64_t{tile_k} * tile_n) +
           "; expected <= " + std::to_string(kMaxPanelElements);
  });
  require_config(task_n == 0 || (task_n >= tile_n && task_n % tile_n == 0), "task_n", [&] {
    return "task_n is " + std::to_string(task_n) + "; expected 0 (all of N) or a multiple of " +
           "tile_n=" + std::to_string(tile_n);
  });
  require_config(packing == "packed" || packing == "no_pack", "packing",
                 [&] { return "packing is '" + packing + "'; expected 'packed' or 'no_pack'"; });
  require_bf16_path_name(bf16_path);
  require_config(
      int8_path == "dequant_f32" || int8_path == "vnni" || int8_path == "amx", "int8_path",
      [&] { return "int8_path is '" + int8_path + "'; expected 'dequant_f32', 'vnni' or 'amx'"; });
  require_config(num_threads >= 0, "num_threads", [&] {
    return "num_threads is " + std::to_string(num_threads) + "; expected >= 0 (0 = all cores)";
  });
}

}  // namespace tokamax
