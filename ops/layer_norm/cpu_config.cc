// layer_norm and layer_norm_vjp on CPU: validation of the "cpu" config, its heuristics and its
// search space.
//
// Dimensions.
//   C      the normalized extent (x's extent along axis)
//   O      product of x's extents before the axis
//   I      product of x's extents after the axis (contiguous); I = 1 for the last axis
//   tI     inner_block: inner elements of one block when I > 1
//   L      f32 lanes of the SIMD target (16 on AVX-512, 8 on AVX2)
#include "ops/layer_norm/cpu_config.h"

#include <algorithm>
#include <set>
#include <string>

#include "backends/cpu/cpu_device.h"
#include "ops/common/cpu_checks.h"

namespace tokamax {
namespace {

constexpr int kMaxUnits = 1 << 20;
constexpr int kMaxInnerBlock = 1 << 16;
// Bytes of the input arrays one task should read: large enough that handing out a task (an atomic
// increment) and restarting the prefetch stream ahead (a burst of misses at the task's start) are
// noise, small enough that the last tasks do not leave threads idle (at least 4 tasks per thread
// besides). The tuned AlphaFold last-axis shapes pick 1024-8192 rows of 128-256 bytes.
constexpr int64_t kTaskBytes = 1024 * 1024;
constexpr int64_t kMinTaskBytes = 16 * 1024;
// Blocks per task of a strided axis (heuristics).
constexpr int64_t kBlocksPerTask = 16;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// f32 lanes of the widest vector the device offers (the cache-line-sized unit of a block).
int64_t lanes(const cpu::CpuInfo& device) { return std::max<int64_t>(device.simd_bytes / 4, 1); }

// tI: the block of x [C, tI] and the next one (prefetched while this one computes) in a quarter
// of L2, leaving room for the output lines in flight and the other data (the VJP's dout blocks
// go beside them: half of L2 in all); a multiple of L, at most I rounded up to L and at most 2048
// (a 4 KiB page of bf16 per row: past that, runs are no longer and the block only costs L2).
// On the AlphaFold axis-0 shapes a block sized this way beats the 2048 cap, and the VJP's
// blocks as wide as the forward's beat x and dout sharing that quarter of L2, while blocks twice
// as wide again are no faster (measured: docs/measurement_log.md, "layer_norm axis-0 blocks").
int64_t inner_block_for(const LayerNormProblem& p, const cpu::CpuInfo& device) {
  const int64_t L = lanes(device);
  const int64_t l2 = device.l2_bytes > 0 ? device.l2_bytes : (1 << 20);
  const int64_t fit =
      l2 / 8 / (static_cast<int64_t>(dtype_size(p.x_dtype)) * std::max<int64_t>(p.C, 1));
  int64_t tI = std::clamp<int64_t>(fit / L * L, L, 2048);
  return std::min(tI, ceil_div(p.I, L) * L);
}

// Units per task: about kTaskBytes of the inputs, but at least 4 tasks per thread when there is
// work.
int64_t units_per_task_for(const LayerNormProblem& p, int64_t unit_elements, int64_t units,
                           const cpu::CpuInfo& device, int reads) {
  const int64_t unit_bytes =
      std::max<int64_t>(int64_t{reads} * unit_elements * dtype_size(p.x_dtype), 1);
  const int64_t by_bytes = std::max<int64_t>(kTaskBytes / unit_bytes, 1);
  const int64_t by_balance = std::max<int64_t>(ceil_div(units, 4 * std::max(device.cores, 1)), 1);
  // But not below kMinTaskBytes: waking a thread for a few rows costs more than it saves (a
  // problem of one task runs on the caller alone).
  const int64_t at_least = std::max<int64_t>(kMinTaskBytes / unit_bytes, 1);
  return std::clamp<int64_t>(std::max(std::min(by_bytes, by_balance), at_least), 1, kMaxUnits);
}

}  // namespace

void CpuLayerNormConfig::validate() const {
  require_config(rows_per_task >= 1 && rows_per_task <= kMaxUnits, "rows_per_task", [&] {
    return "rows_per_task is " + std::to_string(rows_per_task) + "; expected 1.." +
           std::to_string(kMaxUnits);
  });
  require_config(inner_block >= 1 && inner_block <= kMaxInnerBlock, "inner_block", [&] {
    return "inner_block is " + std::to_string(inner_block) + "; expected 1.." +
           std::to_string(kMaxInnerBlock);
  });
  require_config(num_threads >= 0, "num_threads", [&] {
    return "num_threads is " + std::to_string(num_threads) + "; expected >= 0 (0 = all cores)";
  });
}

void check_layer_norm_config(const LayerNormProblem& p, const CpuLayerNormConfig& c,
                             const Device& device) {
  require_num_threads(c.num_threads, device);
  if (!p.last_axis()) {
    const int64_t elements = p.C * std::min<int64_t>(c.inner_block, p.I);
    require_config(elements <= kCpuLayerNormMaxBlockFloats, "inner_block", [&] {
      return "inner_block * C is " + std::to_string(elements) +
             " elements per block, far past any L2 (max " +
             std::to_string(kCpuLayerNormMaxBlockFloats) + ")";
    });
  }
}

CpuLayerNormConfig cpu_layer_norm_heuristics_config(const LayerNormProblem& p, const Device& target,
                                                    int reads) {
  const cpu::CpuInfo& device = cpu::cpu_info(target);
  CpuLayerNormConfig c;
  // Stream the output once the inputs and the output together exceed the last-level cache: the
  // output would be evicted to DRAM anyway, and skipping its read-for-ownership saves a third of
  // the traffic (a quarter for the VJP's two inputs). Smaller outputs stay cached for the
  // consumer.
  const double l3 = device.l3_bytes > 0 ? static_cast<double>(device.l3_bytes) : 32.0e6;
  c.stream_stores =
      (reads + 1.0) * static_cast<double>(p.num_elements()) * dtype_size(p.x_dtype) > l3;
  if (p.last_axis()) {
    c.rows_per_task = static_cast<int>(units_per_task_for(p, p.C, p.O, device, reads));
    return c;
  }
  const int64_t tI = inner_block_for(p, device);
  c.inner_block = static_cast<int>(tI);
  // Consecutive blocks of a task continue the same C row streams, and each block prefetches its
  // successor in the task, so tasks take several: kBlocksPerTask, or fewer for balance (4 tasks
  // per thread). Not more: on a shared machine a thread that is descheduled for a while must
  // leave enough tasks for the others (the tuned AlphaFold axis-0 shapes pick 16).
  const int64_t units = p.O * ceil_div(p.I, tI);
  c.rows_per_task = static_cast<int>(std::clamp<int64_t>(
      std::min(kBlocksPerTask, ceil_div(units, 4 * std::max(device.cores, 1))), 1, kMaxUnits));
  return c;
}

std::vector<CpuLayerNormConfig> cpu_layer_norm_autotuning_configs(const LayerNormProblem& p,
                                                                  const Device& target, int reads) {
  const cpu::CpuInfo& device = cpu::cpu_info(target);
  const CpuLayerNormConfig h = cpu_layer_norm_heuristics_config(p, target, reads);
  std::vector<CpuLayerNormConfig> configs = {h};
  std::set<std::tuple<int, int, int, bool, bool>> seen = {h.key()};
  auto add = [&](int rows_per_task, int inner_block) {
    CpuLayerNormConfig c = h;
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
  // Blocks of L * 8 .. L * 128 elements of all the inputs together.
  for (const int64_t multiple : {8, 16, 32, 64, 128}) {
    const int64_t tI = L * multiple / reads;
    if (tI * std::max<int64_t>(p.C, 1) > kCpuLayerNormMaxBlockFloats) continue;
    if (tI > ceil_div(p.I, L) * L) continue;
    // Blocks per task: few (balance), 16, or 4 tasks per thread (the longest runs of next-block
    // prefetches). One block per task would never prefetch its successor.
    const int64_t units = p.O * ceil_div(p.I, tI);
    const int balance = static_cast<int>(
        std::clamp<int64_t>(ceil_div(units, 4 * std::max(device.cores, 1)), 1, kMaxUnits));
    for (int per_task : {4, 16, balance}) add(per_task, static_cast<int>(tI));
  }
  return configs;
}

}  // namespace tokamax
