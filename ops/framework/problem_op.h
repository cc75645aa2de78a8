// ProblemOp: the Op of one Problem type, so that an op declares its math once (the Problem
// struct) instead of repeating Op's interface in a class of its own.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string_view>
#include <vector>

#include "ops/framework/op.h"

namespace tokamax {

// `Problem` names its op (`kOp`) and describes it in one line (`kSummary`). The op's files
// define every member below that has no body here as an explicit specialization, in the file of
// its role (base.cc: binding and counts; base_numerics.cc: inputs, the oracle's cost, the error
// model; oracle.cc; api.cc: the dispatch order), e.g.
//
//   template <>
//   double ProblemOp<LayerNormProblem>::flops(const BoundArgs& args) const { ... }
//
// There is no generic definition, so a member an op forgets is a link error that names it. The
// optional hooks of Op (primal, cotangents, arg_aliases, compute_dtype, outputs_start_zeroed,
// defined_range) belong to the ops that need them: those derive from ProblemOp and override
// them.
template <class Problem>
class ProblemOp : public Op {
 public:
  std::string_view name() const override { return Problem::kOp; }
  std::string_view summary() const override { return Problem::kSummary; }
  BoundArgs bind_canonical(const nlohmann::json& args) const override;
  std::vector<TensorDecl> inputs(const BoundArgs& args) const override;
  std::vector<TensorDecl> outputs(const BoundArgs& args) const override;
  double flops(const BoundArgs& args) const override;
  double bytes(const BoundArgs& args) const override;
  TensorMap make_inputs(const BoundArgs& args, uint64_t seed) const override;
  OracleSample oracle(const BoundArgs& args, const TensorMap& inputs, std::string_view output,
                      std::span<const int64_t> index) const override;
  double oracle_cost_per_output(const BoundArgs& args) const override;
  ErrorModel error_model(const BoundArgs& args) const override;
  std::vector<const Implementation*> implementations() const override;
};

}  // namespace tokamax
