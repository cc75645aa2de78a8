// Validation and the cache-derived blocking of a GEMM-engine client's config.
#include "ops/common/cpu_gemm/task_config.h"

#include <algorithm>

#include "ops/common/cpu_gemm/checks.h"
#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/framework/config.h"

namespace tokamax {
namespace {

constexpr int kMaxTile = 1 << 16;

}  // namespace

void validate_gemm_task_config(const GemmTaskConfig& c, const GemmTaskLimits& limits) {
  require_range("tile_m", c.tile_m, 1, kMaxTile);
  if (limits.tile_n_zero_is_all) {
    require_config(c.tile_n >= 0 && c.tile_n <= kMaxTile, "tile_n", [&] {
      return "tile_n is " + std::to_string(c.tile_n) + "; expected 0 (all of N) or 1.." +
             std::to_string(kMaxTile);
    });
  } else {
    require_range("tile_n", c.tile_n, 1, kMaxTile);
  }
  require_range("tile_k", c.tile_k, 1, kMaxTile);
  require_range("panel_n", c.panel_n, 1, kMaxTile);
  require_range("mr", c.mr, 1, 64);
  require_range("nr", c.nr, 1, 256);
  const int64_t scratch = int64_t{c.tile_m} * limits.scratch_columns_per_tn * std::max(c.tile_n, 1);
  require_config(scratch <= limits.max_scratch, "tile_m", [&] {
    const std::string times = limits.scratch_columns_per_tn == 1
                                  ? " * "
                                  : " * " + std::to_string(limits.scratch_columns_per_tn) + " * ";
    return "tile_m" + times + "tile_n is " + std::to_string(scratch) +
           "; expected <= " + std::to_string(limits.max_scratch);
  });
  require_bf16_path_name(c.bf16_path);
  require_config(c.num_threads >= 0, "num_threads", [&] {
    return "num_threads is " + std::to_string(c.num_threads) + "; expected >= 0 (0 = all cores)";
  });
}

void set_engine_blocking(GemmTaskConfig& c, const cpu::CpuInfo& device, int64_t depth) {
  const int lanes = kernel_f32_lanes(device);
  const MicroKernelShape shape = micro_kernel_shapes(lanes)[0];
  c.mr = shape.mr;
  c.nr = shape.nr_vectors * lanes;
  c.tile_k = static_cast<int>(
      std::clamp<int64_t>(device.tile_l1d_bytes() / (2 * int64_t{c.mr} * 4) / 32 * 32, 32, 512));
  const int64_t rows = std::clamp<int64_t>(depth, 1, c.tile_k);
  c.panel_n = static_cast<int>(
      std::clamp<int64_t>(device.tile_l2_bytes() / (2 * rows * 4) / c.nr * c.nr, c.nr, 4096));
}

void set_large_tasks(GemmTaskConfig& c, int64_t rows) {
  c.tile_n =
      static_cast<int>(round_up(std::max<int64_t>({c.nr, 2 * int64_t{c.panel_n}, 512}), c.panel_n));
  c.tile_m = static_cast<int>(
      std::clamp<int64_t>(round_up(std::max<int64_t>(rows, 1), c.mr), c.mr, round_up(500, c.mr)));
}

}  // namespace tokamax
