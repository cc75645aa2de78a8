// Test shorthands over Implementation::prepare(): one call each, on the host CPU unless another
// device is given (each prepares the problem again; the framework prepares it once per case).
#pragma once

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
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

// The outputs a run into outputs holding other bytes leaves different from a run into fresh
// (zeroed) ones: empty when the implementation writes every element (padding's zeros too).
inline std::vector<std::string> outputs_not_written_whole(const Op& op, const Implementation& impl,
                                                          const BoundArgs& args,
                                                          const nlohmann::json& config,
                                                          const TensorMap& inputs) {
  TensorMap fresh = op.allocate_outputs(args), reused = op.allocate_outputs(args);
  for (auto& [name, t] : reused) std::memset(t.raw(), 0x5A, t.size_bytes());
  run_json(impl, args, config, inputs, fresh);
  run_json(impl, args, config, inputs, reused);
  std::vector<std::string> differ;
  for (const auto& [name, t] : fresh) {
    if (std::memcmp(t.raw(), reused.at(name).raw(), t.size_bytes()) != 0) differ.push_back(name);
  }
  return differ;
}

}  // namespace tokamax
