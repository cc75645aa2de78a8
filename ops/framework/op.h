// Op and Implementation base classes: binding, device support, configs, oracle, dispatch order.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ops/framework/bound_args.h"
#include "ops/framework/config.h"
#include "backends/device.h"
#include "ops/framework/tensor.h"

namespace tokamax {

// Whether an implementation can run on a device, and why not.
struct Support {
  bool ok = true;
  std::string reason;
};

// A named tensor an op reads or writes.
struct TensorDecl {
  std::string name;
  TensorSpec spec;
};

// The float64 oracle at some flat indices of one output. `magnitude[i]` is the sum of the
// absolute values of the terms that value[i] accumulates (sum |a_k * b_k| for a contraction):
// the scale of the rounding error an implementation may make there.
struct OracleSample {
  std::vector<int64_t> index;
  std::vector<double> value;
  std::vector<double> magnitude;
};

// How much rounding an implementation may accumulate, for the error bound of numerics.h:
//   |out - oracle| <= accumulation_length * accumulation_roundoff * magnitude
//                     + output_roundoff * |oracle|
struct ErrorModel {
  double accumulation_roundoff = 0.0;  // u of the accumulation dtype (f32: 2^-24)
  double accumulation_length = 1.0;    // terms summed per output (K for a contraction)
  double output_roundoff = 0.0;        // u of the output dtype
};

class Implementation;

// One op family (ragged_dot, ...): the math spec shared by all of its implementations.
class Op {
 public:
  virtual ~Op() = default;
  virtual std::string_view name() const = 0;
  virtual std::string_view summary() const = 0;

  // Caller arguments (tensor specs as strings, options as JSON) -> canonical, validated args with
  // defaults filled in. Throws InvalidArgument whose field() names the offending argument.
  virtual BoundArgs bind(const nlohmann::json& args) const = 0;

  virtual std::vector<TensorDecl> inputs(const BoundArgs& args) const = 0;
  virtual std::vector<TensorDecl> outputs(const BoundArgs& args) const = 0;
  // Useful floating-point operations and the minimum bytes moved (inputs read once, outputs
  // written once): the numerators of GFLOP/s and GB/s.
  virtual double flops(const BoundArgs& args) const = 0;
  virtual double bytes(const BoundArgs& args) const = 0;

  // Seeded, reproducible inputs with realistic value distributions.
  virtual TensorMap make_inputs(const BoundArgs& args, uint64_t seed) const = 0;

  // The float64 oracle at the given flat indices of `output`, and the cost of one oracle output
  // element in multiply-adds (so callers can sample when the full oracle is too expensive).
  virtual OracleSample oracle(const BoundArgs& args, const TensorMap& inputs,
                              std::string_view output, std::span<const int64_t> index) const = 0;
  virtual double oracle_cost_per_output(const BoundArgs& args) const = 0;
  virtual ErrorModel error_model(const BoundArgs& args) const = 0;

  // Implementations in dispatch order: the first supported one is what "auto" picks.
  virtual std::vector<const Implementation*> implementations() const = 0;
  // Throws InvalidArgument listing the known names.
  const Implementation& implementation(std::string_view name) const;

  // Outputs allocated (zeroed) to the shapes of `outputs(args)`.
  TensorMap allocate_outputs(const BoundArgs& args) const;
  // The narrowest floating input dtype: the precision the arithmetic may run at, which picks
  // the compute ceiling of the roofline (bf16 inputs may use bf16 dot products).
  DType compute_dtype(const BoundArgs& args) const;
};

// One backend's implementation of an op. The untyped interface below is what the CLI, tuner and
// dispatcher use; concrete classes derive from TypedImplementation, which maps it to a typed
// Config and the op's typed problem view.
class Implementation {
 public:
  virtual ~Implementation() = default;
  virtual std::string_view op_name() const = 0;
  virtual std::string_view name() const = 0;
  // Vendor baselines are benchmarked beside our kernels; `auto` dispatch may skip them.
  virtual bool is_vendor() const { return false; }
  // What records should say about the backend beyond its name: library version, the kernels it
  // selected (e.g. OpenBLAS's core type), the SIMD target. Empty by default.
  virtual nlohmann::json describe() const { return nlohmann::json::object(); }

  virtual Support supported_on(const DeviceInfo& device) const = 0;
  // Throws NotImplemented when these (valid) args are beyond this backend.
  virtual void check_args(const BoundArgs& args) const = 0;

  virtual nlohmann::json heuristics_config_json(const BoundArgs& args,
                                                const DeviceInfo& device) const = 0;
  virtual std::vector<nlohmann::json> autotuning_configs_json(const BoundArgs& args,
                                                              const DeviceInfo& device) const = 0;
  // Parses, validates and re-serializes a config (strict JSON round trip). InvalidArgument names
  // the bad field.
  virtual nlohmann::json canonical_config(const nlohmann::json& config) const = 0;
  // Throws InvalidArgument when the config is well formed but invalid for these args.
  virtual void check_config_json(const BoundArgs& args, const nlohmann::json& config) const = 0;

  // Runs on inputs (from Op::make_inputs) into preallocated outputs (from Op::allocate_outputs).
  virtual void run_json(const BoundArgs& args, const nlohmann::json& config,
                        const TensorMap& inputs, TensorMap& outputs) const = 0;
};

// Typed base: `Problem` is the op's parsed view of BoundArgs (with a static `from(BoundArgs)`),
// `Config` a struct in the style of ops/framework/config.h.
template <typename Problem, typename Config>
class TypedImplementation : public Implementation {
 public:
  using ConfigType = Config;

  virtual Config heuristics_config(const Problem& problem, const DeviceInfo& device) const = 0;
  virtual std::vector<Config> autotuning_configs(const Problem& problem,
                                                 const DeviceInfo& device) const = 0;
  // NotImplemented for valid problems this backend cannot run.
  virtual void check(const Problem& /*problem*/) const {}
  // InvalidArgument for configs that cannot run this problem.
  virtual void check_config(const Problem& /*problem*/, const Config& /*config*/) const {}
  virtual void run(const Problem& problem, const Config& config, const TensorMap& inputs,
                   TensorMap& outputs) const = 0;

  void check_args(const BoundArgs& args) const final { check(Problem::from(args)); }
  nlohmann::json heuristics_config_json(const BoundArgs& args,
                                        const DeviceInfo& device) const final {
    return config_to_json(heuristics_config(Problem::from(args), device));
  }
  std::vector<nlohmann::json> autotuning_configs_json(const BoundArgs& args,
                                                      const DeviceInfo& device) const final {
    std::vector<nlohmann::json> out;
    for (const Config& config : autotuning_configs(Problem::from(args), device)) {
      out.push_back(config_to_json(config));
    }
    return out;
  }
  nlohmann::json canonical_config(const nlohmann::json& config) const final {
    return config_to_json(config_from_json<Config>(config));
  }
  void check_config_json(const BoundArgs& args, const nlohmann::json& config) const final {
    check_config(Problem::from(args), config_from_json<Config>(config));
  }
  void run_json(const BoundArgs& args, const nlohmann::json& config, const TensorMap& inputs,
                TensorMap& outputs) const final {
    run(Problem::from(args), config_from_json<Config>(config), inputs, outputs);
  }
};

}  // namespace tokamax
