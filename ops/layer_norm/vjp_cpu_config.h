// layer_norm_vjp on CPU: the "cpu" implementation's config, its invariants and its heuristics.
//
// Dimensions.
//   C      the normalized extent (x's extent along axis)
//   O      product of x's extents before the axis
//   I      product of x's extents after the axis (contiguous); I = 1 for the last axis
//   tI     inner_block: inner elements of one block when I > 1
//   L      f32 lanes of the SIMD target (16 on AVX-512, 8 on AVX2)
#pragma once

#include <tuple>
#include <vector>

#include "backends/device.h"
#include "ops/framework/config.h"
#include "ops/layer_norm/vjp_base.h"

namespace tokamax {

struct CpuLayerNormVjpConfig {
  // Units per task: rows (last axis) or (o, inner block) pairs (other axes). Tasks are handed
  // out dynamically; larger tasks amortize the hand-out, smaller ones balance better.
  int rows_per_task = 64;
  // tI: inner elements per block for a non-last axis; the blocks of x and dout [C, tI] should
  // stay in L2 for the second and third passes. Best a multiple of L. Ignored for the last axis.
  int inner_block = 256;
  int num_threads = 0;  // 0 = all cores
  // Non-temporal stores of dx (no read-for-ownership of its lines: a quarter less DRAM traffic)
  // when the problem is far larger than the caches; only where vectors stay aligned.
  bool stream_stores = false;
  // bf16 dx rounded by vcvtneps2bf16 where the CPU has avx512_bf16 (subnormals flush to zero);
  // false: the exact integer rounding everywhere.
  bool native_bf16 = true;

  void validate() const;
  template <class V>
  void visit(V&& v) {
    v("rows_per_task", rows_per_task);
    v("inner_block", inner_block);
    v("num_threads", num_threads);
    v("stream_stores", stream_stores);
    v("native_bf16", native_bf16);
  }
  auto key() const {
    return std::make_tuple(rows_per_task, inner_block, num_threads, stream_stores, native_bf16);
  }
};

// Bound on the blocks of x and dout [C, tI] of a non-last axis (elements each): far past any L2.
inline constexpr int64_t kCpuLayerNormVjpMaxBlockFloats = int64_t{1} << 24;

// The implementation's heuristics_config and autotuning_configs. `device` may be another
// machine (cross-tuning): only its cores and cache sizes are used.
CpuLayerNormVjpConfig cpu_layer_norm_vjp_heuristics_config(const LayerNormVjpProblem& p,
                                                          const Device& device);
std::vector<CpuLayerNormVjpConfig> cpu_layer_norm_vjp_autotuning_configs(
    const LayerNormVjpProblem& p, const Device& device);

}  // namespace tokamax
