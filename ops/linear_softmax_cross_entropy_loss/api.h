// linear_softmax_cross_entropy_loss: the high-level entry point,
// tokamax::linear_softmax_cross_entropy_loss(x, labels, w, options).
//
// Dimensions.
//   B      rows of x (tokens), one label each
//   H      hidden size
//   V      vocabulary size
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ops/framework/tensor.h"
#include "ops/linear_softmax_cross_entropy_loss/base.h"

namespace tokamax {

// The op object: bind, counts, oracle, and its implementations in dispatch order.
const LinearSoftmaxCrossEntropyLossOp& linear_softmax_cross_entropy_loss_op();

struct LinearSoftmaxCrossEntropyOptions {
  // "auto" picks the first implementation supported here for these args, falling back on
  // NotImplemented; a name ("cpu", "reference", "onednn") runs exactly that one or throws.
  std::string implementation = "auto";
  LsceReduction reduction = LsceReduction::kSum;  // upstream's default
  // Upstream's precision of the logits' product (ops/common/precision.h, docs/precision.md).
  DotPrecision precision = DotPrecision::kDefault;
  std::optional<nlohmann::json> config;           // explicit config (needs a named implementation)
};

// loss = f32[] (sum, mean) or f32[B] (none) of logsumexp(x_i w) - (x_i w)[labels[i]].
// Throws InvalidArgument naming the argument when shapes disagree or a label is outside [0, V).
Tensor linear_softmax_cross_entropy_loss(const Tensor& x,       // [B, H]
                                         const Tensor& labels,  // [B] i32
                                         const Tensor& w,       // [H, V]
                                         const LinearSoftmaxCrossEntropyOptions& options = {});

struct LinearSoftmaxCrossEntropyWithResiduals {
  Tensor loss;  // as linear_softmax_cross_entropy_loss's
  Tensor lse;   // [B] f32, every row's log-sum-exp: linear_softmax_cross_entropy_loss_vjp's `lse`
};

// The loss and its residual (return_residuals: true).
LinearSoftmaxCrossEntropyWithResiduals linear_softmax_cross_entropy_loss_with_residuals(
    const Tensor& x,       // [B, H]
    const Tensor& labels,  // [B] i32
    const Tensor& w,       // [H, V]
    const LinearSoftmaxCrossEntropyOptions& options = {});

}  // namespace tokamax
