// High-level dispatch over an op's implementations.
#include "ops/framework/dispatch.h"

#include <mutex>

#include "ops/framework/errors.h"
#include "ops/framework/record.h"

namespace tokamax {
namespace {

// The user cache as of the first call; a process that tunes reloads through the CLI instead.
const AutotuneCache* user_cache() {
  static std::once_flag once;
  static AutotuneCache cache;
  static bool loaded = false;
  std::call_once(once, [] {
    try {
      cache = AutotuneCache::load(default_user_cache_path());
      loaded = true;
    } catch (const std::exception&) {
      // A corrupt or unreachable user cache (no home directory) must not break the application
      // calling the API: configs fall back to the shipped cache and heuristics. The CLI reports it.
    }
  });
  return loaded ? &cache : nullptr;
}

DispatchResult run_one(const Implementation& impl, const BoundArgs& args,
                       const std::optional<nlohmann::json>& config, const TensorMap& inputs,
                       TensorMap& outputs, const Device& device) {
  const Support support = impl.supported_on(device);
  if (!support.ok) throw NotImplemented(support.reason);
  const std::unique_ptr<Implementation::Prepared> prepared = impl.prepare(args, device);
  prepared->check();
  ConfigContext context{config, user_cache(), &shipped_cache()};
  ResolvedConfig resolved = resolve_config(impl, *prepared, args, device, context);
  resolved.kernel.run(inputs, outputs);
  record_call(args, impl.name(), resolved, device.id());  // only when TOKAMAX_RECORD is set
  return {&impl, std::move(resolved)};
}

}  // namespace

DispatchResult dispatch(const Op& op, const BoundArgs& args, std::string_view implementation,
                        const std::optional<nlohmann::json>& config, const TensorMap& inputs,
                        TensorMap& outputs, const Device& device) {
  if (implementation != "auto") {
    const Implementation& impl = op.implementation(implementation);
    try {
      return run_one(impl, args, config, inputs, outputs, device);
    } catch (const NotImplemented& e) {
      throw NotImplemented(std::string(op.name()) + ": implementation '" +
                           std::string(implementation) + "' cannot run these args: " + e.what());
    }
  }
  if (config) {
    throw InvalidArgument(
        std::string(op.name()) + ": an explicit config needs a named implementation, not 'auto'",
        "config");
  }
  std::string reasons;
  for (const Implementation* impl : op.implementations()) {
    try {
      return run_one(*impl, args, std::nullopt, inputs, outputs, device);
    } catch (const NotImplemented& e) {
      reasons +=
          std::string(reasons.empty() ? "" : "; ") + std::string(impl->name()) + ": " + e.what();
    }
  }
  throw NotImplemented(std::string(op.name()) + ": no implementation can run these args (" +
                       reasons + ")");
}

ApiCall& ApiCall::tensor(const std::string& name, const Tensor* tensor) {
  if (tensor != nullptr) {
    args_[name] = tensor->spec().to_string();
    input(name, *tensor);
  }
  return *this;
}

ApiCall& ApiCall::input(const std::string& name, const Tensor& tensor) {
  inputs_.insert_or_assign(name, tensor);
  return *this;
}

ApiCall& ApiCall::option(const std::string& name, nlohmann::json value) {
  args_[name] = std::move(value);
  return *this;
}

TensorMap ApiCall::run(const BoundArgs& bound, std::string_view implementation,
                       const std::optional<nlohmann::json>& config) const {
  TensorMap outputs = op_.allocate_outputs(bound);
  dispatch(op_, bound, implementation, config, inputs_, outputs);
  return outputs;
}

}  // namespace tokamax
