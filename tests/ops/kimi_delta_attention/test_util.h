// Shared helpers of kimi_delta_attention's tests.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tokamax::testing {

// query, key, gate [H, B, T, K], value [H, B, T, V] and beta [H, B, T] specs of one dtype.
inline nlohmann::json kda_args(const std::string& dtype, int64_t H, int64_t B, int64_t T, int64_t K,
                               int64_t V) {
  auto spec = [&](std::vector<int64_t> dims) {
    std::string out = dtype + "[";
    for (size_t i = 0; i < dims.size(); ++i) out += (i ? "," : "") + std::to_string(dims[i]);
    return out + "]";
  };
  return {{"query", spec({H, B, T, K})},
          {"key", spec({H, B, T, K})},
          {"value", spec({H, B, T, V})},
          {"gate", spec({H, B, T, K})},
          {"beta", spec({H, B, T})}};
}

}  // namespace tokamax::testing
