// linear_softmax_cross_entropy_loss_vjp on CPU: the "cpu" implementation's config, its invariants,
// heuristics and search space.
//
// Dimensions.
//   B, H, V      rows, hidden size, vocabulary size (see base.h)
//   tv     V chunk (chunk_v): the logits / dz tile of a task is [B, tv] f32
//   tb     rows per GEMM call of the logits and dx products (tile_b)
//   th     rows of dw per GEMM call (tile_h): the dw product runs [th, tv] at a time
//   nv     V ranges (v_splits): one task each; each owns its dw columns and a dx partial [B, H]
//   tn, tk the GEMM's packed panel [tk, tn] (tile_n, tile_k)
//   mr, nr the GEMM micro-tile (mr rows x nr columns of accumulators in registers)
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "backends/device.h"
#include "ops/linear_softmax_cross_entropy_loss/vjp/base.h"

namespace tokamax {

struct CpuLsceVjpConfig {
  int chunk_v = 512;  // tv: dz columns formed at once, then consumed by both products
  int tile_b = 256;   // tb: rows of x per logits / dx GEMM call (its packed rows stay in L2)
  int tile_h = 256;   // th: rows of dw per GEMM call
  int tile_n = 256;   // columns of one packed panel inside a GEMM call
  int tile_k = 256;   // K block of the GEMM (depth of the packed panels)
  int v_splits = 0;   // nv: V ranges (tasks); 0 = cpu_lsce_vjp_v_splits
  int mr = 0;         // micro-tile rows; 0 (with nr = 0) = this CPU's first shape
  int nr = 0;         // micro-tile columns, a multiple of the f32 lanes
  // "convert_f32" (bf16 widened, dz f32) | "native_dot" (vdpbf16ps) | "amx" (AMX tiles): the
  // bf16 engines run all three products on bf16, dz rounded to bf16 for the gradient products
  std::string bf16_path = "convert_f32";
  int num_threads = 0;  // 0 = all cores

  void validate() const;
  template <class V>
  void visit(V&& v) {
    v("chunk_v", chunk_v);
    v("tile_b", tile_b);
    v("tile_h", tile_h);
    v("tile_n", tile_n);
    v("tile_k", tile_k);
    v("v_splits", v_splits);
    v("mr", mr);
    v("nr", nr);
    v("bf16_path", bf16_path);
    v("num_threads", num_threads);
  }
  auto key() const {
    return std::make_tuple(chunk_v, tile_b, tile_h, tile_n, tile_k, v_splits, mr, nr, bf16_path,
                           num_threads);
  }
};

// Bound on the per-thread dz tile [B, tv] f32 (64 MB).
inline constexpr int64_t kCpuLsceVjpMaxDzTile = int64_t{1} << 24;
// Bound on the dx partials, nv * B * H f32 (256 MB), the kernel's largest scratch.
inline constexpr int64_t kCpuLsceVjpMaxPartials = int64_t{1} << 26;

// bf16 x and bf16 w: the problems bf16_path=native_dot can run.
bool is_lsce_vjp_bf16_problem(const LinearSoftmaxCrossEntropyVjpProblem& p);

// V ranges for `threads` threads when the config says 0: one or two per thread (two where their
// dx partials stay under B * V / 8), at most one per chunk, and within kCpuLsceVjpMaxPartials.
int64_t cpu_lsce_vjp_v_splits(const LinearSoftmaxCrossEntropyVjpProblem& p,
                              const CpuLsceVjpConfig& c, int threads);

CpuLsceVjpConfig cpu_lsce_vjp_heuristics_config(const LinearSoftmaxCrossEntropyVjpProblem& p,
                                                const Device& device);
std::vector<CpuLsceVjpConfig> cpu_lsce_vjp_autotuning_configs(
    const LinearSoftmaxCrossEntropyVjpProblem& p, const Device& device);

}  // namespace tokamax
