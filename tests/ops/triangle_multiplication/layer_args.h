// Shared by the triangle_multiplication tests: the arguments of one layer.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace tokamax::testing {

// x [N, N, C] and every weight in `dtype`, the mask bool[N, N], `type` incoming or outgoing.
inline nlohmann::json triangle_layer(const std::string& dtype, int64_t N, int64_t C, int64_t H,
                                     int64_t D, const std::string& type) {
  auto s = [&](std::initializer_list<int64_t> dims) {
    std::string text = dtype + "[";
    for (int64_t d : dims) text += (text.back() == '[' ? "" : ",") + std::to_string(d);
    return text + "]";
  };
  return {{"x", s({N, N, C})},
          {"mask", "bool[" + std::to_string(N) + "," + std::to_string(N) + "]"},
          {"projection_in_weights", s({C, 2, H})},
          {"gate_in_weights", s({C, 2, H})},
          {"projection_out_weights", s({H, D})},
          {"gate_out_weights", s({C, D})},
          {"layernorm_in_scale", s({C})},
          {"layernorm_in_offset", s({C})},
          {"layernorm_out_scale", s({H})},
          {"layernorm_out_offset", s({H})},
          {"triangle_type", type}};
}

// The same layer with its cotangent dout [N, N, D] (x's dtype): triangle_multiplication_vjp's.
inline nlohmann::json triangle_vjp_layer(const std::string& dtype, int64_t N, int64_t C, int64_t H,
                                         int64_t D, const std::string& type) {
  nlohmann::json args = triangle_layer(dtype, N, C, H, D, type);
  args["dout"] =
      dtype + "[" + std::to_string(N) + "," + std::to_string(N) + "," + std::to_string(D) + "]";
  return args;
}

}  // namespace tokamax::testing
