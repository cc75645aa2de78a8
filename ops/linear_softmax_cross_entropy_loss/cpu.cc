// linear_softmax_cross_entropy_loss on CPU: the "cpu" implementation (config checks, heuristics,
// search space, launch, reduction).
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

// Below this many multiply-adds (~30 us of one core) a second thread costs more to wake than it
// saves; measured on the 2-core development machine under load, a woken worker cost ~1 ms.
constexpr double kSerialMultiplyAdds = double(1 << 22);
// Bound on the per-thread logits tile [tb, tv] f32 (64 MB): past L2 it only wastes memory.
constexpr int64_t kMaxLogitsTile = int64_t{1} << 24;
constexpr int64_t kFallbackL1Bytes = 32 << 10;
constexpr int64_t kFallbackL2Bytes = 256 << 10;

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
    require_config(tile <= kMaxLogitsTile, "chunk_v",
                   "tile_b * chunk_v is " + std::to_string(tile) + ", over the " +
                       std::to_string(kMaxLogitsTile) + " f32 of the per-thread logits tile");
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
           const Device& device, const TensorMap& given_inputs,
           TensorMap& outputs) const override {
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

void CpuLsceConfig::validate() const {
  require_config(tile_b >= 1, "tile_b", "tile_b must be >= 1, got " + std::to_string(tile_b));
  require_config(chunk_v >= 1, "chunk_v", "chunk_v must be >= 1, got " + std::to_string(chunk_v));
  require_config(tile_n >= 1, "tile_n", "tile_n must be >= 1, got " + std::to_string(tile_n));
  require_config(tile_k >= 2, "tile_k", "tile_k must be >= 2, got " + std::to_string(tile_k));
  require_config(v_splits >= 0, "v_splits",
                 "v_splits must be >= 0 (0 = automatic), got " + std::to_string(v_splits));
  require_config(mr >= 0 && nr >= 0 && (mr == 0) == (nr == 0), "mr",
                 "mr and nr must both be 0 (the CPU's default micro-tile) or both set, got mr=" +
                     std::to_string(mr) + " nr=" + std::to_string(nr));
  require_bf16_path_name(bf16_path);
  require_config(num_threads >= 0, "num_threads",
                 "num_threads must be >= 0 (0 = all cores), got " + std::to_string(num_threads));
}

bool is_lsce_bf16_problem(const LinearSoftmaxCrossEntropyProblem& p) {
  return p.x_dtype == DType::kBF16 && p.w_dtype == DType::kBF16;
}

CpuLsceConfig cpu_lsce_heuristics_config(const LinearSoftmaxCrossEntropyProblem& p,
                                         const Device& target) {
  const cpu::CpuInfo& device = cpu::cpu_info(target);
  const int64_t l1 = device.l1d_bytes > 0 ? device.l1d_bytes : kFallbackL1Bytes;
  const int64_t l2 = device.l2_bytes > 0 ? device.l2_bytes : kFallbackL2Bytes;
  const int lanes = kernel_f32_lanes(device);
  CpuLsceConfig c;
  // tb: tall row tiles so that w (the big operand) is streamed as few times as possible; 256
  // rows already do 256 multiply-adds per w element, far past the machine balance.
  c.tile_b = static_cast<int>(std::clamp<int64_t>(p.B, 1, 256));
  // The micro-tile that wastes the fewest multiply-adds on padding (rows of a tile padded to mr,
  // chunk columns to nr); ties (within 2%) go to the earlier shape. Few rows (decoding, B=1..8)
  // take the flat shapes.
  MicroKernelShape shape = micro_kernel_shapes(lanes)[0];
  double best = 0;
  for (const MicroKernelShape& candidate : micro_kernel_shapes(lanes)) {
    const int64_t candidate_nr = int64_t{candidate.nr_vectors} * lanes;
    const double cost = static_cast<double>(round_up(c.tile_b, candidate.mr)) *
                        static_cast<double>(round_up(std::min<int64_t>(p.V, 2048), candidate_nr));
    if (best == 0 || cost < 0.98 * best) {
      best = cost;
      shape = candidate;
    }
  }
  const int64_t nr = int64_t{shape.nr_vectors} * lanes;
  if (!(shape == micro_kernel_shapes(lanes)[0])) {
    c.mr = shape.mr;
    c.nr = static_cast<int>(nr);
  }
  // tk: an lhs micro-panel [mr, tk] in half of L1 (as ragged_dot's heuristics).
  c.tile_k =
      static_cast<int>(std::clamp<int64_t>(l1 / (2 * int64_t{shape.mr} * 4) / 32 * 32, 32, 512));
  // tn: the packed w panel [tk, tn] f32 in half of L2 (re-read by every micro-panel of rows).
  c.tile_n =
      static_cast<int>(std::clamp<int64_t>(l2 / (2 * int64_t{c.tile_k} * 4) / nr * nr, nr, 4096));
  // tv: long chunks amortise packing the x rows (once per chunk and K block, tb * H values
  // against 2 * tb * H * tv flops); the logits tile [tb, tv] f32 then lives in L3, which the
  // accumulator updates (once per K block) and the one exp pass tolerate. Whole panels.
  const int64_t l3_share =
      device.l3_bytes > 0 ? device.l3_bytes / (2 * std::max(1, device.cores)) : 4 * l2;
  const int64_t tv_cap = std::max<int64_t>(c.tile_n, l3_share / (4 * int64_t{c.tile_b}));
  c.chunk_v = static_cast<int>(std::min<int64_t>(tv_cap, 2048) / c.tile_n * c.tile_n);
  c.chunk_v = std::max(c.chunk_v, c.tile_n);
  c.v_splits = 0;
  if (is_lsce_bf16_problem(p)) c.bf16_path = fastest_bf16_path(device);
  const double multiply_adds = static_cast<double>(p.B) * p.H * p.V;
  c.num_threads = multiply_adds < kSerialMultiplyAdds ? 1 : 0;
  return c;
}

std::vector<CpuLsceConfig> cpu_lsce_autotuning_configs(const LinearSoftmaxCrossEntropyProblem& p,
                                                       const Device& target) {
  const cpu::CpuInfo& device = cpu::cpu_info(target);
  const CpuLsceConfig base = cpu_lsce_heuristics_config(p, target);
  const int lanes = kernel_f32_lanes(device);
  std::vector<CpuLsceConfig> configs;
  std::set<decltype(base.key())> seen;
  auto add = [&](CpuLsceConfig c) {
    c.tile_b = static_cast<int>(std::clamp<int64_t>(c.tile_b, 1, std::max<int64_t>(p.B, 1)));
    c.chunk_v = static_cast<int>(std::clamp<int64_t>(c.chunk_v, 1, p.V));
    c.tile_n = std::min(c.tile_n, c.chunk_v);
    if (int64_t{c.tile_b} * c.chunk_v > kMaxLogitsTile) return;
    if (seen.insert(c.key()).second) configs.push_back(c);
  };
  add(base);
  const std::vector<std::string> paths =
      is_lsce_bf16_problem(p) ? bf16_paths_for(device) : std::vector<std::string>{"convert_f32"};
  for (const std::string& path : paths) {
    for (int chunk : {512, 1024, 2048, 4096}) {
      for (int tn : {128, 256, 512}) {
        for (int tk : {128, 256, 512}) {
          CpuLsceConfig c = base;
          c.bf16_path = path;
          c.chunk_v = chunk;
          c.tile_n = tn;
          c.tile_k = tk;
          add(c);
        }
      }
    }
    // Row tiles (w streamed more often, smaller logits tiles) and micro-tile shapes.
    for (int tb : {64, 128, 512}) {
      CpuLsceConfig c = base;
      c.bf16_path = path;
      c.tile_b = tb;
      add(c);
    }
    for (const MicroKernelShape& shape : micro_kernel_shapes(lanes)) {
      CpuLsceConfig c = base;
      c.bf16_path = path;
      c.mr = shape.mr;
      c.nr = shape.nr_vectors * lanes;
      add(c);
    }
  }
  // Splits of V: fewer, longer tasks vs finer balance.
  for (int splits : {1, 2, 4, 16}) {
    CpuLsceConfig c = base;
    c.v_splits = splits;
    add(c);
  }
  return configs;
}

const Implementation& lsce_cpu_impl() {
  static const CpuLinearSoftmaxCrossEntropy impl;
  return impl;
}

const Implementation& linear_softmax_cross_entropy_loss_cpu_implementation() {
  return lsce_cpu_impl();
}

}  // namespace tokamax
