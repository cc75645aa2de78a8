// gated_delta_rule: the C++ entry point (upstream's CausalConv1dGatedDeltaRule call) and the op
// object.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ops/framework/tensor.h"
#include "ops/gated_delta_rule/base.h"

namespace tokamax {

const GdnOp& gated_delta_rule_op();

struct GdnOptions {
  // query_start_loc, state_indices, distribution, seq_lens (int lists) and the optional
  // n_kq / n_v / d_k / d_v / kernel_size checks.
  nlohmann::json args = nlohmann::json::object();
  TensorMap tensors;  // conv_bias, when given
  std::string implementation = "auto";
  std::optional<nlohmann::json> config = std::nullopt;
};

// Returns out [T, n_v d_v], updated_conv_state and updated_recurrent_state.
TensorMap gated_delta_rule(const Tensor& qkv,              // [T, C]
                           const Tensor& b,                // [T, n_v]
                           const Tensor& a,                // [T, n_v]
                           const Tensor& conv_state,       // [NB, W - 1, C]
                           const Tensor& recurrent_state,  // [NB, n_v, d_k, d_v]
                           const Tensor& conv_weight,      // [C, 1, W]
                           const Tensor& a_log,            // [n_v]
                           const Tensor& dt_bias,          // [n_v]
                           const GdnOptions& options);

}  // namespace tokamax
