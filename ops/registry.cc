// The list of ops compiled into the library. Explicit (not static-initializer registration) so
// the linker cannot drop an op from the static library and the order is stable.
#include "ops/registry.h"

#include <string>

#include "ops/dot_product_attention/api.h"
#include "ops/dot_product_attention/vjp/api.h"
#include "ops/framework/errors.h"
#include "ops/fused_moe/api.h"
#include "ops/gated_delta_rule/api.h"
#include "ops/gated_linear_unit/api.h"
#include "ops/gated_linear_unit/vjp/api.h"
#include "ops/kimi_delta_attention/api.h"
#include "ops/kimi_delta_attention/vjp/api.h"
#include "ops/layer_norm/api.h"
#include "ops/layer_norm/vjp/api.h"
#include "ops/linear_softmax_cross_entropy_loss/api.h"
#include "ops/linear_softmax_cross_entropy_loss/vjp/api.h"
#include "ops/ragged_dot/api.h"
#include "ops/ragged_dot/vjp/api.h"
#include "ops/ragged_gather/api.h"
#include "ops/ragged_gather_reduce/api.h"
#include "ops/ragged_paged_attention/api.h"
#include "ops/router_topk/api.h"
#include "ops/splash_attention/api.h"
#include "ops/splash_attention/vjp/api.h"
#include "ops/top_k/api.h"
#include "ops/triangle_multiplication/api.h"
#include "ops/triangle_multiplication/vjp/api.h"

namespace tokamax {
namespace {

std::vector<const Op*>& extra_ops() {
  static std::vector<const Op*> ops;
  return ops;
}

}  // namespace

void register_extra_op(const Op& op) { extra_ops().push_back(&op); }

const std::vector<const Op*>& all_ops() {
  static const std::vector<const Op*> ops = {
      &ragged_dot_op(),
      &ragged_dot_vjp_op(),
      &dot_product_attention_op(),
      &dot_product_attention_vjp_op(),
      &gated_linear_unit_op(),
      &gated_linear_unit_vjp_op(),
      &layer_norm_op(),
      &layer_norm_vjp_op(),
      &linear_softmax_cross_entropy_loss_op(),
      &linear_softmax_cross_entropy_loss_vjp_op(),
      &top_k_op(),
      &router_topk_op(),
      &ragged_gather_op(),
      &ragged_gather_reduce_op(),
      &fused_moe_op(),
      &triangle_multiplication_op(),
      &triangle_multiplication_vjp_op(),
      &ragged_paged_attention_op(),
      &splash_attention_op(),
      &splash_attention_vjp_op(),
      &kimi_delta_attention_op(),
      &kimi_delta_attention_vjp_op(),
      &gated_delta_rule_op(),
  };
  static const std::vector<const Op*> with_extras = [] {
    std::vector<const Op*> all = ops;
    all.insert(all.end(), extra_ops().begin(), extra_ops().end());
    return all;
  }();
  return with_extras;
}

const Op& find_op(std::string_view name) {
  std::string known;
  for (const Op* op : all_ops()) {
    if (op->name() == name) return *op;
    known += (known.empty() ? "" : ", ") + std::string(op->name());
  }
  throw InvalidArgument("unknown op '" + std::string(name) + "' (known: " + known + ")", "op");
}

}  // namespace tokamax
