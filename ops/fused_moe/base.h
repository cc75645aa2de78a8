// fused_moe: the math spec (binding, validation, counts, inputs, reference and oracle).
//
// Dimensions.
//   T      tokens (rows of x and gating)
//   H      hidden size (columns of x and of the output)
//   E      experts
//   I      intermediate size of one expert (w1 holds [gate | up], 2 I columns)
//   k      experts per token (topk), 1 <= k <= E
//
// Upstream's fused MoE layer (tokamax 0.0.17, experimental/fused_moe/reference.py): the router
// takes softmax(gating) in f32 and its top k per token, optionally renormalised to sum to 1;
// each route (token t, expert e, weight w) computes act(x[t] w1[e] + w1_bias[e]) (the gate/up
// halves of w1 combined by act_fn) times w2[e], + w2_bias[e], and out[t] is the weighted sum of
// its routes, in f32, rounded to x's dtype.
//
// The selection is made on the gating logits, which orders the experts as softmax does (it is
// monotone): ties, and logits whose softmax probabilities round to one f32, go to the lower
// expert. An implementation may round the activation and each route's down projection to x's
// dtype before the sum (what a chain of ops does); the error model allows for it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ops/common/activation.h"
#include "ops/framework/bound_args.h"
#include "ops/framework/dtype.h"
#include "ops/framework/op.h"
#include "ops/framework/problem_op.h"
#include "ops/framework/tensor.h"

namespace tokamax {

// act_fn: upstream's names. silu: silu(gate) * up; swigluoai and silu_and_mul_with_clamp: the
// clamped forms of ops/common/activation.h.
enum class MoeActivation { kSilu, kSwigluOai, kSiluClamped };
std::string_view moe_activation_name(MoeActivation act);
// Throws InvalidArgument (naming act_fn) listing the accepted names.
MoeActivation parse_moe_activation(std::string_view name);
// The clamped form of an activation, or null for silu.
constexpr const ClampedGlu* moe_clamped_form(MoeActivation act) {
  return act == MoeActivation::kSwigluOai     ? &kSwigluOai
         : act == MoeActivation::kSiluClamped ? &kSiluClamped
                                              : nullptr;
}
// act(gate, up) in `T`.
template <typename T>
T apply_moe_activation(MoeActivation act, T gate, T up) {
  if (const ClampedGlu* form = moe_clamped_form(act)) return clamped_glu(*form, gate, up);
  return gate * sigmoid(gate) * up;
}

// The parsed, validated view of fused_moe's BoundArgs that implementations work with.
struct FusedMoeProblem {
  static constexpr std::string_view kOp = "fused_moe";
  static constexpr std::string_view kSummary =
      "MoE layer: softmax(gating) top-k routing, per route act(x w1 + b1) w2 + b2, the weighted "
      "sum";
  int64_t T = 0, H = 0, E = 0, I = 0, k = 1;
  DType x_dtype = DType::kF32;       // and the output's
  DType w_dtype = DType::kF32;       // w1 and w2
  DType gating_dtype = DType::kF32;  // f32, bf16 or f16
  bool renormalize = true;
  MoeActivation act = MoeActivation::kSilu;
  bool has_w1_bias = false, has_w2_bias = false;  // [E, 1, 2 I] and [E, 1, H]
  // Quantized experts (w_dtype i8 or f8e4m3): w1_scale / w2_scale per expert and column in
  // blocks of the contraction, [E, blocks, cols] in memory ([E, cols] and [E, 1, 1, cols] are
  // one block): w1[e, h, n] means w1[e, h, n] * w1_scale[e, h / (H / w1_blocks), n], w2 the
  // same over I.
  int64_t w1_blocks = 1, w2_blocks = 1;

  int64_t routes() const { return T * k; }
  bool quantized() const { return is_quantized(w_dtype); }
  static FusedMoeProblem from(const BoundArgs& args);
};

using FusedMoeOp = ProblemOp<FusedMoeProblem>;

// Element (e, r, c) of an expert weight [E, K, cols] as the layer uses it: dequantized with its
// scale ([E, blocks, cols]) when there is one.
inline double expert_weight(const Tensor& w, const Tensor* scale, int64_t blocks, int64_t e,
                            int64_t r, int64_t c) {
  const int64_t K = w.dims()[1], cols = w.dims()[2];
  const double value = w.get((e * K + r) * cols + c);
  if (!scale) return value;
  return value * scale->get((e * blocks + r / (K / blocks)) * cols + c);
}

// The portable reference: upstream's f32 computation as plain loops, token by token and route by
// route (a full softmax, a sort of each row's experts, f32 dot products).
void fused_moe_reference(const FusedMoeProblem& problem,
                         // Inputs.
                         const Tensor& x,         // [T, H]
                         const Tensor& w1,        // [E, H, 2 I]
                         const Tensor& w2,        // [E, I, H]
                         const Tensor& gating,    // [T, E]
                         const Tensor* w1_bias,   // [E, 1, 2 I] or null
                         const Tensor* w2_bias,   // [E, 1, H] or null
                         const Tensor* w1_scale,  // quantized experts: their scales
                         const Tensor* w2_scale,
                         // Outputs.
                         Tensor& out);  // [T, H]

}  // namespace tokamax
