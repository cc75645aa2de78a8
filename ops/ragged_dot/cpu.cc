// ragged_dot: the CPU implementation ("cpu"): config, heuristics, search space, checks, launch.
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens), split into consecutive groups by group_sizes
//   K      contraction extent
//   N      output features
//   rows   sum(group_sizes) <= M; output rows past it are zero
//   tm, tn, tk   tile extents of M, N, K (tile_m, tile_n, tile_k)
//   nm, nn       tile counts (see cpu_tiling.h); tasks = nm * nn
#include <algorithm>
#include <set>
#include <string>
#include <tuple>

#include "backends/cpu/cpu_info.h"
#include "ops/errors.h"
#include "ops/op.h"
#include "ops/ragged_dot/base.h"
#include "ops/ragged_dot/cpu_kernel.h"
#include "ops/ragged_dot/cpu_tiling.h"

namespace tokamax {
namespace {

struct CpuRaggedDotConfig {
  int tile_m = 64;      // tm: rows of lhs per task (never straddling two groups)
  int tile_n = 256;     // tn: output columns per task; multiple of the f32 SIMD width (8)
  int tile_k = 256;     // tk: K block whose rhs panel [tk, tn] stays hot in L2
  int num_threads = 0;  // 0 = all cores

  void validate() const;
  template <class V>
  void visit(V&& v) {
    v("tile_m", tile_m);
    v("tile_n", tile_n);
    v("tile_k", tile_k);
    v("num_threads", num_threads);
  }
  auto key() const { return std::tie(tile_m, tile_n, tile_k, num_threads); }
};

// 8 f32 lanes: one AVX2 register, half an AVX-512 one; the SIMD micro-kernel steps tn by it.
constexpr int kSimdFloats = 8;
// Accumulator rows the micro-kernel updates per rhs row it loads (cpu_kernel.cc).
constexpr int64_t kMicroKernelRows = 4;
constexpr int kMaxTile = 1 << 16;
// One rhs panel [tk, tn] per thread; bigger ones cannot be cache blocks and only waste memory.
constexpr int64_t kMaxPanelElements = int64_t{1} << 24;
// Below this many multiply-adds a call takes tens of microseconds on one core, comparable to
// waking the pool, so the heuristics run it on the calling thread.
constexpr double kSerialMultiplyAdds = double(1 << 17);
// Used only when the OS reports no cache sizes (some containers and VMs): the smallest L1d and
// L2 of current server cores, so tiles err on the side of fitting.
constexpr int64_t kFallbackL1Bytes = 32 << 10;
constexpr int64_t kFallbackL2Bytes = 256 << 10;

void require(bool ok, const char* field, const std::string& message) {
  if (!ok) throw InvalidArgument("cpu ragged_dot config: " + message, field);
}

int64_t round_up(int64_t x, int64_t multiple) { return (x + multiple - 1) / multiple * multiple; }

int64_t floor_pow2(int64_t x) {
  int64_t p = 1;
  while (p * 2 <= x) p *= 2;
  return p;
}

int64_t acc_bytes(const RaggedDotProblem& p) { return p.out_dtype == DType::kF64 ? 8 : 4; }

int64_t max_group_size(const RaggedDotProblem& p) {
  return p.group_sizes.empty() ? 0 : *std::max_element(p.group_sizes.begin(), p.group_sizes.end());
}

// Tiles larger than the problem only cost scratch: clamp them (tn to whole SIMD vectors).
CpuRaggedDotConfig clamp_to_problem(CpuRaggedDotConfig c, const RaggedDotProblem& p) {
  c.tile_m = static_cast<int>(std::clamp<int64_t>(max_group_size(p), 1, c.tile_m));
  c.tile_n =
      static_cast<int>(std::clamp<int64_t>(round_up(p.N, kSimdFloats), kSimdFloats, c.tile_n));
  c.tile_k = static_cast<int>(std::clamp<int64_t>(p.K, 1, c.tile_k));
  return c;
}

int64_t num_tasks(const RaggedDotProblem& p, int64_t tm, int64_t tn) {
  return count_m_tiles(p.group_sizes, tm) * ((p.N + tn - 1) / tn);
}

class CpuRaggedDot final : public TypedImplementation<RaggedDotProblem, CpuRaggedDotConfig> {
 public:
  std::string_view op_name() const override { return "ragged_dot"; }
  std::string_view name() const override { return "cpu"; }

  Support supported_on(const DeviceInfo& device) const override {
    if (device.kind == "cpu") return {};
    return {false, "the cpu implementation runs on CPUs, not on a '" + device.kind + "' device"};
  }

  void check(const RaggedDotProblem& p) const override {
    const std::string lhs(dtype_name(p.lhs_dtype)), rhs(dtype_name(p.rhs_dtype));
    if (p.lhs_dtype != p.rhs_dtype) {
      throw NotImplemented("cpu: lhs is " + lhs + " but rhs is " + rhs +
                           "; the kernel widens both operands with one conversion, so it needs "
                           "one input dtype");
    }
    if (p.lhs_dtype == DType::kF64 && p.out_dtype != DType::kF64) {
      throw NotImplemented("cpu: f64 inputs with a " + std::string(dtype_name(p.out_dtype)) +
                           " output; the kernel accumulates in f64 only for f64 outputs, and "
                           "an f32 accumulator would drop the f64 inputs' precision");
    }
  }

  void check_config(const RaggedDotProblem&, const CpuRaggedDotConfig& c) const override {
    // More threads than the pool has are capped anyway; far more than the cores is a typo.
    const int cores = cpu::host_device().cores;
    require(c.num_threads <= 4 * cores, "num_threads",
            "num_threads is " + std::to_string(c.num_threads) + " but this machine has " +
                std::to_string(cores) + " cores (at most 4x oversubscription)");
  }

  CpuRaggedDotConfig heuristics_config(const RaggedDotProblem& p,
                                       const DeviceInfo& device) const override {
    const int64_t l1 = device.l1d_bytes > 0 ? device.l1d_bytes : kFallbackL1Bytes;
    const int64_t l2 = device.l2_bytes > 0 ? device.l2_bytes : kFallbackL2Bytes;
    const int64_t bytes = acc_bytes(p);
    const int64_t cores = std::max(1, device.cores);
    CpuRaggedDotConfig c;
    // The micro-kernel updates four accumulator rows of tn while streaming one rhs row: keep
    // those rows within half of L1 so they are not evicted between k steps.
    c.tile_n = static_cast<int>(
        std::clamp<int64_t>(floor_pow2(l1 / (2 * kMicroKernelRows * bytes)), 64, 512));
    // The rhs panel [tk, tn] is reread by every row of the tile: keep it within half of L2 (the
    // rest holds the lhs tile, the accumulator tile and prefetched input).
    c.tile_k = static_cast<int>(
        std::clamp<int64_t>(floor_pow2(l2 / (2 * int64_t{c.tile_n} * bytes)), 16, 512));
    // Big tm amortizes packing the rhs panel over more rows, but the dynamic scheduler needs
    // a couple of tasks per core to balance uneven groups: shrink tm, then tn, until there are.
    c.tile_m = 128;
    while (c.tile_m > 16 && num_tasks(p, c.tile_m, c.tile_n) < 2 * cores) c.tile_m /= 2;
    while (c.tile_n > 64 && num_tasks(p, c.tile_m, c.tile_n) < cores) c.tile_n /= 2;
    const double multiply_adds = static_cast<double>(p.rows()) * p.K * p.N;
    c.num_threads = multiply_adds < kSerialMultiplyAdds ? 1 : 0;
    return clamp_to_problem(c, p);
  }

  std::vector<CpuRaggedDotConfig> autotuning_configs(const RaggedDotProblem& p,
                                                     const DeviceInfo& device) const override {
    std::vector<int> tms = {16, 32, 64, 128}, tns = {64, 128, 256, 512}, tks = {64, 128, 256, 512};
    // Extents at or below the usual tiles clamp them all to one value; smaller tiles are then the
    // only way to vary the task count and shape.
    if (max_group_size(p) <= tms.front()) tms.insert(tms.begin(), {4, 8});
    if (p.N <= tns.front()) tns.insert(tns.begin(), {8, 16, 32});
    if (p.K <= tks.front()) tks.insert(tks.begin(), {16, 32});
    std::vector<int> thread_counts = {0};
    // Small calls may be fastest without waking the pool; large ones never are.
    if (static_cast<double>(p.rows()) * p.K * p.N < 64 * kSerialMultiplyAdds) {
      thread_counts.push_back(1);
    }
    std::vector<CpuRaggedDotConfig> configs;
    std::set<std::tuple<int, int, int, int>> seen;
    auto add = [&](const CpuRaggedDotConfig& candidate) {
      const CpuRaggedDotConfig c = clamp_to_problem(candidate, p);
      if (seen.insert(c.key()).second) configs.push_back(c);
    };
    add(heuristics_config(p, device));
    for (int tm : tms) {
      for (int tn : tns) {
        for (int tk : tks) {
          // A panel that cannot stay in L2 is re-fetched from memory for every row of the tile.
          if (device.l2_bytes > 0 && int64_t{tk} * tn * acc_bytes(p) > device.l2_bytes) continue;
          for (int threads : thread_counts) add({tm, tn, tk, threads});
        }
      }
    }
    return configs;
  }

  void run(const RaggedDotProblem& p, const CpuRaggedDotConfig& config, const TensorMap& inputs,
           TensorMap& outputs) const override {
    check(p);
    const CpuRaggedDotConfig c = clamp_to_problem(config, p);
    const RaggedDotWorkList work =
        make_ragged_dot_work_list(p.group_starts, p.M, p.K, p.N, c.tile_m, c.tile_n, c.tile_k);
    ragged_dot_cpu_kernel(p, work, c.num_threads, inputs.at("lhs"), inputs.at("rhs"),
                          outputs.at("out"));
  }
};

void CpuRaggedDotConfig::validate() const {
  require(tile_m >= 1 && tile_m <= kMaxTile, "tile_m",
          "tile_m is " + std::to_string(tile_m) + "; expected 1.." + std::to_string(kMaxTile));
  require(tile_n >= kSimdFloats && tile_n <= kMaxTile && tile_n % kSimdFloats == 0, "tile_n",
          "tile_n is " + std::to_string(tile_n) + "; expected a multiple of " +
              std::to_string(kSimdFloats) + " in " + std::to_string(kSimdFloats) + ".." +
              std::to_string(kMaxTile));
  require(tile_k >= 1 && tile_k <= kMaxTile, "tile_k",
          "tile_k is " + std::to_string(tile_k) + "; expected 1.." + std::to_string(kMaxTile));
  require(int64_t{tile_k} * tile_n <= kMaxPanelElements, "tile_k",
          "tile_k * tile_n is " + std::to_string(int64_t{tile_k} * tile_n) +
              "; expected <= " + std::to_string(kMaxPanelElements));
  require(num_threads >= 0, "num_threads",
          "num_threads is " + std::to_string(num_threads) + "; expected >= 0 (0 = all cores)");
}

}  // namespace

const Implementation& ragged_dot_cpu_implementation() {
  static const CpuRaggedDot impl;
  return impl;
}

}  // namespace tokamax
