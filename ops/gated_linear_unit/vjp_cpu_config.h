// gated_linear_unit_vjp on CPU: the "cpu" implementation's config, its invariants and heuristics.
//
// Dimensions.
//   M, K, N   as vjp_base.h; H [M, 2N] = [dg | dp]
//   tm     rows per task: of H and dx (phases 1 and 2), of the weight gradients (a K range, phase
//   3) tn     columns per task: of the gate and projection (phase 1: H), of dx (a K range, phase
//   2),
//          of one weight gradient (phase 3: dweights = x^T H)
//   tk     depth of the packed panels; pn columns of one packed panel
//   mr, nr the micro-tile
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "backends/device.h"
#include "ops/gated_linear_unit/vjp_base.h"

namespace tokamax {

struct CpuGluVjpConfig {
  // tm: the most rows of a tile; the kernel cuts M (and K, for dW) evenly under it.
  int tile_m = 252;
  int tile_n = 288;   // tn
  int tile_k = 256;   // tk
  int panel_n = 512;  // pn
  int mr = 14;
  int nr = 32;
  // bf16 x and bf16 weights: "convert_f32" widens every bf16 operand to f32 while packing and
  // keeps H in f32; "native_dot" (vdpbf16ps) and "amx" (AMX tiles) multiply bf16 in all three
  // products (the forward's bf16_path), H rounded to bf16 for the last two (glu_vjp_h_roundoff).
  std::string bf16_path = "convert_f32";
  int num_threads = 0;  // 0 = all cores

  void validate() const;
  template <class V>
  void visit(V&& v) {
    v("tile_m", tile_m);
    v("tile_n", tile_n);
    v("tile_k", tile_k);
    v("panel_n", panel_n);
    v("mr", mr);
    v("nr", nr);
    v("bf16_path", bf16_path);
    v("num_threads", num_threads);
  }
  auto key() const {
    return std::make_tuple(tile_m, tile_n, tile_k, panel_n, mr, nr, bf16_path, num_threads);
  }
};

// Per-thread f32 scratch bound of one task's 16-bit gradient tile before rounding.
inline constexpr int64_t kCpuGluVjpMaxScratch = int64_t{1} << 24;

CpuGluVjpConfig cpu_glu_vjp_heuristics_config(const GluVjpProblem& p, const Device& device);
std::vector<CpuGluVjpConfig> cpu_glu_vjp_autotuning_configs(const GluVjpProblem& p,
                                                            const Device& device);

}  // namespace tokamax
