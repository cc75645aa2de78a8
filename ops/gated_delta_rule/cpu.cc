// gated_delta_rule: the CPU implementation class ("cpu").
//
// Dimensions: as base.h.
#include <vector>

#include "backends/cpu/simd_target.h"
#include "ops/common/cpu_checks.h"
#include "ops/framework/op.h"
#include "ops/gated_delta_rule/base.h"
#include "ops/gated_delta_rule/cpu_kernel.h"

namespace tokamax {
namespace {

// The state size (d_k d_v) from which prefill runs in chunks by default (64 x 64).
constexpr int64_t kChunkedStateSize = 64 * 64;

class CpuGatedDeltaRule final : public TypedImplementation<GdnProblem, CpuGdnConfig> {
 public:
  std::string_view name() const override { return "cpu"; }
  nlohmann::json describe() const override { return {{"simd_target", cpu::simd_target_name()}}; }

  void check_config(const GdnProblem&, const CpuGdnConfig& c, const Device& device) const override {
    require_num_threads(c.num_threads, device);
  }
  CpuGdnConfig heuristics_config(const GdnProblem& p, const Device&) const override {
    // One task per (request, value head): with little work, one thread. Chunks of 32 tokens:
    // the chunk's products grow with its square (k k^T, q k^T, P U, the solve) while the
    // state's products do not shrink, and 32 ran fastest of 32 / 48 / 64 / 128 on AVX-512.
    // Small heads run token by token: their products do not pay for the GEMM's packing and
    // tile padding (tune picked token by token on d_k = d_v = 16, by 1.09x).
    CpuGdnConfig c;
    const double work = static_cast<double>(p.T) * p.n_v * p.d_k * p.d_v;
    c.num_threads = work < double(1 << 16) ? 1 : 0;
    c.chunk = p.d_k * p.d_v >= kChunkedStateSize ? 32 : 0;
    return c;
  }
  std::vector<CpuGdnConfig> autotuning_configs(const GdnProblem& p,
                                               const Device& device) const override {
    std::vector<CpuGdnConfig> configs;
    for (const int chunk : {0, 32, 64, 128}) {
      CpuGdnConfig c = heuristics_config(p, device);
      c.chunk = chunk;
      configs.push_back(c);
    }
    return configs;
  }
  void run(const GdnProblem& p, const CpuGdnConfig& c, const Device&, const TensorMap& inputs,
           TensorMap& outputs) const override {
    gated_delta_rule_cpu_kernel(p, c, inputs, outputs);
  }
};

}  // namespace

const Implementation& gated_delta_rule_cpu_implementation() {
  static const CpuGatedDeltaRule impl;
  return impl;
}

}  // namespace tokamax
