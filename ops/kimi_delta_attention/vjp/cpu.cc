// kimi_delta_attention_vjp: the CPU implementation class ("cpu").
//
// Dimensions: as base.h.
#include <vector>

#include "backends/cpu/simd_target.h"
#include "ops/common/cpu_checks.h"
#include "ops/framework/op.h"
#include "ops/kimi_delta_attention/vjp/base.h"
#include "ops/kimi_delta_attention/vjp/cpu_kernel.h"

namespace tokamax {
namespace {

class CpuKdaVjp final : public TypedImplementation<KdaVjpProblem, CpuKdaVjpConfig> {
 public:
  std::string_view name() const override { return "cpu"; }
  nlohmann::json describe() const override { return {{"simd_target", cpu::simd_target_name()}}; }

  void check_config(const KdaVjpProblem&, const CpuKdaVjpConfig& c,
                    const Device& device) const override {
    require_num_threads(c.num_threads, device);
  }
  CpuKdaVjpConfig heuristics_config(const KdaVjpProblem& p, const Device&) const override {
    // One task per (head, batch row): with little work, one thread. States of at least 64 x 64
    // in chunks of 32 on the GEMM engine (blocks the chunked form cannot take go token by
    // token); smaller ones token by token in blocks of 16, whose kept states (16 K V floats)
    // stay in L2 between the block's recompute and its backward.
    CpuKdaVjpConfig c;
    const KdaProblem& f = p.fwd;
    const double work = static_cast<double>(f.H) * f.B * f.T * f.K * f.V;
    c.num_threads = work < double(1 << 16) ? 1 : 0;
    c.chunked = f.K * f.V >= 64 * 64;
    c.block = c.chunked ? 32 : 16;
    return c;
  }
  std::vector<CpuKdaVjpConfig> autotuning_configs(const KdaVjpProblem& p,
                                                  const Device& device) const override {
    std::vector<CpuKdaVjpConfig> configs;
    for (const bool chunked : {false, true}) {
      for (const int block : chunked ? std::vector<int>{16, 32, 64} : std::vector<int>{8, 16, 32}) {
        CpuKdaVjpConfig c = heuristics_config(p, device);
        c.chunked = chunked;
        c.block = block;
        configs.push_back(c);
      }
    }
    return configs;
  }
  void run(const KdaVjpProblem& p, const CpuKdaVjpConfig& c, const Device&, const TensorMap& inputs,
           TensorMap& outputs) const override {
    kimi_delta_attention_vjp_cpu_kernel(p, c, inputs, outputs);
  }
};

}  // namespace

const Implementation& kimi_delta_attention_vjp_cpu_implementation() {
  static const CpuKdaVjp impl;
  return impl;
}

}  // namespace tokamax
