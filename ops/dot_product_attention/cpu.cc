// dot_product_attention: the CPU implementation class ("cpu"): support, checks, launch.
//
// Dimensions.
//   B      flattened batch;  T, t  query and key/value positions
//   H, h   query and key/value heads, g = H / h
//   D, d   q/k and v head dimensions
//   bq, bkv  block_q, block_kv
#include <string>
#include <vector>

#include "backends/cpu/cpu_info.h"
#include "ops/common/cpu_softmax.h"
#include "ops/dot_product_attention/base.h"
#include "ops/dot_product_attention/cpu_config.h"
#include "ops/dot_product_attention/cpu_kernel.h"
#include "ops/framework/errors.h"
#include "ops/framework/op.h"
#include "ops/ragged_dot/cpu_kernel.h"

namespace tokamax {
namespace {

const HostTensor* optional_input(const TensorMap& inputs, const char* name) {
  auto it = inputs.find(name);
  return it == inputs.end() ? nullptr : &it->second;
}

class CpuDotProductAttention final
    : public TypedImplementation<AttentionProblem, CpuAttentionConfig> {
 public:
  std::string_view op_name() const override { return "dot_product_attention"; }
  std::string_view name() const override { return "cpu"; }
  nlohmann::json describe() const override {
    return {{"simd_target", cpu_kernel_target_name()},
            {"softmax_target", cpu_softmax_target_name()},
            {"native_bf16", cpu_kernel_has_native_bf16()}};
  }

  Support supported_on(const DeviceInfo& device) const override {
    if (device.kind == "cpu") return {};
    return {false, "the cpu implementation runs on CPUs, not on a '" + device.kind + "' device"};
  }

  void check(const AttentionProblem& p) const override {
    if (p.dtype == DType::kF64) {
      throw NotImplemented(
          "cpu: f64 inputs; the kernel's GEMMs and softmax run in f32, which would drop f64's "
          "precision (use the reference)");
    }
  }

  void check_config(const AttentionProblem& p, const CpuAttentionConfig& c) const override {
    const int cores = cpu::host_device().cores;
    if (c.num_threads > 4 * cores) {
      throw InvalidArgument("cpu dot_product_attention config: num_threads is " +
                                std::to_string(c.num_threads) + " but this machine has " +
                                std::to_string(cores) + " cores (at most 4x oversubscription)",
                            "num_threads");
    }
    if (c.bf16_path == "native_dot" && !attention_native_bf16_available(p)) {
      throw InvalidArgument(
          "cpu dot_product_attention config: bf16_path=native_dot needs bf16 q/k/v and a CPU "
          "with avx512_bf16",
          "bf16_path");
    }
  }

  CpuAttentionConfig heuristics_config(const AttentionProblem& p,
                                       const DeviceInfo& device) const override {
    return cpu_attention_heuristics_config(p, device);
  }

  std::vector<CpuAttentionConfig> autotuning_configs(const AttentionProblem& p,
                                                     const DeviceInfo& device) const override {
    return cpu_attention_autotuning_configs(p, device);
  }

  void run(const AttentionProblem& p, const CpuAttentionConfig& c, const TensorMap& inputs,
           TensorMap& outputs) const override {
    check(p);
    CpuAttentionKernelOptions options;
    options.block_q = c.block_q;
    options.block_kv = c.block_kv;
    options.group_heads = c.group_heads;
    options.native_bf16 = c.bf16_path == "native_dot";
    if (options.native_bf16 && !attention_native_bf16_available(p)) {
      throw NotImplemented(
          "cpu dot_product_attention: native_dot needs bf16 inputs and "
          "avx512_bf16");
    }
    options.shared_kv_packing = c.kv_packing != "per_block";
    options.transposed = c.kv_packing == "transposed";
    options.num_threads = c.num_threads;
    dot_product_attention_cpu_kernel(p, options, inputs.at("q"), inputs.at("k"), inputs.at("v"),
                                     optional_input(inputs, "bias"), optional_input(inputs, "mask"),
                                     outputs.at("out"));
  }
};

}  // namespace

const Implementation& dot_product_attention_cpu_implementation() {
  static const CpuDotProductAttention impl;
  return impl;
}

}  // namespace tokamax
