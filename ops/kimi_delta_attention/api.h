// kimi_delta_attention: the high-level C++ API.
//
// Dimensions: as base.h.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ops/framework/tensor.h"
#include "ops/kimi_delta_attention/base.h"

namespace tokamax {

// The op object: bind, counts, oracle, and its implementations in dispatch order.
const KdaOp& kimi_delta_attention_op();

// Upstream's keyword arguments by its names (scale, output_final_state, use_qk_l2norm,
// use_gate_in_kernel, lower_bound, max_num_segments); optional tensors (a_log,
// delta_time_bias, initial_state, segment_ids) go in `tensors`.
struct KdaOptions {
  nlohmann::json args = nlohmann::json::object();
  TensorMap tensors;
  std::string implementation = "auto";
  std::optional<nlohmann::json> config = std::nullopt;
};

// "out" [H, B, T, V] in query's dtype, and with output_final_state "final_state" f32
// [B, N, H, K, V]. Throws InvalidArgument naming the argument on bad shapes or values.
TensorMap kimi_delta_attention(const Tensor& query,  // [H, B, T, K]
                               const Tensor& key,    // [H, B, T, K]
                               const Tensor& value,  // [H, B, T, V]
                               const Tensor& gate,   // [H, B, T, K]
                               const Tensor& beta,   // [H, B, T]
                               const KdaOptions& options = {});

}  // namespace tokamax
