// fused_moe: the composite implementation ("composite"), the layer as a user chains the
// project's own ops: the router (routing.h), ragged_gather of the tokens into expert order,
// ragged_dot with the fused gate/up activation, ragged_dot for the down projection, and
// ragged_gather_reduce for the weighted combine, each the "cpu" implementation of its op, called
// through the op model by name (ops/framework/op_lookup.h) with its intermediates in x's dtype.
#include <cstring>
#include <string>
#include <vector>

#include "ops/framework/dispatch.h"
#include "ops/framework/op.h"
#include "ops/framework/op_lookup.h"
#include "ops/fused_moe/base.h"
#include "ops/fused_moe/routing.h"

namespace tokamax {
namespace {

constexpr std::string_view kStageImpl = "cpu";

// upstream's [E, 1, cols] bias as ragged_dot's rhs_bias [E, cols], and a scale [E, cols],
// [E, 1, 1, cols] or [E, blocks, cols] as its rhs_scale [E, cols] or [E, blocks, cols] (the
// same elements).
Tensor squeeze(const Tensor& t) {
  const int64_t E = t.dims().front(), cols = t.dims().back();
  const int64_t blocks = t.dims().size() == 3 && t.dims()[1] > 1 ? t.dims()[1] : 1;
  Tensor out(blocks > 1 ? TensorSpec{t.dtype(), {E, blocks, cols}}
                        : TensorSpec{t.dtype(), {E, cols}});
  std::memcpy(out.raw(), t.raw(), t.size_bytes());
  return out;
}

class CompositeFusedMoe final : public TypedImplementation<FusedMoeProblem> {
 public:
  std::string_view name() const override { return "composite"; }
  bool is_baseline() const override { return true; }
  nlohmann::json describe() const override {
    return {{"stages",
             "route, ragged_gather, ragged_dot (gate/up + act), ragged_dot, "
             "ragged_gather_reduce; each stage's cpu implementation"}};
  }

  void run(const FusedMoeProblem& p, const EmptyConfig&, const Device& device,
           const TensorMap& inputs, TensorMap& outputs) const override {
    const MoeRouting routing = route_tokens(p, inputs.at("gating"), device);
    const int64_t R = p.routes();
    // Sorted position s holds token sorted[s] / k; route r sits at position[r].
    Tensor tokens(TensorSpec{DType::kI32, {R}}), position(TensorSpec{DType::kI32, {R}});
    Tensor weights(TensorSpec{DType::kF32, {R}}), valid(TensorSpec{DType::kBool, {R}});
    for (int64_t s = 0; s < R; ++s) {
      const int32_t r = routing.sorted[s];
      tokens.data<int32_t>()[s] = static_cast<int32_t>(r / p.k);
      position.data<int32_t>()[r] = static_cast<int32_t>(s);
    }
    std::memcpy(weights.raw(), routing.weight.data(), weights.size_bytes());
    for (int64_t r = 0; r < R; ++r) valid.data<bool>()[r] = true;
    std::vector<int64_t> group_sizes(static_cast<size_t>(p.E));
    for (int64_t e = 0; e < p.E; ++e)
      group_sizes[e] = routing.expert_start[e + 1] - routing.expert_start[e];
    const std::string dtype(dtype_name(p.x_dtype));

    const Tensor dispatched = Stage("ragged_gather")
                                  .tensor("x", inputs.at("x"))
                                  .tensor("indices", tokens)
                                  .option("start", 0)
                                  .option("end", R)
                                  .run(device);
    Stage gate_up("ragged_dot");
    gate_up.tensor("lhs", dispatched)
        .tensor("rhs", inputs.at("w1"))
        .option("group_sizes", group_sizes)
        .option("preferred_element_type", dtype)
        .option("fuse_gateup_activation", std::string(moe_activation_name(p.act)));
    if (const Tensor* b1 = find_tensor(inputs, "w1_bias")) gate_up.tensor("rhs_bias", squeeze(*b1));
    if (const Tensor* s1 = find_tensor(inputs, "w1_scale"))
      gate_up.tensor("rhs_scale", squeeze(*s1));
    const Tensor hidden = gate_up.run(device);
    Stage down_proj("ragged_dot");
    down_proj.tensor("lhs", hidden)
        .tensor("rhs", inputs.at("w2"))
        .option("group_sizes", group_sizes)
        .option("preferred_element_type", dtype);
    if (const Tensor* b2 = find_tensor(inputs, "w2_bias"))
      down_proj.tensor("rhs_bias", squeeze(*b2));
    if (const Tensor* s2 = find_tensor(inputs, "w2_scale"))
      down_proj.tensor("rhs_scale", squeeze(*s2));
    const Tensor down = down_proj.run(device);
    Stage("ragged_gather_reduce")
        .tensor("x", down)
        .tensor("indices", position)
        .tensor("topk_weights", weights)
        .tensor("valid_rows_mask", valid)
        .option("reduce_group_size", p.k)
        .run(device, &outputs);
  }

 private:
  // One op of the chain, by name, run by its cpu implementation on the layer's device.
  class Stage {
   public:
    explicit Stage(std::string_view op_name) : op_(find_op(op_name)) {}
    Stage& tensor(const std::string& name, const Tensor& tensor) {
      args_[name] = tensor.spec().to_string();
      inputs_.insert_or_assign(name, tensor);
      return *this;
    }
    Stage& option(const std::string& name, nlohmann::json value) {
      args_[name] = std::move(value);
      return *this;
    }
    // Its one output; written into `outputs` (the layer's, whose names it shares) when given.
    Tensor run(const Device& device, TensorMap* outputs = nullptr) const {
      const BoundArgs bound = op_.bind(args_);
      TensorMap own = outputs ? TensorMap{} : op_.allocate_outputs(bound, device.memory());
      TensorMap& target = outputs ? *outputs : own;
      dispatch(op_, bound, kStageImpl, std::nullopt, inputs_, target, device);
      return target.begin()->second;
    }

   private:
    const Op& op_;
    nlohmann::json args_ = nlohmann::json::object();
    TensorMap inputs_;
  };
};

}  // namespace

const Implementation& fused_moe_composite_implementation() {
  static const CompositeFusedMoe impl;
  return impl;
}

}  // namespace tokamax
