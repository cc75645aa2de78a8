// linear_softmax_cross_entropy_loss_vjp on CPU: the "cpu" implementation (checks, heuristics,
// search space, launch: the forward's row statistics, then the backward kernel).
//
// Dimensions: as cpu_config.h (B, H, V; tv, tb, th, nv; mr, nr; L the f32 lanes).
#include <algorithm>
#include <string>
#include <vector>

#include "backends/cpu/simd_target.h"
#include "backends/cpu/thread_pool.h"
#include "ops/common/cpu_checks.h"
#include "ops/common/cpu_gemm/checks.h"
#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/framework/errors.h"
#include "ops/framework/op.h"
#include "ops/linear_softmax_cross_entropy_loss/cpu_config.h"
#include "ops/linear_softmax_cross_entropy_loss/cpu_kernel.h"
#include "ops/linear_softmax_cross_entropy_loss/vjp/base.h"
#include "ops/linear_softmax_cross_entropy_loss/vjp/cpu_config.h"
#include "ops/linear_softmax_cross_entropy_loss/vjp/cpu_kernel.h"

namespace tokamax {
namespace {

int nr_vectors(int nr) {
  const int lanes = cpu::simd_f32_lanes();
  if (nr % lanes != 0) {
    throw NotImplemented("cpu linear_softmax_cross_entropy_loss_vjp: nr=" + std::to_string(nr) +
                         " is not a multiple of the " + std::to_string(lanes) +
                         " f32 lanes of this CPU's SIMD target");
  }
  return nr / lanes;
}

// The forward kernel's options for the row statistics pass: the forward's own heuristics for
// this device (a tuned forward entry is the forward op's, not consulted here), on this config's
// threads.
LsceCpuKernelOptions stats_options(const LinearSoftmaxCrossEntropyProblem& p, int num_threads,
                                   const Device& device) {
  const CpuLsceConfig f = cpu_lsce_heuristics_config(p, device);
  LsceCpuKernelOptions o;
  o.tile_b = f.tile_b;
  o.chunk_v = f.chunk_v;
  o.tile_n = f.tile_n;
  o.tile_k = f.tile_k;
  const int threads = cpu::thread_pool().threads_for(int64_t{1} << 20, num_threads);
  const int64_t nb = std::max<int64_t>(1, (p.B + f.tile_b - 1) / f.tile_b);
  o.v_splits = std::max<int64_t>(1, (4 * threads + nb - 1) / nb);
  o.mr = f.mr;
  o.nr_vectors = nr_vectors(f.nr);
  o.engine = gemm_engine(f.bf16_path);
  o.num_threads = num_threads;
  return o;
}

class CpuLinearSoftmaxCrossEntropyVjp final
    : public TypedImplementation<LinearSoftmaxCrossEntropyVjpProblem, CpuLsceVjpConfig> {
 public:
  std::string_view name() const override { return "cpu"; }
  nlohmann::json describe() const override {
    return {{"simd_target", cpu::simd_target_name()}, {"native_bf16", gemm_has_native_bf16()}};
  }

  void check(const LinearSoftmaxCrossEntropyVjpProblem& p, const Device&) const override {
    if (p.fwd.x_dtype == DType::kF64 || p.fwd.w_dtype == DType::kF64) {
      throw NotImplemented(
          "cpu: f64 inputs; the kernel accumulates the logits and gradients in f32, which would "
          "drop their precision (the reference takes f64)");
    }
  }

  void check_config(const LinearSoftmaxCrossEntropyVjpProblem& p, const CpuLsceVjpConfig& c,
                    const Device& device) const override {
    require_num_threads(c.num_threads, device);
    if (c.mr != 0 || c.nr != 0) require_micro_tile(c.mr, c.nr);
    require_bf16_path(c.bf16_path, is_lsce_vjp_bf16_problem(p), "bf16 x and bf16 w");
    const int64_t tile = std::max<int64_t>(p.fwd.B, 1) * std::min<int64_t>(c.chunk_v, p.fwd.V);
    require_config(tile <= kCpuLsceVjpMaxDzTile, "chunk_v", [&] {
      return "B * chunk_v is " + std::to_string(tile) + ", over the " +
             std::to_string(kCpuLsceVjpMaxDzTile) + " f32 of the per-thread dz tile";
    });
    const int64_t partials =
        std::min<int64_t>(c.v_splits, (p.fwd.V + c.chunk_v - 1) / c.chunk_v) * p.fwd.B * p.fwd.H;
    require_config(c.v_splits <= 1 || partials <= kCpuLsceVjpMaxPartials, "v_splits", [&] {
      return "v_splits * B * H is " + std::to_string(partials) + ", over the " +
             std::to_string(kCpuLsceVjpMaxPartials) + " f32 of the dx partials";
    });
  }

  CpuLsceVjpConfig heuristics_config(const LinearSoftmaxCrossEntropyVjpProblem& p,
                                     const Device& device) const override {
    return cpu_lsce_vjp_heuristics_config(p, device);
  }
  std::vector<CpuLsceVjpConfig> autotuning_configs(const LinearSoftmaxCrossEntropyVjpProblem& p,
                                                   const Device& device) const override {
    return cpu_lsce_vjp_autotuning_configs(p, device);
  }

  void run(const LinearSoftmaxCrossEntropyVjpProblem& p, const CpuLsceVjpConfig& c,
           const Device& device, const TensorMap& inputs, TensorMap& outputs) const override {
    check(p, device);
    const Tensor& labels = inputs.at("labels");
    const std::vector<double> weights = lsce_vjp_row_weights(p, labels, inputs.at("dloss"));
    const void* x = inputs.at("x").raw();
    const void* w = inputs.at("w").raw();
    // Pass 1: each row's log-sum-exp: the residual when given, else the forward's fused kernel
    // (one more logits product, but no [B, V] buffer).
    std::vector<double> lse(static_cast<size_t>(p.fwd.B)), label_logit(lse.size());
    if (p.has_lse) {
      const float* given = inputs.at("lse").data<float>();
      for (int64_t b = 0; b < p.fwd.B; ++b) lse[b] = given[b];
    } else {
      lsce_cpu_row_stats(p.fwd, stats_options(p.fwd, c.num_threads, device), x,
                         labels.data<int32_t>(), w, lse.data(), label_logit.data());
    }
    // Pass 2: dz per chunk, straight into dx and dw.
    LsceVjpCpuKernelOptions o;
    o.chunk_v = c.chunk_v;
    o.tile_b = c.tile_b;
    o.tile_h = c.tile_h;
    o.tile_n = c.tile_n;
    o.tile_k = c.tile_k;
    o.v_splits = cpu_lsce_vjp_v_splits(
        p, c, cpu::thread_pool().threads_for(int64_t{1} << 20, c.num_threads));
    o.mr = c.mr;
    o.nr_vectors = nr_vectors(c.nr);
    o.engine = gemm_engine(c.bf16_path);
    o.num_threads = c.num_threads;
    lsce_vjp_cpu_kernel(p, o, x, labels.data<int32_t>(), w, lse.data(), weights.data(),
                        outputs.at("dx").raw(), outputs.at("dw").raw());
  }
};

}  // namespace

const Implementation& linear_softmax_cross_entropy_loss_vjp_cpu_implementation() {
  static const CpuLinearSoftmaxCrossEntropyVjp impl;
  return impl;
}

}  // namespace tokamax
