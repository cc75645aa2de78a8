// ragged_dot: the CPU implementation ("cpu"): config, heuristics, search space, checks, launch.
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
#include <algorithm>
#include <set>
#include <string>
#include <tuple>

#include "backends/cpu/cpu_info.h"
#include "ops/errors.h"
#include "ops/op.h"
#include "ops/ragged_dot/base.h"
#include "ops/ragged_dot/cpu_kernel.h"
#include "ops/ragged_dot/cpu_pack.h"
#include "ops/ragged_dot/cpu_tiling.h"

namespace tokamax {
namespace {

struct CpuRaggedDotConfig {
  int tile_m = 1024;  // tm: rows of one task (never straddling two groups)
  int tile_n = 512;   // tn: columns of one packed rhs panel [tk, tn]; best a multiple of nr
  int tile_k = 256;   // tk: K block; the rhs panel stays in L2, an lhs micro-panel in L1
  int task_n = 0;     // columns of one task, a multiple of tile_n; 0 = all of N
  int mr = 14;        // micro-tile rows
  int nr = 32;        // micro-tile columns: nr / L vectors of the SIMD target
  std::string packing = "packed";         // "packed" | "no_pack" (rhs read in place)
  std::string bf16_path = "convert_f32";  // "convert_f32" | "native_dot" (vdpbf16ps)
  int num_threads = 0;                    // 0 = all cores

  void validate() const;
  template <class V>
  void visit(V&& v) {
    v("tile_m", tile_m);
    v("tile_n", tile_n);
    v("tile_k", tile_k);
    v("task_n", task_n);
    v("mr", mr);
    v("nr", nr);
    v("packing", packing);
    v("bf16_path", bf16_path);
    v("num_threads", num_threads);
  }
  auto key() const {
    return std::make_tuple(tile_m, tile_n, tile_k, task_n, mr, nr, packing, bf16_path, num_threads);
  }
};

constexpr int kMaxTile = 1 << 16;
// Scratch bounds per thread: one rhs panel [tk, tn] and the f32 partial sums [tm, task_n] of a
// task; beyond these they are no longer cache blocks and only waste memory.
constexpr int64_t kMaxPanelElements = int64_t{1} << 24;
constexpr int64_t kMaxAccElements = int64_t{1} << 24;
// Below this many multiply-adds a call takes tens of microseconds on one core, comparable to
// waking the pool, so the heuristics run it on the calling thread.
constexpr double kSerialMultiplyAdds = double(1 << 17);
// Used only when the OS reports no cache sizes (some containers and VMs): the smallest L1d and
// L2 of current server cores, so tiles err on the side of fitting.
constexpr int64_t kFallbackL1Bytes = 32 << 10;
constexpr int64_t kFallbackL2Bytes = 256 << 10;

// `message` is a callable, so that the string is only built on failure: validate() runs on every
// call of the op (configs arrive as JSON), and formatting ten messages would cost more than a
// small kernel.
template <typename Message>
void require(bool ok, const char* field, Message&& message) {
  if (!ok) throw InvalidArgument("cpu ragged_dot config: " + std::string(message()), field);
}

int64_t max_group_size(const RaggedDotProblem& p) {
  return p.group_sizes.empty() ? 0 : *std::max_element(p.group_sizes.begin(), p.group_sizes.end());
}

bool is_bf16_problem(const RaggedDotProblem& p) {
  return p.lhs_dtype == DType::kBF16 && p.rhs_dtype == DType::kBF16 && p.out_dtype != DType::kF64;
}

// f32 lanes of the kernels that will run for `device`: the dispatched Highway target on this
// host, the widest vector the ISA list promises elsewhere (cross-compiling a config).
int device_lanes(const DeviceInfo& device) {
  if (device.id == cpu::host_device().id) return cpu_kernel_f32_lanes();
  return std::max(1, device.simd_bytes / 4);
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

class CpuRaggedDot final : public TypedImplementation<RaggedDotProblem, CpuRaggedDotConfig> {
 public:
  std::string_view op_name() const override { return "ragged_dot"; }
  std::string_view name() const override { return "cpu"; }
  nlohmann::json describe() const override {
    return {{"simd_target", cpu_kernel_target_name()},
            {"pack_target", pack_target_name()},
            {"native_bf16", cpu_kernel_has_native_bf16()}};
  }

  Support supported_on(const DeviceInfo& device) const override {
    if (device.kind == "cpu") return {};
    return {false, "the cpu implementation runs on CPUs, not on a '" + device.kind + "' device"};
  }

  void check(const RaggedDotProblem& p) const override {
    if ((p.lhs_dtype == DType::kF64 || p.rhs_dtype == DType::kF64) && p.out_dtype != DType::kF64) {
      throw NotImplemented("cpu: f64 inputs with a " + std::string(dtype_name(p.out_dtype)) +
                           " output; the kernel accumulates in f64 only for f64 outputs, and "
                           "an f32 accumulator would drop the f64 inputs' precision");
    }
  }

  void check_config(const RaggedDotProblem& p, const CpuRaggedDotConfig& c) const override {
    // More threads than the pool has are capped anyway; far more than the cores is a typo.
    const int cores = cpu::host_device().cores;
    require(c.num_threads <= 4 * cores, "num_threads", [&] {
      return "num_threads is " + std::to_string(c.num_threads) + " but this machine has " +
             std::to_string(cores) + " cores (at most 4x oversubscription)";
    });
    const int lanes = cpu_kernel_f32_lanes();
    require(c.nr % lanes == 0 && has_micro_kernel_shape(lanes, c.mr, c.nr / lanes), "mr", [&] {
      return "no " + std::to_string(c.mr) + "x" + std::to_string(c.nr) +
             " micro-kernel (mr x nr) for this CPU's " + cpu_kernel_target_name() +
             " target; it has " + shape_list(lanes);
    });
    if (c.bf16_path == "native_dot") {
      require(is_bf16_problem(p), "bf16_path",
              [&] { return "native_dot needs bf16 lhs and rhs and an f32/bf16/f16 output"; });
      require(cpu_kernel_has_native_bf16(), "bf16_path",
              [&] { return "native_dot needs a CPU with avx512_bf16 (and AVX-512 kernels)"; });
      require(c.packing == "packed", "packing",
              [&] { return "native_dot reads rhs as packed bf16 pairs; it needs packing=packed"; });
    }
    const CpuRaggedDotConfig clamped = clamp_to_problem(c, p);
    require(acc_elements(p, clamped) <= kMaxAccElements, "tile_m", [&] {
      return "tile_m * task_n is " + std::to_string(acc_elements(p, clamped)) +
             ", too large for the per-thread f32 partial sums of a " +
             std::string(dtype_name(p.out_dtype)) + " output (max " +
             std::to_string(kMaxAccElements) + ")";
    });
  }

  CpuRaggedDotConfig heuristics_config(const RaggedDotProblem& p,
                                       const DeviceInfo& device) const override {
    const int64_t l1 = device.l1d_bytes > 0 ? device.l1d_bytes : kFallbackL1Bytes;
    const int64_t l2 = device.l2_bytes > 0 ? device.l2_bytes : kFallbackL2Bytes;
    const int64_t acc_bytes = p.out_dtype == DType::kF64 ? 8 : 4;
    const int64_t cores = std::max(1, device.cores);
    const int lanes = device_lanes(device);
    CpuRaggedDotConfig c;
    // The micro-tile that issues the fewest multiply-adds on zero padding (rows padded to mr in
    // every group, columns to nr); ties (within 2%) go to the earlier, squarer shape.
    const std::span<const MicroKernelShape> shapes = micro_kernel_shapes(lanes);
    double best = 0;
    for (const MicroKernelShape& shape : shapes) {
      const int64_t nr = int64_t{shape.nr_vectors} * lanes;
      const double cost = static_cast<double>(padded_rows(p.group_sizes, shape.mr)) *
                          static_cast<double>(round_up(std::max<int64_t>(p.N, 1), nr));
      if (best == 0 || cost < 0.98 * best) {
        best = cost;
        c.mr = shape.mr;
        c.nr = static_cast<int>(nr);
      }
    }
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
    const double multiply_adds = static_cast<double>(p.rows()) * p.K * p.N;
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
    // bf16: vdpbf16ps does two multiply-adds per f32 lane where the CPU has it. Measured on Zen 5
    // it issues at the full FMA rate (twice the f32 flops); on the AVX-512 Xeons that first had
    // it, at about half, where it merely breaks even with widening to f32 while halving the
    // packed panels' bytes. Groups that fit one micro-panel read rhs once, in place: pair
    // packing would add a copy there, so they stay on the f32 path.
    if (is_bf16_problem(p) && device.has("avx512_bf16") && lanes >= 16 &&
        max_group_size(p) > c.mr) {
      c.bf16_path = "native_dot";
    }
    c.num_threads = threads == 1 ? 1 : 0;
    return clamp_to_problem(c, p);
  }

  std::vector<CpuRaggedDotConfig> autotuning_configs(const RaggedDotProblem& p,
                                                     const DeviceInfo& device) const override {
    const CpuRaggedDotConfig base = heuristics_config(p, device);
    const int lanes = device_lanes(device);
    const int64_t acc_bytes = p.out_dtype == DType::kF64 ? 8 : 4;
    std::vector<CpuRaggedDotConfig> configs;
    std::set<decltype(base.key())> seen;
    auto add = [&](const CpuRaggedDotConfig& candidate) {
      const CpuRaggedDotConfig c = clamp_to_problem(candidate, p);
      if (acc_elements(p, c) <= kMaxAccElements && seen.insert(c.key()).second) {
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
    std::vector<std::string> bf16_paths = {"convert_f32"};
    if (is_bf16_problem(p) && device.has("avx512_bf16") && lanes >= 16) {
      bf16_paths.push_back("native_dot");
    }
    const bool small = static_cast<double>(p.rows()) * p.K * p.N < 64 * kSerialMultiplyAdds;
    for (const std::string& path : bf16_paths) {
      CpuRaggedDotConfig b = base;
      b.bf16_path = path;
      add(b);
      // Micro-tile shapes x K blocks x panel widths, within L2.
      for (const MicroKernelShape& shape : micro_kernel_shapes(lanes)) {
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

  void run(const RaggedDotProblem& p, const CpuRaggedDotConfig& config, const TensorMap& inputs,
           TensorMap& outputs) const override {
    check(p);
    const CpuRaggedDotConfig c = clamp_to_problem(config, p);
    const RaggedDotWorkList work = make_ragged_dot_work_list(
        p.group_starts, p.M, p.K, p.N, c.tile_m, c.tile_n, c.tile_k, c.task_n);
    CpuKernelOptions options;
    options.mr = c.mr;
    const int lanes = cpu_kernel_f32_lanes();
    if (c.nr % lanes != 0) {
      throw NotImplemented("cpu ragged_dot: nr=" + std::to_string(c.nr) +
                           " is not a multiple of the " + std::to_string(lanes) +
                           " f32 lanes of this CPU's SIMD target");
    }
    options.nr_vectors = c.nr / lanes;
    options.pack_rhs = c.packing == "packed";
    options.native_bf16 = c.bf16_path == "native_dot";
    options.num_threads = c.num_threads;
    ragged_dot_cpu_kernel(p, work, options, inputs.at("lhs"), inputs.at("rhs"), outputs.at("out"));
  }

 private:
  static std::string shape_list(int lanes) {
    std::string out;
    for (const MicroKernelShape& s : micro_kernel_shapes(lanes)) {
      out += (out.empty() ? "" : ", ") + std::to_string(s.mr) + "x" +
             std::to_string(s.nr_vectors * lanes);
    }
    return out;
  }
};

void CpuRaggedDotConfig::validate() const {
  require(tile_m >= 1 && tile_m <= kMaxTile, "tile_m", [&] {
    return "tile_m is " + std::to_string(tile_m) + "; expected 1.." + std::to_string(kMaxTile);
  });
  require(mr >= 1 && mr <= 64, "mr",
          [&] { return "mr is " + std::to_string(mr) + "; expected 1..64"; });
  require(nr >= 1 && nr <= 256, "nr",
          [&] { return "nr is " + std::to_string(nr) + "; expected 1..256"; });
  // tile_n need not be a multiple of nr (a panel then ends in a zero-padded strip), so configs
  // cached before nr existed still load; the heuristics and the search space keep it one.
  require(tile_n >= 1 && tile_n <= kMaxTile, "tile_n", [&] {
    return "tile_n is " + std::to_string(tile_n) + "; expected 1.." + std::to_string(kMaxTile);
  });
  require(tile_k >= 1 && tile_k <= kMaxTile, "tile_k", [&] {
    return "tile_k is " + std::to_string(tile_k) + "; expected 1.." + std::to_string(kMaxTile);
  });
  require(int64_t{tile_k} * tile_n <= kMaxPanelElements, "tile_k", [&] {
    return "tile_k * tile_n is " + std::to_string(int64_t{tile_k} * tile_n) +
           "; expected <= " + std::to_string(kMaxPanelElements);
  });
  require(task_n == 0 || (task_n >= tile_n && task_n % tile_n == 0), "task_n", [&] {
    return "task_n is " + std::to_string(task_n) + "; expected 0 (all of N) or a multiple of " +
           "tile_n=" + std::to_string(tile_n);
  });
  require(packing == "packed" || packing == "no_pack", "packing",
          [&] { return "packing is '" + packing + "'; expected 'packed' or 'no_pack'"; });
  require(bf16_path == "convert_f32" || bf16_path == "native_dot", "bf16_path", [&] {
    return "bf16_path is '" + bf16_path + "'; expected 'convert_f32' or 'native_dot'";
  });
  require(num_threads >= 0, "num_threads", [&] {
    return "num_threads is " + std::to_string(num_threads) + "; expected >= 0 (0 = all cores)";
  });
}

}  // namespace

const Implementation& ragged_dot_cpu_implementation() {
  static const CpuRaggedDot impl;
  return impl;
}

}  // namespace tokamax
