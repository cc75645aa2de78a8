// linear_softmax_cross_entropy_loss_vjp on CPU: validation of the "cpu" config, its heuristics
// and search space.
//
// Dimensions: as cpu_config.h (tv, tb, th, nv, tn, tk, mr, nr; L the f32 lanes).
#include "ops/linear_softmax_cross_entropy_loss/vjp/cpu_config.h"

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
// Below this many multiply-adds (the forward's threshold) a woken worker costs more than it
// saves.
constexpr double kSerialMultiplyAdds = double(1 << 22);

}  // namespace

bool is_lsce_vjp_bf16_problem(const LinearSoftmaxCrossEntropyVjpProblem& p) {
  return p.fwd.x_dtype == DType::kBF16 && p.fwd.w_dtype == DType::kBF16;
}

void CpuLsceVjpConfig::validate() const {
  require_range("chunk_v", chunk_v, 1, kMaxTile);
  require_range("tile_b", tile_b, 1, kMaxTile);
  require_range("tile_h", tile_h, 1, kMaxTile);
  require_range("tile_n", tile_n, 1, kMaxTile);
  require_range("tile_k", tile_k, 2, kMaxTile);
  require_range("v_splits", v_splits, 0, kMaxTile);
  require_config(mr >= 0 && nr >= 0 && (mr == 0) == (nr == 0), "mr", [&] {
    return "mr and nr must both be 0 (the CPU's default micro-tile) or both set, got mr=" +
           std::to_string(mr) + " nr=" + std::to_string(nr);
  });
  require_bf16_path_name(bf16_path);
  require_config(num_threads >= 0, "num_threads", [&] {
    return "num_threads is " + std::to_string(num_threads) + "; expected >= 0 (0 = all cores)";
  });
}

int64_t cpu_lsce_vjp_v_splits(const LinearSoftmaxCrossEntropyVjpProblem& vp,
                              const CpuLsceVjpConfig& c, int threads) {
  const LinearSoftmaxCrossEntropyProblem& p = vp.fwd;
  const int64_t chunks = ceil_div(p.V, std::max(1, c.chunk_v));
  if (c.v_splits > 0) return std::min<int64_t>(c.v_splits, chunks);
  // A whole number of ranges per thread (equal ranges on fewer threads would leave one idle for
  // a round): two where the partials stay under B * V / 8 (an eighth of the logits they
  // replace), else one per thread.
  const int64_t t = std::max(threads, 1);
  const int64_t per_thread = std::clamp<int64_t>(p.V / std::max<int64_t>(8 * p.H * t, 1), 1, 2);
  const int64_t cap =
      std::max<int64_t>(1, kCpuLsceVjpMaxPartials / std::max<int64_t>(1, p.B * p.H));
  return std::clamp<int64_t>(t * per_thread, 1, std::min(chunks, cap));
}

CpuLsceVjpConfig cpu_lsce_vjp_heuristics_config(const LinearSoftmaxCrossEntropyVjpProblem& vp,
                                                const Device& target) {
  const LinearSoftmaxCrossEntropyProblem& p = vp.fwd;
  const cpu::CpuInfo& device = cpu::cpu_info(target);
  const int64_t l1 = device.tile_l1d_bytes();
  const int64_t l2 = device.tile_l2_bytes();
  const int lanes = kernel_f32_lanes(device);
  const MicroKernelShape shape = micro_kernel_shapes(lanes)[0];
  const int64_t nr = int64_t{shape.nr_vectors} * lanes;
  CpuLsceVjpConfig c;
  // tk: an lhs micro-panel [mr, tk] in half of L1; tn: the packed panel [tk, tn] in half of L2
  // (as the forward's and ragged_dot's heuristics).
  c.tile_k =
      static_cast<int>(std::clamp<int64_t>(l1 / (2 * int64_t{shape.mr} * 4) / 32 * 32, 32, 512));
  c.tile_n =
      static_cast<int>(std::clamp<int64_t>(l2 / (2 * int64_t{c.tile_k} * 4) / nr * nr, nr, 4096));
  // tb, th: tall blocks so that each packed panel serves many micro-panels of rows (about 256
  // rows, as the forward's tile_b), split evenly: B = 256 as one tile rather than 252 + 4, whose
  // 4-row tile would repack the whole w chunk for a sliver of work.
  const int64_t nb = ceil_div(std::max<int64_t>(p.B, 1), 256);
  const int64_t nh = ceil_div(std::max<int64_t>(p.H, 1), 256);
  c.tile_b = static_cast<int>(ceil_div(std::max<int64_t>(p.B, 1), nb));
  c.tile_h = static_cast<int>(ceil_div(std::max<int64_t>(p.H, 1), nh));
  // tv: the dz tile [B, tv] is read by the dw product once per th block and by the dx product
  // once per row tile, and tv is the dx product's contraction depth: two whole K blocks
  // (2 tk, ~800 columns) at least, so that no thin K block remains and dx's accumulator traffic
  // ([tb, H] per K block) stays far below the FLOPs; and four whole packed panels (4 tn) at
  // least, the columns of the logits and dw products, so that neither ends each chunk on a thin
  // panel; within the dz tile's cap (measured: docs/measurement_log.md, "LSCE backward V
  // chunks").
  const int64_t dz_cap = std::max<int64_t>(nr, kCpuLsceVjpMaxDzTile / std::max<int64_t>(p.B, 1));
  const int64_t tv =
      round_up(std::max<int64_t>(2 * int64_t{c.tile_k}, 4 * int64_t{c.tile_n}), c.tile_n);
  c.chunk_v = static_cast<int>(std::min<int64_t>({tv, dz_cap / nr * nr, round_up(p.V, nr)}));
  c.v_splits = 0;
  if (is_lsce_vjp_bf16_problem(vp)) c.bf16_path = fastest_bf16_path(device);
  const double multiply_adds = 4.0 * static_cast<double>(p.B) * p.H * p.V;
  c.num_threads = multiply_adds < kSerialMultiplyAdds ? 1 : 0;
  return c;
}

std::vector<CpuLsceVjpConfig> cpu_lsce_vjp_autotuning_configs(
    const LinearSoftmaxCrossEntropyVjpProblem& vp, const Device& target) {
  const LinearSoftmaxCrossEntropyProblem& p = vp.fwd;
  const cpu::CpuInfo& device = cpu::cpu_info(target);
  const CpuLsceVjpConfig base = cpu_lsce_vjp_heuristics_config(vp, target);
  const int lanes = kernel_f32_lanes(device);
  std::vector<CpuLsceVjpConfig> configs;
  std::set<decltype(base.key())> seen;
  auto add = [&](CpuLsceVjpConfig c) {
    c.chunk_v = static_cast<int>(std::clamp<int64_t>(c.chunk_v, 1, p.V));
    c.tile_b = static_cast<int>(std::clamp<int64_t>(c.tile_b, 1, std::max<int64_t>(p.B, 1)));
    if (int64_t{std::max<int64_t>(p.B, 1)} * c.chunk_v > kCpuLsceVjpMaxDzTile) return;
    if (seen.insert(c.key()).second) configs.push_back(c);
  };
  add(base);
  for (int chunk : {256, 512, 1024, 2048}) {
    for (int tk : {128, 256, 512}) {
      CpuLsceVjpConfig c = base;
      c.chunk_v = chunk;
      c.tile_k = tk;
      add(c);
    }
  }
  for (int tn : {128, 512}) {
    CpuLsceVjpConfig c = base;
    c.tile_n = tn;
    add(c);
  }
  for (int tb : {64, 128, 512}) {
    CpuLsceVjpConfig c = base;
    c.tile_b = tb;
    c.tile_h = tb;
    add(c);
  }
  for (const MicroKernelShape& shape : micro_kernel_shapes(lanes)) {
    CpuLsceVjpConfig c = base;
    c.mr = shape.mr;
    c.nr = shape.nr_vectors * lanes;
    add(c);
  }
  if (is_lsce_vjp_bf16_problem(vp)) {
    for (const std::string& path : bf16_paths_for(device)) {
      CpuLsceVjpConfig c = base;
      c.bf16_path = path;
      add(c);
    }
  }
  // V ranges: fewer dx partials vs finer balance.
  for (int splits : {1, 2, 4, 8}) {
    CpuLsceVjpConfig c = base;
    c.v_splits = splits;
    add(c);
  }
  return configs;
}

}  // namespace tokamax
