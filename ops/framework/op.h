// Op and Implementation base classes: binding, device support, configs, oracle, dispatch order.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backends/device.h"
#include "ops/framework/bound_args.h"
#include "ops/framework/config.h"
#include "ops/framework/errors.h"
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
//   |out - oracle| <= (gamma(accumulation_length * accumulation_roundoff) + operand_roundoff)
//                     * magnitude + output_roundoff * |oracle|
struct ErrorModel {
  double accumulation_roundoff = 0.0;  // u of the accumulation dtype (f32: 2^-24)
  double accumulation_length = 1.0;    // terms summed per output (K for a contraction)
  double output_roundoff = 0.0;        // u of the output dtype
  // Each term's relative error from rounding or splitting the operands before their product
  // (a `precision` preset, ops/common/precision.h); 0 when operands are multiplied as given.
  double operand_roundoff = 0.0;
};

class Implementation;

// One op family (ragged_dot, ...): the math spec shared by all of its implementations.
class Op {
 public:
  virtual ~Op() = default;
  virtual std::string_view name() const = 0;
  virtual std::string_view summary() const = 0;

  // Caller arguments (tensor specs as strings, options as JSON) -> canonical, validated args with
  // defaults filled in: the op's bind_canonical, then the size check every op shares (each input
  // and output holds at most kMaxTensorBytes, counted with checked arithmetic), so that nothing
  // reaches an allocator with a count that overflowed. Throws InvalidArgument whose field() names
  // the offending argument.
  BoundArgs bind(const nlohmann::json& args) const;
  // The op's own binding (what bind() runs first).
  virtual BoundArgs bind_canonical(const nlohmann::json& args) const = 0;
  // The forward op a VJP op (`<op>_vjp`, ops/framework/vjp.h) differentiates; null for others.
  virtual const Op* primal() const { return nullptr; }
  // A VJP op's cotangent inputs (d<output> for each forward output it differentiates).
  virtual std::vector<std::string> cotangents() const { return {}; }
  // Other spellings bind accepts (resolve_arg_aliases), for `list --op`.
  virtual std::vector<ArgAlias> arg_aliases() const { return {}; }

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

  // Outputs allocated (zeroed) to the shapes of `outputs(args)`, in `memory`.
  TensorMap allocate_outputs(const BoundArgs& args, const Memory& memory = host_memory()) const;
  // The narrowest floating input dtype: the precision the arithmetic may run at, which picks
  // the compute ceiling of the roofline (bf16 inputs may use bf16 dot products). An op whose
  // arithmetic can run in int8 says kI8.
  virtual DType compute_dtype(const BoundArgs& args) const;
  // Whether the outputs must hold zeros before an implementation runs, because the op leaves
  // part of them as they were (ragged_dot's zero_initialize=false). Otherwise verify fills them
  // with NaN first, so an implementation that fails to write an element fails.
  virtual bool outputs_start_zeroed(const BoundArgs&) const { return false; }
  // The flat elements [first, last) of `output` that the op defines. Elements outside are
  // unspecified (ragged_gather's rows outside [start, end), which its kernels skip): the oracle
  // is sampled inside the range only. Every element by default.
  virtual std::pair<int64_t, int64_t> defined_range(const BoundArgs& /*args*/,
                                                    const TensorDecl& output) const {
    return {0, output.spec.num_elements()};
  }
};

// A kernel ready to run: one implementation with a parsed, validated config, bound to one
// problem on one device. run() touches no JSON; it may be called any number of times.
struct Kernel {
  nlohmann::json config;  // the config in canonical JSON (what records and the cache hold)
  // Runs on inputs (from Op::make_inputs, in the device's memory) into preallocated outputs
  // (from Op::allocate_outputs).
  std::function<void(const TensorMap& inputs, TensorMap& outputs)> run;
};

// One backend's implementation of an op. The untyped interface below is what the CLI, tuner and
// dispatcher use; concrete classes derive from TypedImplementation, which maps it to a typed
// Config and the op's typed problem view.
class Implementation {
 public:
  virtual ~Implementation() = default;
  virtual std::string_view op_name() const = 0;
  virtual std::string_view name() const = 0;
  // The device kind it runs on ("cpu"): what supported_on() checks by default.
  virtual std::string_view backend() const { return "cpu"; }
  // Vendor baselines are benchmarked beside our kernels; `auto` dispatch may skip them.
  virtual bool is_vendor() const { return false; }
  // What bench's `vs vendor` ratio measures our kernels against: vendor libraries, and the
  // composites that chain other ops the way a user would (fused_moe's `composite`).
  virtual bool is_baseline() const { return is_vendor(); }
  // What records should say about the backend beyond its name: library version, the kernels it
  // selected (e.g. OpenBLAS's core type), the SIMD target. Empty by default.
  virtual nlohmann::json describe() const { return nlohmann::json::object(); }

  // Whether it can run on `device` at all, and why not; by default, on devices of its backend.
  virtual Support supported_on(const Device& device) const;

  // Parses, validates and re-serializes a config (strict JSON round trip) without a problem.
  // InvalidArgument names the bad field.
  virtual nlohmann::json canonical_config(const nlohmann::json& config) const = 0;

  // This implementation bound to one problem on one device: the problem is parsed once here,
  // each config once by kernel().
  class Prepared {
   public:
    virtual ~Prepared() = default;
    // Throws NotImplemented when these (valid) args are beyond this backend.
    virtual void check() const = 0;
    virtual nlohmann::json heuristics_config() const = 0;
    virtual std::vector<nlohmann::json> autotuning_configs() const = 0;
    // Parses `config` (strict JSON), validates it and checks that it fits the problem on the
    // device: InvalidArgument naming the field otherwise.
    virtual Kernel kernel(const nlohmann::json& config) const = 0;
    // The heuristics config's kernel, without a JSON round trip.
    virtual Kernel heuristics_kernel() const = 0;
  };
  // Throws InvalidArgument when `args` are not this op's (Problem::from).
  virtual std::unique_ptr<Prepared> prepare(const BoundArgs& args, const Device& device) const = 0;
};

// Typed base: `Problem` is the op's parsed view of BoundArgs (with a static `from(BoundArgs)` and
// the op's name as `kOp`), `Config` a struct in the style of ops/framework/config.h. An
// implementation with nothing to tune keeps EmptyConfig and the defaults.
template <typename Problem, typename Config = EmptyConfig>
class TypedImplementation : public Implementation {
 public:
  using ConfigType = Config;

  std::string_view op_name() const final { return Problem::kOp; }

  virtual Config heuristics_config(const Problem& /*problem*/, const Device& /*device*/) const {
    return Config{};
  }
  virtual std::vector<Config> autotuning_configs(const Problem& problem,
                                                 const Device& device) const {
    return {heuristics_config(problem, device)};
  }
  // NotImplemented for valid problems this backend cannot run.
  virtual void check(const Problem& /*problem*/, const Device& /*device*/) const {}
  // InvalidArgument for configs that cannot run this problem on this device.
  virtual void check_config(const Problem& /*problem*/, const Config& /*config*/,
                            const Device& /*device*/) const {}
  virtual void run(const Problem& problem, const Config& config, const Device& device,
                   const TensorMap& inputs, TensorMap& outputs) const = 0;

  nlohmann::json canonical_config(const nlohmann::json& config) const final {
    return config_to_json(with_config_context([&] { return config_from_json<Config>(config); }));
  }
  std::unique_ptr<Prepared> prepare(const BoundArgs& args, const Device& device) const final {
    return std::make_unique<TypedPrepared>(*this, Problem::from(args), device);
  }

 private:
  // Runs `fn`, prefixing an InvalidArgument it throws with "<implementation> <op> config: ".
  template <typename Fn>
  auto with_config_context(Fn&& fn) const {
    try {
      return fn();
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(
          std::string(name()) + " " + std::string(op_name()) + " config: " + e.what(), e.field());
    }
  }

  class TypedPrepared final : public Prepared {
   public:
    TypedPrepared(const TypedImplementation& impl, Problem problem, const Device& device)
        : impl_(impl),
          problem_(std::make_shared<const Problem>(std::move(problem))),
          device_(device) {}
    void check() const override { impl_.check(*problem_, device_); }
    nlohmann::json heuristics_config() const override {
      return config_to_json(impl_.heuristics_config(*problem_, device_));
    }
    std::vector<nlohmann::json> autotuning_configs() const override {
      std::vector<nlohmann::json> out;
      for (const Config& config : impl_.autotuning_configs(*problem_, device_)) {
        out.push_back(config_to_json(config));
      }
      return out;
    }
    Kernel kernel(const nlohmann::json& config) const override {
      Config parsed = impl_.with_config_context([&] {
        Config c = config_from_json<Config>(config);
        impl_.check_config(*problem_, c, device_);
        return c;
      });
      return make_kernel(std::move(parsed));
    }
    Kernel heuristics_kernel() const override {
      return make_kernel(impl_.heuristics_config(*problem_, device_));
    }

   private:
    Kernel make_kernel(Config config) const {
      nlohmann::json canonical = config_to_json(config);
      return {std::move(canonical),
              [impl = &impl_, problem = problem_, config = std::move(config), device = &device_](
                  const TensorMap& inputs, TensorMap& outputs) {
                impl->run(*problem, config, *device, inputs, outputs);
              }};
    }
    const TypedImplementation& impl_;
    std::shared_ptr<const Problem> problem_;
    const Device& device_;
  };
};

}  // namespace tokamax
