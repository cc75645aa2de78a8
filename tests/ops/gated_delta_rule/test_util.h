// Shared helpers of gated_delta_rule's tests.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tokamax::testing {

// A batch as upstream's make_gdn_spec builds it: request r (of `lengths`, then padded requests
// up to max_reqs) in state slot r + 1 (slot 0 no request's), seq_lens = tokens + context, the
// decode prefix the leading one-token requests; pad_tokens padding tokens after the last.
struct GdnShape {
  std::string dtype = "f32", state_dtype = "f32";
  std::vector<int64_t> lengths, context;  // context: one per length (empty: zeros)
  int64_t n_kq = 1, n_v = 2, d_k = 8, d_v = 8, W = 4, max_reqs = 0, pad_tokens = 0;
  bool bias = true;
};

inline nlohmann::json gdn_args(const GdnShape& s) {
  const int64_t R = s.max_reqs > 0 ? s.max_reqs : static_cast<int64_t>(s.lengths.size());
  int64_t T = s.pad_tokens;
  for (const int64_t l : s.lengths) T += l;
  const int64_t C = 2 * s.n_kq * s.d_k + s.n_v * s.d_v, NB = R + 1;
  auto spec = [](const std::string& dtype, std::vector<int64_t> dims) {
    std::string out = dtype + "[";
    for (size_t i = 0; i < dims.size(); ++i) out += (i ? "," : "") + std::to_string(dims[i]);
    return out + "]";
  };
  std::vector<int64_t> qsl = {0}, slots, seq_lens;
  for (size_t r = 0; r < s.lengths.size(); ++r) {
    qsl.push_back(qsl.back() + s.lengths[r]);
    seq_lens.push_back(s.lengths[r] + (s.context.empty() ? 0 : s.context[r]));
  }
  while (static_cast<int64_t>(qsl.size()) < R + 1) qsl.push_back(qsl.back());
  while (static_cast<int64_t>(seq_lens.size()) < R) seq_lens.push_back(0);
  for (int64_t r = 0; r < R; ++r) slots.push_back(r + 1);
  int64_t decode = 0;
  while (decode < static_cast<int64_t>(s.lengths.size()) && s.lengths[decode] == 1) ++decode;
  const int64_t active = static_cast<int64_t>(s.lengths.size());
  nlohmann::json args = {{"qkv", spec(s.dtype, {T, C})},
                         {"b", spec(s.dtype, {T, s.n_v})},
                         {"a", spec(s.dtype, {T, s.n_v})},
                         {"conv_state", spec(s.dtype, {NB, s.W - 1, C})},
                         {"recurrent_state", spec(s.state_dtype, {NB, s.n_v, s.d_k, s.d_v})},
                         {"conv_weight", spec(s.dtype, {C, 1, s.W})},
                         {"a_log", spec("f32", {s.n_v})},
                         {"dt_bias", spec(s.dtype, {s.n_v})},
                         {"query_start_loc", qsl},
                         {"state_indices", slots},
                         {"distribution", {decode, active, active}},
                         {"seq_lens", seq_lens}};
  if (s.bias) args["conv_bias"] = spec(s.dtype, {C});
  return args;
}

}  // namespace tokamax::testing
