// ragged_dot on CPU: validation of the "cpu" config, the config arithmetic shared by the checks,
// the heuristics and the launch, the heuristics and the autotuning search space.
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens), split into consecutive groups by group_sizes
//   K      contraction extent
//   N      output features
//   rows   sum(group_sizes) <= M; output rows past it are zero
//   tm, tn, tk   tile extents of M, N, K (tile_m, tile_n, tile_k); task_n columns per task
//   mr, nr       the micro-tile (mr rows x nr columns of accumulators in registers)
//   L            f32 lanes of the SIMD target (16 on AVX-512, 8 on AVX2)
#include "ops/ragged_dot/cpu_config.h"

#include <algorithm>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ops/common/cpu_gemm/checks.h"
#include "ops/ragged_dot/cpu_int8_kernel.h"
#include "ops/ragged_dot/cpu_kernel.h"
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

// --- Heuristics and search space. ----------------------------------------------------------------

namespace {

// Below this many multiply-adds a call takes tens of microseconds on one core, comparable to
// waking the pool, so the heuristics run it on the calling thread.
constexpr double kSerialMultiplyAdds = double(1 << 17);
// The int8 path's panel width: a multiple of both tiles' nr (48, 64) and of the 64-column pack.
constexpr int kInt8PanelColumns = 192;
// The int8 micro-tiles (mr, nr), the first preferred on a tie.
constexpr std::pair<int, int> kInt8Tiles[] = {{8, 48}, {6, 64}};

// The (mr, nr) of `tiles` that issues the fewest multiply-adds on zero padding (rows padded to
// mr in every group, `columns` to nr); ties (within 2%) go to the earlier.
std::pair<int, int> least_padded_tile(std::span<const std::pair<int, int>> tiles,
                                      std::span<const int64_t> group_sizes, int64_t columns) {
  std::pair<int, int> chosen = tiles.front();
  double best = 0;
  for (const auto& [mr, nr] : tiles) {
    const double cost = static_cast<double>(padded_rows(group_sizes, mr)) *
                        static_cast<double>(round_up(std::max<int64_t>(columns, 1), nr));
    if (best == 0 || cost < 0.98 * best) {
      best = cost;
      chosen = {mr, nr};
    }
  }
  return chosen;
}

}  // namespace

CpuRaggedDotConfig cpu_ragged_dot_heuristics_config(const RaggedDotProblem& p,
                                                    const Device& target) {
  const cpu::CpuInfo& device = cpu::cpu_info(target);
  const int64_t l1 = device.tile_l1d_bytes();
  const int64_t l2 = device.tile_l2_bytes();
  const int64_t acc_bytes = p.out_dtype == DType::kF64 ? 8 : 4;
  const int64_t cores = std::max(1, device.cores);
  const int lanes = kernel_f32_lanes(device);
  CpuRaggedDotConfig c;
  // The micro-tile that pads least; ties go to the earlier, squarer shape.
  std::vector<std::pair<int, int>> tiles;
  for (const MicroKernelShape& shape : micro_kernel_shapes(lanes)) {
    tiles.emplace_back(shape.mr, shape.nr_vectors * lanes);
  }
  std::tie(c.mr, c.nr) = least_padded_tile(tiles, p.group_sizes, p.N);
  // tk: one lhs micro-panel [mr, tk] fills at most half of L1 (it is reread for every strip;
  // the other half holds the streaming rhs strip and the output tile).
  c.tile_k = static_cast<int>(
      std::clamp<int64_t>(l1 / (2 * int64_t{c.mr} * acc_bytes) / 32 * 32, 32, 512));
  // tn: the rhs panel [tk, tn] fills at most half of L2 (it is reread by every micro-panel).
  c.tile_n = static_cast<int>(
      std::clamp<int64_t>(l2 / (2 * int64_t{c.tile_k} * acc_bytes) / c.nr * c.nr, c.nr, 4096));
  // Task shape: every task packs its own rhs panels (and a column split re-packs the lhs
  // rows), so fewer, larger tasks pack less; they only have to keep every core busy. Take the
  // tallest tm (whole groups first), then the widest task_n, whose largest-first schedule
  // keeps the cores >= 90% busy.
  const int64_t N_panels = round_up(std::max<int64_t>(p.N, 1), c.tile_n);
  c.tile_m = static_cast<int>(std::clamp<int64_t>(round_up(max_group_size(p), c.mr), 1, 8192));
  const double multiply_adds = static_cast<double>(p.owned_rows()) * p.K * p.N;
  const int threads = multiply_adds < kSerialMultiplyAdds ? 1 : static_cast<int>(cores);
  const int64_t tallest = c.tile_m;
  double balance = -1;
  int64_t tm = tallest;
  while (tm >= 1 && balance < 0.9) {
    for (int64_t task_n = N_panels; balance < 0.9; task_n = round_up(task_n / 2, c.tile_n)) {
      const double efficiency = schedule_efficiency(p.group_sizes, p.N, tm, task_n, threads);
      if (efficiency > balance + 0.01) {  // a split must buy real balance to pay its packing
        balance = efficiency;
        c.tile_m = static_cast<int>(tm);
        c.task_n = task_n >= p.N ? 0 : static_cast<int>(task_n);
      }
      if (task_n <= c.tile_n) break;
    }
    // Halve tm down to four micro-panels; below that the micro-kernel itself loses.
    tm = tm > 4 * int64_t{c.mr} ? round_up(tm / 2, c.mr) : 0;
  }
  const int64_t task_n = c.task_n == 0 ? N_panels : c.task_n;
  // Non-f32 outputs keep f32 partial sums [tm, task_n] per thread: keep them cache-sized.
  const int64_t acc_budget = std::max<int64_t>(l2, device.l3_bytes / (2 * cores)) / 4;
  while (p.out_dtype != DType::kF32 && p.out_dtype != DType::kF64 && c.tile_m > c.mr &&
         int64_t{c.tile_m} * std::min<int64_t>(task_n, round_up(p.N, c.tile_n)) > acc_budget) {
    c.tile_m = static_cast<int>(round_up(c.tile_m / 2, c.mr));
  }
  // bf16: the fastest engine the CPU has (checks.h: the AMX tiles, else vdpbf16ps where it
  // out-runs f32 FMAs, as on AMD's cores). Groups that fit one micro-panel read rhs once, in
  // place: packing pairs or tiles would add a copy there, so they stay on the f32 path.
  if (is_bf16_problem(p) && max_group_size(p) > c.mr) c.bf16_path = fastest_bf16_path(device);
  // int8 x int8: vpdpbusd, 64 multiply-adds an instruction. Its operands are bytes, so K blocks
  // can be long: every block ends in a flush of the int32 sums and a pack call, so one block of
  // all of K beats shorter ones on the gpt-oss MoE shape (K = 1440; its [K, 48] strip then lives
  // in L2, which the strip's 8-row reuse hides). An 8x48 tile. Panels of 192 columns: whole
  // 64-column packs, and the panel, the next one (prefetched into L2 while this one is
  // multiplied) and the task's lhs codes stay within L2 (narrower or wider panels are no
  // faster). The 6x64 tile where it pads less, as the f32 tiles are chosen above (the columns of
  // one half of [gate | up]): it gains where the 8x48 tile would pad a strip (DeepSeek's
  // 512-column halves: 11 strips of 48, the last a third empty, or 8 of 64) and loses a little
  // where 8x48 pads nothing (gpt-oss's 1440 = 30 x 48; measured: docs/measurement_log.md,
  // "ragged_dot int8 blocking").
  if (is_int8_problem(p) && device.has("avx512_vnni")) {
    c.int8_path = "vnni";
    std::tie(c.mr, c.nr) = least_padded_tile(kInt8Tiles, p.group_sizes, p.out_N());
    c.tile_k = 2048;
    c.tile_n = kInt8PanelColumns;
    c.tile_m = static_cast<int>(round_up(c.tile_m, c.mr));
    if (c.task_n != 0) c.task_n = static_cast<int>(round_up(c.task_n, c.tile_n));
  }
  // int8 x int8 on AMX tiles where they run on the hardware: blocks of 32 x 32 outputs, each k
  // step of 64 four TDPBUSD (16 x 16 x 64 multiply-adds each, 64 vpdpbusd's worth); the vnni
  // path's panels and K blocks, rows in whole blocks.
  if (is_int8_problem(p) && amx_on_hardware(device, /*int8=*/true)) {
    c.int8_path = "amx";
    c.tile_k = 2048;
    c.tile_n = kInt8PanelColumns;
    c.tile_m = static_cast<int>(round_up(c.tile_m, kInt8AmxRows));
    if (c.task_n != 0) c.task_n = static_cast<int>(round_up(c.task_n, c.tile_n));
  }
  c.num_threads = threads == 1 ? 1 : 0;
  return clamp_to_problem(c, p);
}

std::vector<CpuRaggedDotConfig> cpu_ragged_dot_autotuning_configs(const RaggedDotProblem& p,
                                                                  const Device& target) {
  const cpu::CpuInfo& device = cpu::cpu_info(target);
  const CpuRaggedDotConfig base = cpu_ragged_dot_heuristics_config(p, target);
  const int lanes = kernel_f32_lanes(device);
  const int64_t acc_bytes = p.out_dtype == DType::kF64 ? 8 : 4;
  std::vector<CpuRaggedDotConfig> configs;
  std::set<decltype(base.key())> seen;
  auto add = [&](const CpuRaggedDotConfig& candidate) {
    const CpuRaggedDotConfig c = clamp_to_problem(candidate, p);
    if (acc_elements(p, c) <= kCpuMaxAccElements && seen.insert(c.key()).second) {
      configs.push_back(c);
    }
  };
  // Groups of a few rows stream rhs (cpu_kernel.h): only the split of the work matters.
  if (max_group_size(p) <= kCpuStreamRows && p.out_dtype != DType::kF64) {
    for (int threads : {0, 1}) {
      for (int64_t task_n = round_up(p.N, base.tile_n); task_n >= base.nr;
           task_n = task_n / 2 / base.nr * base.nr) {
        CpuRaggedDotConfig c = base;
        c.num_threads = threads;
        c.tile_n = static_cast<int>(std::min<int64_t>(base.tile_n, task_n));
        c.task_n = static_cast<int>(task_n);
        add(c);
      }
    }
    return configs;
  }
  // int8 x int8 on vpdpbusd: its two micro-tiles x K blocks x panel widths, and the f32 path.
  // On AMX tiles: K blocks x panel widths (the tiles have one block shape).
  const bool vnni = device.has("avx512_vnni"), tiles = kernel_has_amx_int8(device);
  if (is_int8_problem(p) && (vnni || tiles)) {
    add(base);
    for (int tk : {512, 1024, 2048}) {
      for (int panels : {1, 2, 4}) {
        if (!tiles) break;
        CpuRaggedDotConfig c = base;
        c.int8_path = "amx";
        c.tile_k = tk;
        c.tile_n = panels * kInt8PanelColumns;
        c.tile_m = static_cast<int>(round_up(base.tile_m, kInt8AmxRows));
        c.task_n = base.task_n == 0 ? 0 : static_cast<int>(round_up(base.task_n, c.tile_n));
        add(c);
      }
    }
    for (const auto& [mr, nr] : kInt8Tiles) {
      for (int tk : {512, 1024, 2048}) {
        for (int panels : {1, 2, 4}) {
          if (!vnni) break;
          CpuRaggedDotConfig c = base;
          c.int8_path = "vnni";
          c.mr = mr;
          c.nr = nr;
          c.tile_k = tk;
          c.tile_n = panels * kInt8PanelColumns;
          c.tile_m = static_cast<int>(round_up(base.tile_m, mr));
          c.task_n = base.task_n == 0 ? 0 : static_cast<int>(round_up(base.task_n, c.tile_n));
          add(c);
        }
      }
    }
    CpuRaggedDotConfig f32 = base;
    f32.int8_path = "dequant_f32";
    f32.mr = micro_kernel_shapes(lanes)[0].mr;
    f32.nr = micro_kernel_shapes(lanes)[0].nr_vectors * lanes;
    add(f32);
    return configs;
  }
  const std::vector<std::string> bf16_paths =
      is_bf16_problem(p) ? bf16_paths_for(device) : std::vector<std::string>{"convert_f32"};
  const bool small = static_cast<double>(p.owned_rows()) * p.K * p.N < 64 * kSerialMultiplyAdds;
  for (const std::string& path : bf16_paths) {
    CpuRaggedDotConfig b = base;
    b.bf16_path = path;
    add(b);
    // Micro-tile shapes x K blocks x panel widths, within L2.
    for (const MicroKernelShape& shape : micro_kernel_shapes(lanes)) {
      // The tiles ignore the micro-tile: one shape is enough.
      if (path == "amx" && !(shape == micro_kernel_shapes(lanes)[0])) continue;
      const int nr = shape.nr_vectors * lanes;
      for (int tk : {64, 128, 256, 384, 512}) {
        for (int panels : {4, 8, 16, 32}) {
          CpuRaggedDotConfig c = b;
          c.mr = shape.mr;
          c.nr = nr;
          c.tile_k = tk;
          c.tile_n = panels * nr;
          c.tile_m = static_cast<int>(round_up(b.tile_m, shape.mr));
          c.task_n = b.task_n == 0 ? 0 : static_cast<int>(round_up(b.task_n, c.tile_n));
          if (device.l2_bytes > 0 && int64_t{tk} * c.tile_n * acc_bytes > device.l2_bytes) {
            continue;
          }
          add(c);
        }
      }
    }
    // Task granularity: taller or shorter tasks, all of N or a split of it.
    for (int tm : {b.tile_m / 4, b.tile_m / 2, b.tile_m * 2}) {
      for (int task_n : {0, b.tile_n, 2 * b.tile_n, 4 * b.tile_n}) {
        CpuRaggedDotConfig c = b;
        c.tile_m = std::max(1, tm);
        c.task_n = task_n;
        add(c);
      }
    }
    // Reading rhs in place (no panel copy) pays off when groups have few rows.
    if (path == "convert_f32") {
      CpuRaggedDotConfig c = b;
      c.packing = "no_pack";
      for (int tk : {64, 256, 1024}) {
        c.tile_k = tk;
        add(c);
      }
    }
    if (small) {
      for (int threads : {0, 1}) {
        for (int tk : {16, 32, 64}) {
          CpuRaggedDotConfig c = b;
          c.num_threads = threads;
          c.tile_k = tk;
          c.tile_m = c.mr;
          add(c);
        }
      }
    }
  }
  return configs;
}

}  // namespace tokamax
