// linear_softmax_cross_entropy_loss on CPU: validation of the "cpu" config, its heuristics and
// its search space.
//
// Dimensions: as cpu_config.h (B, H, V; tb, tv, tn, tk, nv; mr, nr); L = f32 lanes of the SIMD
// target (16 on AVX-512).
#include "ops/linear_softmax_cross_entropy_loss/cpu_config.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "ops/common/cpu_checks.h"
#include "ops/common/cpu_gemm/checks.h"
#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/framework/errors.h"

namespace tokamax {
namespace {

// Below this many multiply-adds (~30 us of one core) a second thread costs more to wake than it
// saves, the more so on a loaded machine (measured: docs/measurement_log.md, "thread wake-up
// under load").
constexpr double kSerialMultiplyAdds = double(1 << 22);

}  // namespace

void CpuLsceConfig::validate() const {
  require_config(tile_b >= 1, "tile_b", "tile_b must be >= 1, got " + std::to_string(tile_b));
  require_config(chunk_v >= 1, "chunk_v", "chunk_v must be >= 1, got " + std::to_string(chunk_v));
  require_config(tile_n >= 1, "tile_n", "tile_n must be >= 1, got " + std::to_string(tile_n));
  require_config(tile_k >= 2, "tile_k", "tile_k must be >= 2, got " + std::to_string(tile_k));
  require_config(v_splits >= 0, "v_splits",
                 "v_splits must be >= 0 (0 = automatic), got " + std::to_string(v_splits));
  require_config(mr >= 0 && nr >= 0 && (mr == 0) == (nr == 0), "mr",
                 "mr and nr must both be 0 (the CPU's default micro-tile) or both set, got mr=" +
                     std::to_string(mr) + " nr=" + std::to_string(nr));
  require_bf16_path_name(bf16_path);
  require_config(num_threads >= 0, "num_threads",
                 "num_threads must be >= 0 (0 = all cores), got " + std::to_string(num_threads));
}

bool is_lsce_bf16_problem(const LinearSoftmaxCrossEntropyProblem& p) {
  return p.x_dtype == DType::kBF16 && p.w_dtype == DType::kBF16;
}

CpuLsceConfig cpu_lsce_heuristics_config(const LinearSoftmaxCrossEntropyProblem& p,
                                         const Device& target) {
  const cpu::CpuInfo& device = cpu::cpu_info(target);
  const int64_t l1 = device.tile_l1d_bytes();
  const int64_t l2 = device.tile_l2_bytes();
  const int lanes = kernel_f32_lanes(device);
  CpuLsceConfig c;
  // tb: tall row tiles so that w (the big operand) is streamed as few times as possible; 256
  // rows already do 256 multiply-adds per w element, far past the machine balance.
  c.tile_b = static_cast<int>(std::clamp<int64_t>(p.B, 1, 256));
  // The micro-tile that wastes the fewest multiply-adds on padding (rows of a tile padded to mr,
  // chunk columns to nr); ties (within 2%) go to the earlier shape. Few rows (decoding, B=1..8)
  // take the flat shapes.
  MicroKernelShape shape = micro_kernel_shapes(lanes)[0];
  double best = 0;
  for (const MicroKernelShape& candidate : micro_kernel_shapes(lanes)) {
    const int64_t candidate_nr = int64_t{candidate.nr_vectors} * lanes;
    const double cost = static_cast<double>(round_up(c.tile_b, candidate.mr)) *
                        static_cast<double>(round_up(std::min<int64_t>(p.V, 2048), candidate_nr));
    if (best == 0 || cost < 0.98 * best) {
      best = cost;
      shape = candidate;
    }
  }
  const int64_t nr = int64_t{shape.nr_vectors} * lanes;
  if (!(shape == micro_kernel_shapes(lanes)[0])) {
    c.mr = shape.mr;
    c.nr = static_cast<int>(nr);
  }
  // tk: an lhs micro-panel [mr, tk] in half of L1 (as ragged_dot's heuristics).
  c.tile_k =
      static_cast<int>(std::clamp<int64_t>(l1 / (2 * int64_t{shape.mr} * 4) / 32 * 32, 32, 512));
  // tn: the packed w panel [tk, tn] f32 in half of L2 (re-read by every micro-panel of rows).
  c.tile_n =
      static_cast<int>(std::clamp<int64_t>(l2 / (2 * int64_t{c.tile_k} * 4) / nr * nr, nr, 4096));
  // tv: long chunks amortise packing the x rows (once per chunk and K block, tb * H values
  // against 2 * tb * H * tv flops); the logits tile [tb, tv] f32 then lives in L3, which the
  // accumulator updates (once per K block) and the one exp pass tolerate. Whole panels.
  const int64_t l3_share =
      device.l3_bytes > 0 ? device.l3_bytes / (2 * std::max(1, device.cores)) : 4 * l2;
  const int64_t tv_cap = std::max<int64_t>(c.tile_n, l3_share / (4 * int64_t{c.tile_b}));
  c.chunk_v = static_cast<int>(std::min<int64_t>(tv_cap, 2048) / c.tile_n * c.tile_n);
  c.chunk_v = std::max(c.chunk_v, c.tile_n);
  c.v_splits = 0;
  if (is_lsce_bf16_problem(p)) c.bf16_path = fastest_bf16_path(device);
  const double multiply_adds = static_cast<double>(p.B) * p.H * p.V;
  c.num_threads = multiply_adds < kSerialMultiplyAdds ? 1 : 0;
  return c;
}

std::vector<CpuLsceConfig> cpu_lsce_autotuning_configs(const LinearSoftmaxCrossEntropyProblem& p,
                                                       const Device& target) {
  const cpu::CpuInfo& device = cpu::cpu_info(target);
  const CpuLsceConfig base = cpu_lsce_heuristics_config(p, target);
  const int lanes = kernel_f32_lanes(device);
  std::vector<CpuLsceConfig> configs;
  std::set<decltype(base.key())> seen;
  auto add = [&](CpuLsceConfig c) {
    c.tile_b = static_cast<int>(std::clamp<int64_t>(c.tile_b, 1, std::max<int64_t>(p.B, 1)));
    c.chunk_v = static_cast<int>(std::clamp<int64_t>(c.chunk_v, 1, p.V));
    c.tile_n = std::min(c.tile_n, c.chunk_v);
    if (int64_t{c.tile_b} * c.chunk_v > kCpuLsceMaxLogitsTile) return;
    if (seen.insert(c.key()).second) configs.push_back(c);
  };
  add(base);
  const std::vector<std::string> paths =
      is_lsce_bf16_problem(p) ? bf16_paths_for(device) : std::vector<std::string>{"convert_f32"};
  for (const std::string& path : paths) {
    for (int chunk : {512, 1024, 2048, 4096}) {
      for (int tn : {128, 256, 512}) {
        for (int tk : {128, 256, 512}) {
          CpuLsceConfig c = base;
          c.bf16_path = path;
          c.chunk_v = chunk;
          c.tile_n = tn;
          c.tile_k = tk;
          add(c);
        }
      }
    }
    // Row tiles (w streamed more often, smaller logits tiles) and micro-tile shapes.
    for (int tb : {64, 128, 512}) {
      CpuLsceConfig c = base;
      c.bf16_path = path;
      c.tile_b = tb;
      add(c);
    }
    for (const MicroKernelShape& shape : micro_kernel_shapes(lanes)) {
      CpuLsceConfig c = base;
      c.bf16_path = path;
      c.mr = shape.mr;
      c.nr = shape.nr_vectors * lanes;
      add(c);
    }
  }
  // Splits of V: fewer, longer tasks vs finer balance.
  for (int splits : {1, 2, 4, 16}) {
    CpuLsceConfig c = base;
    c.v_splits = splits;
    add(c);
  }
  return configs;
}

}  // namespace tokamax
