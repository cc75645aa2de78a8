// Dispatch shared by every op's high-level API: "auto" picks the first supported implementation
// and falls back on NotImplemented; a named implementation fails loudly.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "backends/registry.h"
#include "ops/framework/config_resolution.h"
#include "ops/framework/op.h"

namespace tokamax {

struct DispatchResult {
  const Implementation* impl = nullptr;
  ResolvedConfig config;
};

// Runs `op` on `device` (inputs and outputs in its memory). Configs resolve against the user
// cache (default path, read once per process) and the shipped cache. Throws NotImplemented when
// a named implementation (or, for "auto", every implementation) cannot run the args, listing the
// reasons.
DispatchResult dispatch(const Op& op, const BoundArgs& args, std::string_view implementation,
                        const std::optional<nlohmann::json>& config, const TensorMap& inputs,
                        TensorMap& outputs, const Device& device = default_device());

// One call of an op from its C++ API, built up argument by argument: a tensor argument is its
// spec for binding and its data for the kernel, an option only an argument. run() binds (errors
// name the argument), allocates the outputs on the default device and dispatches.
class ApiCall {
 public:
  explicit ApiCall(const Op& op) : op_(op) {}

  // A tensor argument; null leaves an optional tensor absent.
  ApiCall& tensor(const std::string& name, const Tensor* tensor);
  ApiCall& tensor(const std::string& name, const Tensor& tensor) {
    return this->tensor(name, &tensor);
  }
  // An input the kernel reads whose argument is given otherwise (e.g. as values by option()).
  ApiCall& input(const std::string& name, const Tensor& tensor);
  ApiCall& option(const std::string& name, nlohmann::json value);
  // An option that is left at the op's default when unset.
  template <typename T>
  ApiCall& option(const std::string& name, const std::optional<T>& value) {
    if (value) option(name, nlohmann::json(*value));
    return *this;
  }

  // run() in two steps, for an API that checks values of the bound arguments before dispatch.
  BoundArgs bind() const { return op_.bind(args_); }
  TensorMap run(const BoundArgs& bound, std::string_view implementation,
                const std::optional<nlohmann::json>& config) const;
  TensorMap run(std::string_view implementation,
                const std::optional<nlohmann::json>& config) const {
    return run(bind(), implementation, config);
  }

 private:
  const Op& op_;
  nlohmann::json args_ = nlohmann::json::object();
  TensorMap inputs_;
};

}  // namespace tokamax
