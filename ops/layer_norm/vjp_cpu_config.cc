// layer_norm_vjp on CPU: validation of the "cpu" config, its heuristics and its search space.
//
// Dimensions.
//   C      the normalized extent (x's extent along axis)
//   O      product of x's extents before the axis
//   I      product of x's extents after the axis (contiguous); I = 1 for the last axis
//   tI     inner_block: inner elements of one block when I > 1
//   L      f32 lanes of the SIMD target (16 on AVX-512, 8 on AVX2)
#include "ops/layer_norm/vjp_cpu_config.h"

#include <algorithm>
#include <set>
#include <string>

#include "backends/cpu/cpu_device.h"

namespace tokamax {
namespace {

constexpr int kMaxUnits = 1 << 20;
constexpr int kMaxInnerBlock = 1 << 16;
// Bytes of x and dout one task should read: large enough that handing out a task and restarting
// the prefetch streams are noise, small enough to leave at least 4 tasks per thread (as the
// forward's cpu_config.cc).
constexpr int64_t kTaskBytes = 1024 * 1024;
constexpr int64_t kMinTaskBytes = 16 * 1024;
// Blocks per task of a strided axis (heuristics): consecutive blocks continue the same row
// streams and each prefetches its successor.
constexpr int64_t kBlocksPerTask = 16;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t lanes(const cpu::CpuInfo& device) { return std::max<int64_t>(device.simd_bytes / 4, 1); }

// tI: the blocks of x and dout [C, tI] (read from memory once, re-read from L2 once or twice)
// and the next ones (prefetched during the output pass) in a quarter of L2; a multiple of L, at
// most I rounded up to L and at most 2048.
int64_t inner_block_for(const LayerNormVjpProblem& p, const cpu::CpuInfo& device) {
  const int64_t L = lanes(device);
  const int64_t l2 = device.l2_bytes > 0 ? device.l2_bytes : (1 << 20);
  const int64_t fit =
      l2 / 16 / (static_cast<int64_t>(dtype_size(p.x_dtype)) * std::max<int64_t>(p.C, 1));
  const int64_t tI = std::clamp<int64_t>(fit / L * L, L, 2048);
  return std::min(tI, ceil_div(p.I, L) * L);
}

// Units per task: about kTaskBytes of x and dout, but at least 4 tasks per thread when there is
// work, and not below kMinTaskBytes (a problem of one task runs on the caller alone).
int64_t units_per_task_for(const LayerNormVjpProblem& p, int64_t unit_elements, int64_t units,
                           const cpu::CpuInfo& device) {
  const int64_t unit_bytes = std::max<int64_t>(2 * unit_elements * dtype_size(p.x_dtype), 1);
  const int64_t by_bytes = std::max<int64_t>(kTaskBytes / unit_bytes, 1);
  const int64_t by_balance = std::max<int64_t>(ceil_div(units, 4 * std::max(device.cores, 1)), 1);
  const int64_t at_least = std::max<int64_t>(kMinTaskBytes / unit_bytes, 1);
  return std::clamp<int64_t>(std::max(std::min(by_bytes, by_balance), at_least), 1, kMaxUnits);
}

}  // namespace

void CpuLayerNormVjpConfig::validate() const {
  require_range("rows_per_task", rows_per_task, 1, kMaxUnits);
  require_range("inner_block", inner_block, 1, kMaxInnerBlock);
  require_config(num_threads >= 0, "num_threads", [&] {
    return "num_threads is " + std::to_string(num_threads) + "; expected >= 0 (0 = all cores)";
  });
}

CpuLayerNormVjpConfig cpu_layer_norm_vjp_heuristics_config(const LayerNormVjpProblem& p,
                                                          const Device& target) {
  const cpu::CpuInfo& device = cpu::cpu_info(target);
  CpuLayerNormVjpConfig c;
  // Stream dx once x, dout and dx together exceed the last-level cache: dx would be evicted to
  // DRAM anyway, and skipping its read-for-ownership saves a quarter of the traffic.
  const double l3 = device.l3_bytes > 0 ? static_cast<double>(device.l3_bytes) : 32.0e6;
  c.stream_stores = 3.0 * static_cast<double>(p.num_elements()) * dtype_size(p.x_dtype) > l3;
  if (p.last_axis()) {
    c.rows_per_task = static_cast<int>(units_per_task_for(p, p.C, p.O, device));
    return c;
  }
  const int64_t tI = inner_block_for(p, device);
  c.inner_block = static_cast<int>(tI);
  const int64_t units = p.O * ceil_div(p.I, tI);
  c.rows_per_task = static_cast<int>(std::clamp<int64_t>(
      std::min(kBlocksPerTask, ceil_div(units, 4 * std::max(device.cores, 1))), 1, kMaxUnits));
  return c;
}

std::vector<CpuLayerNormVjpConfig> cpu_layer_norm_vjp_autotuning_configs(
    const LayerNormVjpProblem& p, const Device& target) {
  const cpu::CpuInfo& device = cpu::cpu_info(target);
  const CpuLayerNormVjpConfig h = cpu_layer_norm_vjp_heuristics_config(p, target);
  std::vector<CpuLayerNormVjpConfig> configs = {h};
  std::set<std::tuple<int, int, int, bool, bool>> seen = {h.key()};
  auto add = [&](int rows_per_task, int inner_block) {
    CpuLayerNormVjpConfig c = h;
    c.rows_per_task = std::clamp(rows_per_task, 1, kMaxUnits);
    c.inner_block = std::clamp(inner_block, 1, kMaxInnerBlock);
    for (const bool stream : {h.stream_stores, !h.stream_stores}) {
      c.stream_stores = stream;
      if (seen.insert(c.key()).second) configs.push_back(c);
    }
  };
  add(h.rows_per_task, h.inner_block);  // the heuristic's tiling with the other store kind
  if (p.last_axis()) {
    for (int scale : {-4, -2, 2, 4, 16}) {
      add(scale < 0 ? h.rows_per_task / -scale : h.rows_per_task * scale, h.inner_block);
    }
    return configs;
  }
  const int64_t L = lanes(device);
  for (int64_t tI : {L * 4, L * 8, L * 16, L * 32, L * 64}) {
    if (tI * std::max<int64_t>(p.C, 1) > kCpuLayerNormVjpMaxBlockFloats) continue;
    if (tI > ceil_div(p.I, L) * L) continue;
    const int64_t units = p.O * ceil_div(p.I, tI);
    const int balance = static_cast<int>(
        std::clamp<int64_t>(ceil_div(units, 4 * std::max(device.cores, 1)), 1, kMaxUnits));
    for (int per_task : {4, 16, balance}) add(per_task, static_cast<int>(tI));
  }
  return configs;
}

}  // namespace tokamax
