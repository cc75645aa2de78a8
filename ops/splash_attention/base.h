// splash_attention: the math spec (binding, validation, counts, inputs, reference, oracle) of
// upstream's splash attention (experimental/tpu/splash_attention/base.py and reference.py):
// attention with block-sparse masks built on the host, packed-document segment ids and sinks.
//
// Dimensions.
//   Hq     query heads;  Hkv  key/value heads (1 with is_mqa), g = Hq / Hkv: q head hq reads
//          kv head hq / g
//   T      query positions (rows r);  t  key/value positions (keys j)
//   D      q/k head dimension;  d  v head dimension
//
// Per head hq and row r, with the mask M (mask.h) and M[r, j] &= q_seg[r] == kv_seg[j] when
// segment ids are given:
//   z_j = cap(q[hq, r] . k[hq / g, j]),  cap(x) = c tanh(x / c) with attn_logits_soft_cap = c
//   s_j = z_j where M[r, j], else mask_value
//   m   = max(max_j s_j, sinks[hq]);  l = sum_j exp(s_j - m) + exp(sinks[hq] - m)
//   out[hq, r] = sum_j exp(s_j - m) / l v[hq / g, j]
// (no logits scale: upstream scales q beforehand). With return_residuals also max_logits = m
// and logsumexp = m + log l, f32 [Hq, T]. A row that sees no key is therefore the mean of v over
// all t keys (every s_j = mask_value), or ~0 under a sink above mask_value. The kernels take a
// masked key's weight exp(mask_value - m) as 0 on rows that see a key, which bind makes exact
// by requiring mask_value <= -1e4 (upstream's default is -0.7 * the f32 maximum).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "ops/framework/bound_args.h"
#include "ops/framework/dtype.h"
#include "ops/framework/op.h"
#include "ops/framework/problem_op.h"
#include "ops/framework/tensor.h"

namespace tokamax {

// Upstream's DEFAULT_MASK_VALUE, -0.7 times the f32 maximum.
inline constexpr double kSplashDefaultMaskValue = -0.7 * 3.4028234663852886e38;

struct SplashAttentionProblem {
  static constexpr std::string_view kOp = "splash_attention";
  static constexpr std::string_view kSummary =
      "upstream's splash attention: q [Hq, T, D] with host-built block-sparse masks (causal, "
      "local, chunked, numpy, and/or), segment ids, sinks, soft cap, MQA/GQA";
  int64_t Hq = 0, Hkv = 0, T = 0, t = 0, D = 0, d = 0;
  DType dtype = DType::kF32;  // q, k, v and out
  bool is_mqa = false;        // k, v [t, D] shared by every q head
  nlohmann::json mask;        // canonical (mask.h)
  bool has_segments = false;  // q_segment_ids i32[T], kv_segment_ids i32[t]
  bool has_sinks = false;     // sinks [Hq]
  double soft_cap = 0.0;      // 0: none
  double mask_value = kSplashDefaultMaskValue;
  bool return_residuals = false;

  int64_t groups() const { return Hq / Hkv; }
  static SplashAttentionProblem from(const BoundArgs& args);
};

using SplashAttentionOp = ProblemOp<SplashAttentionProblem>;

// A row that sees no key, as upstream weighs it (every key at mask_value; sink -inf without
// sinks): its max_logits, logsumexp, and out = weight * mean_j v_j.
struct SplashKeylessRow {
  double max = 0.0, lse = 0.0, weight = 0.0;
};
SplashKeylessRow splash_keyless_row(const SplashAttentionProblem& p, double sink);

// The portable reference: upstream's formula per head and row in f32 over every key (masked
// keys at mask_value), residuals when asked.
void splash_attention_reference(const SplashAttentionProblem& p, const TensorMap& inputs,
                                // Outputs.
                                TensorMap& outputs);

}  // namespace tokamax
