// kimi_delta_attention_vjp on CPU: the config and the driver of the per-(head, batch row) tasks
// (cpu_kernel.h; a task in cpu_task.cc).
//
// Dimensions: as ../base.h.
#include "ops/kimi_delta_attention/vjp/cpu_kernel.h"

#include <string>
#include <vector>

#include "backends/cpu/thread_pool.h"
#include "ops/framework/config.h"
#include "ops/kimi_delta_attention/cpu_kernel.h"
#include "ops/kimi_delta_attention/vjp/cpu_task.h"

namespace tokamax {
void CpuKdaVjpConfig::validate() const {
  require_config(num_threads >= 0, "num_threads", [&] {
    return "num_threads is " + std::to_string(num_threads) + "; expected >= 0 (0 = all cores)";
  });
  require_config(block >= 1 && block <= kMaxKdaVjpBlock, "block", [&] {
    return "block is " + std::to_string(block) + "; expected 1 to " +
           std::to_string(kMaxKdaVjpBlock) + " tokens";
  });
}

void kimi_delta_attention_vjp_cpu_kernel(const KdaVjpProblem& vp, const CpuKdaVjpConfig& c,
                                         const TensorMap& inputs, TensorMap& outputs) {
  const KdaProblem& p = vp.fwd;
  const int64_t H = p.H, B = p.B, K = p.K;
  std::vector<float> a_log(static_cast<size_t>(H), 0.0f), dtb(static_cast<size_t>(H * K), 0.0f);
  if (inputs.contains("a_log")) kda_load_row(inputs.at("a_log"), 0, H, a_log.data());
  if (inputs.contains("delta_time_bias"))
    kda_load_row(inputs.at("delta_time_bias"), 0, H * K, dtb.data());
  const KdaVjpCall call{.p = p,
                        .c = c,
                        .ids = p.has_segments ? inputs.at("segment_ids").data<int32_t>() : nullptr,
                        .init = p.has_initial_state ? &inputs.at("initial_state") : nullptr,
                        .dfinal = vp.has_dfinal_state ? &inputs.at("dfinal_state") : nullptr,
                        .query = inputs.at("query"),
                        .key = inputs.at("key"),
                        .gate = inputs.at("gate"),
                        .value = inputs.at("value"),
                        .beta = inputs.at("beta"),
                        .dout = inputs.at("dout"),
                        .a_log = a_log.data(),
                        .dtb = dtb.data(),
                        .dquery = outputs.at("dquery"),
                        .dkey = outputs.at("dkey"),
                        .dvalue = outputs.at("dvalue"),
                        .dgate = outputs.at("dgate"),
                        .dbeta = outputs.at("dbeta"),
                        .dinit = p.has_initial_state ? &outputs.at("dinitial_state") : nullptr};
  // Per task: da_log and ddelta_time_bias partial sums, added over the batch rows after.
  std::vector<float> da_part(static_cast<size_t>(H * B), 0.0f),
      dtb_part(static_cast<size_t>(H * B * K), 0.0f);
  cpu::parallel_for(H * B, c.num_threads, [&](int64_t task, int) {
    da_part[task] = kda_vjp_task(call, task / B, task % B, dtb_part.data() + task * K);
  });
  if (outputs.contains("da_log")) {
    for (int64_t h = 0; h < H; ++h) {
      float sum = 0.0f;
      for (int64_t b = 0; b < B; ++b) sum += da_part[h * B + b];
      outputs.at("da_log").set(h, sum);
    }
  }
  if (outputs.contains("ddelta_time_bias")) {
    for (int64_t e = 0; e < H * K; ++e) {
      float sum = 0.0f;
      for (int64_t b = 0; b < B; ++b) sum += dtb_part[(e / K * B + b) * K + e % K];
      outputs.at("ddelta_time_bias").set(e, sum);
    }
  }
}

}  // namespace tokamax
