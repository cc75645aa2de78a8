// linear_softmax_cross_entropy_loss on CPU: the "cpu" implementation (support, config checks,
// launch, the loss reduction); heuristics and search space are in cpu_config.cc.
//
// Dimensions.
//   B, H, V      rows, hidden size, vocabulary size (see base.h)
//   tb, tv       row tile (tile_b) and logits chunk (chunk_v): the logits tile is [tb, tv] f32
//   tn, tk       the GEMM's packed w panel [tk, tn] (tile_k, tile_n)
//   nv           V ranges (v_splits): tasks are (row tile, V range) pairs
//   mr, nr       the GEMM micro-tile; L = f32 lanes of the SIMD target (16 on AVX-512)
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "backends/cpu/simd_target.h"
#include "backends/cpu/thread_pool.h"
#include "ops/common/cpu_checks.h"
#include "ops/common/cpu_gemm/checks.h"
#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/framework/errors.h"
#include "ops/framework/op.h"
#include "ops/linear_softmax_cross_entropy_loss/cpu_config.h"
#include "ops/linear_softmax_cross_entropy_loss/cpu_kernel.h"

namespace tokamax {
namespace {

class CpuLinearSoftmaxCrossEntropy final
    : public TypedImplementation<LinearSoftmaxCrossEntropyProblem, CpuLsceConfig> {
 public:
  std::string_view name() const override { return "cpu"; }
  nlohmann::json describe() const override {
    return {{"simd_target", cpu::simd_target_name()}, {"native_bf16", gemm_has_native_bf16()}};
  }

  void check(const LinearSoftmaxCrossEntropyProblem& p, const Device&) const override {
    if (p.x_dtype == DType::kF64 || p.w_dtype == DType::kF64) {
      throw NotImplemented(
          "cpu: f64 inputs; the fused kernel accumulates the logits in f32, which would drop "
          "their precision (the reference takes f64)");
    }
  }

  // A precision preset runs as the product of its expanded pieces (Problem::computed): configs
  // are checked, chosen and run for that problem.
  void check_config(const LinearSoftmaxCrossEntropyProblem& given, const CpuLsceConfig& c,
                    const Device& device) const override {
    const LinearSoftmaxCrossEntropyProblem p = given.computed();
    require_num_threads(c.num_threads, device);
    if (c.mr != 0 || c.nr != 0) require_micro_tile(c.mr, c.nr);
    require_bf16_path(c.bf16_path, is_lsce_bf16_problem(p), "bf16 x and bf16 w");
    const int64_t tile =
        std::min<int64_t>(c.tile_b, std::max<int64_t>(p.B, 1)) * std::min<int64_t>(c.chunk_v, p.V);
    require_config(tile <= kCpuLsceMaxLogitsTile, "chunk_v",
                   "tile_b * chunk_v is " + std::to_string(tile) + ", over the " +
                       std::to_string(kCpuLsceMaxLogitsTile) +
                       " f32 of the per-thread logits tile");
  }

  CpuLsceConfig heuristics_config(const LinearSoftmaxCrossEntropyProblem& p,
                                  const Device& device) const override {
    return cpu_lsce_heuristics_config(p.computed(), device);
  }
  std::vector<CpuLsceConfig> autotuning_configs(const LinearSoftmaxCrossEntropyProblem& p,
                                                const Device& device) const override {
    return cpu_lsce_autotuning_configs(p.computed(), device);
  }

  void run(const LinearSoftmaxCrossEntropyProblem& given, const CpuLsceConfig& c,
           const Device& device, const TensorMap& given_inputs, TensorMap& outputs) const override {
    check(given, device);
    const LinearSoftmaxCrossEntropyProblem p = given.computed();
    const TensorMap inputs = expand_lsce_precision_operands(given, given_inputs);
    const Tensor& labels = inputs.at("labels");
    check_lsce_labels(p, labels);
    LsceCpuKernelOptions options;
    options.tile_b = c.tile_b;
    options.chunk_v = c.chunk_v;
    options.tile_n = c.tile_n;
    options.tile_k = c.tile_k;
    const int threads = cpu::thread_pool().threads_for(int64_t{1} << 20, c.num_threads);
    const int64_t nb = std::max<int64_t>(1, (p.B + c.tile_b - 1) / c.tile_b);  // B = 0: none
    options.v_splits =
        c.v_splits > 0 ? c.v_splits : std::max<int64_t>(1, (4 * threads + nb - 1) / nb);
    const int lanes = cpu::simd_f32_lanes();
    if (c.nr % lanes != 0) {
      throw NotImplemented("cpu linear_softmax_cross_entropy_loss: nr=" + std::to_string(c.nr) +
                           " is not a multiple of the " + std::to_string(lanes) +
                           " f32 lanes of this CPU's SIMD target");
    }
    options.mr = c.mr;
    options.nr_vectors = c.nr / lanes;
    options.engine = gemm_engine(c.bf16_path);
    options.num_threads = c.num_threads;
    std::vector<double> lse(static_cast<size_t>(p.B)), label_logit(static_cast<size_t>(p.B));
    lsce_cpu_row_stats(p, options, inputs.at("x").raw(), labels.data<int32_t>(),
                       inputs.at("w").raw(), lse.data(), label_logit.data());
    // loss_i = lse_i - z_i,label in f64 and the reduction in f64: B terms, cheaper than any
    // logit, so the only f32 rounding left after the kernel is the output's.
    float* out = outputs.at("loss").data<float>();
    double total = 0.0;
    const int32_t* label = labels.data<int32_t>();
    for (int64_t i = 0; i < p.B; ++i) {
      // A padding label: zero loss (its row's statistics were computed and are dropped).
      const double loss = lsce_label_counts(label[i], p.V) ? lse[i] - label_logit[i] : 0.0;
      if (p.reduction == LsceReduction::kNone) out[i] = static_cast<float>(loss);
      total += loss;
    }
    if (p.reduction == LsceReduction::kSum) out[0] = static_cast<float>(total);
    if (p.reduction == LsceReduction::kMean) {
      out[0] = static_cast<float>(total / static_cast<double>(std::max<int64_t>(p.B, 1)));
    }
    if (p.return_residuals) {  // every row's, padding included
      float* lse_out = outputs.at("lse").data<float>();
      for (int64_t i = 0; i < p.B; ++i) lse_out[i] = static_cast<float>(lse[i]);
    }
  }
};

}  // namespace

const Implementation& lsce_cpu_impl() {
  static const CpuLinearSoftmaxCrossEntropy impl;
  return impl;
}

const Implementation& linear_softmax_cross_entropy_loss_cpu_implementation() {
  return lsce_cpu_impl();
}

}  // namespace tokamax
