// linear_softmax_cross_entropy_loss_vjp: the high-level entry point,
// tokamax::linear_softmax_cross_entropy_loss_vjp(x, labels, w, dloss, options): the gradients of
// the loss with respect to x and w.
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
#include "ops/linear_softmax_cross_entropy_loss/vjp/base.h"

namespace tokamax {

// The op object: bind, counts, oracle, and its implementations in dispatch order.
const LinearSoftmaxCrossEntropyLossVjpOp& linear_softmax_cross_entropy_loss_vjp_op();

struct LinearSoftmaxCrossEntropyVjpOptions {
  // "auto" picks the first implementation supported here for these args; a name ("cpu",
  // "reference", "onednn") runs exactly that one or throws.
  std::string implementation = "auto";
  LsceReduction reduction = LsceReduction::kSum;  // the forward's (upstream's default)
  std::optional<nlohmann::json> config;           // explicit config (needs a named implementation)
};

struct LinearSoftmaxCrossEntropyGradients {
  Tensor dx;  // [B, H] x's dtype
  Tensor dw;  // [H, V] w's dtype
};

// The gradients of linear_softmax_cross_entropy_loss(x, labels, w, reduction) for the cotangent
// dloss of its loss. `lse` [B] f32, the forward's residual
// (linear_softmax_cross_entropy_loss_with_residuals), spares the kernel recomputing the row
// statistics. Throws InvalidArgument naming the argument when shapes or dtypes disagree or a
// label is not i32[B].
LinearSoftmaxCrossEntropyGradients linear_softmax_cross_entropy_loss_vjp(
    const Tensor& x,       // [B, H]
    const Tensor& labels,  // [B] i32
    const Tensor& w,       // [H, V]
    const Tensor& dloss,   // f32[B] (none) or f32[] (sum, mean)
    const LinearSoftmaxCrossEntropyVjpOptions& options = {},
    const Tensor* lse = nullptr);  // [B] f32

}  // namespace tokamax
