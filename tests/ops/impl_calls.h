// Test shorthands over Implementation::prepare(): one call each, on the host CPU unless another
// device is given (each prepares the problem again; the framework prepares it once per case).
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "ops/framework/op.h"

namespace tokamax {

inline const Device& host() { return cpu::host_device(); }

// NotImplemented when the backend cannot run these args.
inline void check_args(const Implementation& impl, const BoundArgs& args,
                       const Device& device = host()) {
  impl.prepare(args, device)->check();
}

inline nlohmann::json heuristics_config_json(const Implementation& impl, const BoundArgs& args,
                                             const Device& device = host()) {
  return impl.prepare(args, device)->heuristics_config();
}

inline std::vector<nlohmann::json> autotuning_configs_json(const Implementation& impl,
                                                           const BoundArgs& args,
                                                           const Device& device = host()) {
  return impl.prepare(args, device)->autotuning_configs();
}

// InvalidArgument naming the field when the config does not parse or fit.
inline void check_config_json(const Implementation& impl, const BoundArgs& args,
                              const nlohmann::json& config, const Device& device = host()) {
  impl.prepare(args, device)->kernel(config);
}

// One run with an explicit config into preallocated outputs.
inline void run_json(const Implementation& impl, const BoundArgs& args,
                     const nlohmann::json& config, const TensorMap& inputs, TensorMap& outputs,
                     const Device& device = host()) {
  impl.prepare(args, device)->kernel(config).run(inputs, outputs);
}

}  // namespace tokamax
