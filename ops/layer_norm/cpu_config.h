// layer_norm and layer_norm_vjp on CPU: the "cpu" implementations' config, its invariants and its
// heuristics.
//
// Dimensions.
//   C      the normalized extent (x's extent along axis)
//   O      product of x's extents before the axis
//   I      product of x's extents after the axis (contiguous); I = 1 for the last axis
//   tI     inner_block: inner elements of one block when I > 1
//   L      f32 lanes of the SIMD target (16 on AVX-512, 8 on AVX2)
#pragma once

#include <string>
#include <tuple>
#include <vector>

#include "backends/device.h"
#include "ops/framework/config.h"
#include "ops/framework/errors.h"
#include "ops/layer_norm/base.h"

namespace tokamax {

struct CpuLayerNormConfig {
  // Units per task: rows (last axis) or (o, inner block) pairs (other axes). Tasks are handed
  // out dynamically; larger tasks amortize the hand-out, smaller ones balance better.
  int rows_per_task = 64;
  // tI: inner elements per block for a non-last axis; the block of x (and dout) [C, tI] should
  // stay in L2.
  // Best a multiple of L (the last block of a row may be partial). Ignored for the last axis.
  int inner_block = 256;
  int num_threads = 0;  // 0 = all cores
  // Non-temporal stores of out / dx (no read-for-ownership of the output lines: a third, for the
  // VJP a quarter, less DRAM traffic) when it is far larger than the caches; only where vectors
  // stay aligned.
  bool stream_stores = false;
  // bf16 outputs (out / dx) rounded by vcvtneps2bf16 where the CPU has avx512_bf16 (one instruction
  // instead of ten; subnormals flush to zero); false: the exact integer rounding everywhere.
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

// Bound on the block of x [C, tI] of a non-last axis (elements): far past any L2.
inline constexpr int64_t kCpuLayerNormMaxBlockFloats = int64_t{1} << 24;

// check_config of the cpu implementations (layer_norm and layer_norm_vjp): threads, and the
// block of a non-last axis within kCpuLayerNormMaxBlockFloats.
void check_layer_norm_config(const LayerNormProblem& p, const CpuLayerNormConfig& c,
                             const Device& device);

// The implementations' heuristics_config and autotuning_configs. `reads` is how many x-sized
// arrays a row reads (1: the forward's x; 2: the VJP's x and dout), which sizes tasks and blocks
// by bytes. `device` may be another machine (cross-tuning): only its cores and cache sizes are
// used.
CpuLayerNormConfig cpu_layer_norm_heuristics_config(const LayerNormProblem& p, const Device& device,
                                                    int reads = 1);
std::vector<CpuLayerNormConfig> cpu_layer_norm_autotuning_configs(const LayerNormProblem& p,
                                                                  const Device& device,
                                                                  int reads = 1);

}  // namespace tokamax
