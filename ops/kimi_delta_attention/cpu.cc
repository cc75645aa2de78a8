// kimi_delta_attention: the CPU implementation class ("cpu").
//
// Dimensions: as base.h.
#include <vector>

#include "backends/cpu/simd_target.h"
#include "ops/common/cpu_checks.h"
#include "ops/framework/op.h"
#include "ops/kimi_delta_attention/base.h"
#include "ops/kimi_delta_attention/cpu_kernel.h"

namespace tokamax {
namespace {

// The state size (K V) from which runs go in chunks by default (64 x 64).
constexpr int64_t kChunkedStateSize = 64 * 64;

class CpuKimiDeltaAttention final : public TypedImplementation<KdaProblem, CpuKdaConfig> {
 public:
  std::string_view name() const override { return "cpu"; }
  nlohmann::json describe() const override { return {{"simd_target", cpu::simd_target_name()}}; }

  void check_config(const KdaProblem&, const CpuKdaConfig& c, const Device& device) const override {
    require_num_threads(c.num_threads, device);
  }
  CpuKdaConfig heuristics_config(const KdaProblem& p, const Device&) const override {
    // One task per (head, batch row): below a few of them per core, or little work, one thread.
    CpuKdaConfig c;
    const double work = static_cast<double>(p.H) * p.B * p.T * p.K * p.V;
    c.num_threads = work < double(1 << 16) ? 1 : 0;
    // Chunks of 32 as gated_delta_rule's, whose chunk products have the same shapes; small
    // heads token by token (tune picked it on K = V = 8, by 2.3x: the GEMM's fixed costs).
    c.chunk = p.K * p.V >= kChunkedStateSize ? 32 : 0;
    return c;
  }
  std::vector<CpuKdaConfig> autotuning_configs(const KdaProblem& p,
                                               const Device& device) const override {
    std::vector<CpuKdaConfig> configs;
    for (const int chunk : {0, 32, 64, 128}) {
      CpuKdaConfig c = heuristics_config(p, device);
      c.chunk = chunk;
      configs.push_back(c);
    }
    return configs;
  }
  void run(const KdaProblem& p, const CpuKdaConfig& c, const Device&, const TensorMap& inputs,
           TensorMap& outputs) const override {
    kimi_delta_attention_cpu_kernel(p, c, inputs, outputs);
  }
};

}  // namespace

const Implementation& kimi_delta_attention_cpu_implementation() {
  static const CpuKimiDeltaAttention impl;
  return impl;
}

}  // namespace tokamax
