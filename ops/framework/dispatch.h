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

}  // namespace tokamax
