// ragged_dot: the parsed problem, the gate/up spellings, tensors and FLOP/byte counts (the
// canonical binding is base_bind.cc).
//
// Dimensions: as base.h (G owned groups, Gt entries of group_sizes, M, K, N of rhs).
#include "ops/ragged_dot/base.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <string>
#include <system_error>

#include "ops/framework/checked_math.h"
#include "ops/framework/errors.h"
#include "ops/ragged_dot/dimension_numbers.h"
#include "ops/ragged_dot/group_sizes.h"

namespace tokamax {
namespace {

using nlohmann::json;

constexpr GateUp kGateUps[] = {GateUp::kNone,    GateUp::kSilu,      GateUp::kGelu,
                               GateUp::kGeluErf, GateUp::kSwigluOai, GateUp::kSiluClamped};

}  // namespace

RaggedDotProblem RaggedDotProblem::from(const BoundArgs& args) {
  RaggedDotProblem problem;
  const TensorSpec lhs = args.tensor("lhs");
  const TensorSpec rhs = args.tensor("rhs");
  if (args.has("ragged_dot_dimension_numbers")) {
    problem.dims = parse_ragged_dims(args.option("ragged_dot_dimension_numbers"));
  }
  problem.all_group_sizes = args.option("group_sizes").get<std::vector<int64_t>>();
  const RaggedExtents extents = ragged_extents(problem.dims, lhs, rhs, args.args);
  problem.M = extents.M;
  problem.K = extents.K;
  problem.G = extents.G;
  problem.N = extents.N;
  problem.lhs_dtype = lhs.dtype;
  problem.rhs_dtype = rhs.dtype;
  problem.out_dtype = parse_dtype(args.option("preferred_element_type").get<std::string>());
  if (args.has("group_offset")) problem.group_offset = args.option("group_offset").get<int64_t>();
  if (args.has("rhs_bias")) {
    problem.has_bias = true;
    problem.bias_dtype = args.tensor("rhs_bias").dtype;
  }
  if (args.has("rhs_scale")) {
    const TensorSpec scale = args.tensor("rhs_scale");
    problem.scale_dtype = scale.dtype;
    problem.scale_blocks = scale.rank() == 3 ? scale.dims[1] : 1;
  }
  problem.quantize_lhs = args.has("maybe_quantize_lhs");
  problem.zero_initialize =
      !args.has("zero_initialize") || args.option("zero_initialize").get<bool>();
  if (args.has("activation")) {
    problem.activation = parse_activation(args.option("activation").get<std::string>());
  }
  if (args.has("fuse_gateup_activation")) {
    problem.gate_up =
        parse_gate_up(args.option("fuse_gateup_activation").get<std::string>(), &problem.situ);
  }
  if (args.has("precision")) {
    problem.precision = parse_precision(args.option("precision").get<std::string>());
  }
  // The owned groups [group_offset, group_offset + G) and their rows.
  int64_t first_row = 0;
  for (int64_t g = 0; g < problem.group_offset; ++g) first_row += problem.all_group_sizes[g];
  problem.group_sizes.assign(problem.all_group_sizes.begin() + problem.group_offset,
                             problem.all_group_sizes.begin() + problem.group_offset + problem.G);
  problem.group_starts.assign(1, first_row);
  for (int64_t size : problem.group_sizes) {
    problem.group_starts.push_back(problem.group_starts.back() + size);
  }
  return problem;
}

RaggedDotProblem RaggedDotProblem::computed() const {
  const PrecisionPlan plan = precision_plan();
  if (plan.identity()) return *this;
  RaggedDotProblem p = *this;
  p.K = K * plan.passes();
  p.lhs_dtype = plan.operand_dtype(true, lhs_dtype);
  p.rhs_dtype = plan.operand_dtype(false, rhs_dtype);
  p.precision = DotPrecision::kDefault;
  return p;
}

TensorMap expand_precision_operands(const RaggedDotProblem& problem, const TensorMap& inputs) {
  const PrecisionPlan plan = problem.precision_plan();
  if (plan.identity()) return inputs;
  TensorMap expanded = inputs;
  if (plan.expands(true)) {
    expanded.at("lhs") = expand_operand(inputs.at("lhs"), 1, plan, /*is_lhs=*/true);
  }
  // Groups without rows are never read: their pieces stay zero.
  std::vector<bool> used(static_cast<size_t>(problem.G));
  for (int64_t g = 0; g < problem.G; ++g) used[g] = problem.group_sizes[g] > 0;
  if (plan.expands(false)) {
    expanded.at("rhs") = expand_operand(inputs.at("rhs"), 1, plan, /*is_lhs=*/false, used);
  }
  return expanded;
}

std::string RaggedDotProblem::extended_arguments() const {
  std::string used;
  auto add = [&](const std::string& what) { used += (used.empty() ? "" : ", ") + what; };
  if (group_offset != 0 || static_cast<int64_t>(all_group_sizes.size()) != G) {
    add("group_offset=" + std::to_string(group_offset) + " of " +
        std::to_string(all_group_sizes.size()) + " groups");
  }
  if (is_quantized(rhs_dtype)) {
    add("rhs " + std::string(dtype_name(rhs_dtype)) + " with rhs_scale" +
        (scale_blocks > 1 ? " per " + std::to_string(scale_blocks) + " K blocks" : ""));
  }
  if (quantize_lhs) add("maybe_quantize_lhs");
  if (!zero_initialize) add("zero_initialize=false");
  if (has_bias) add("rhs_bias");
  if (activation != Activation::kNone)
    add("activation=" + std::string(activation_name(activation)));
  if (gate_up != GateUp::kNone) {
    add("fuse_gateup_activation=" + gate_up_spelling(gate_up, situ));
  }
  if (!precision_plan().identity()) add("precision=" + std::string(precision_name(precision)));
  if (dims != RaggedDims::kDefault) {
    add("ragged_dot_dimension_numbers=" + std::string(ragged_dims_name(dims)));
  }
  return used;
}

void require_plain_ragged_dot(const RaggedDotProblem& problem, std::string_view impl) {
  const std::string used = problem.extended_arguments();
  if (!used.empty()) {
    throw NotImplemented(std::string(impl) + ": " + used +
                         ": a plain grouped matmul only (cpu and the reference implement "
                         "these, onednn all but fp8 weights and per-block int8 scales)");
  }
}

std::string_view gate_up_name(GateUp gate_up) {
  switch (gate_up) {
    case GateUp::kNone:
      return "none";
    case GateUp::kSilu:
      return "silu";
    case GateUp::kGelu:
      return "gelu";
    case GateUp::kGeluErf:
      return "gelu_erf";
    case GateUp::kSwigluOai:
      return "swigluoai";
    case GateUp::kSiluClamped:
      return "silu_and_mul_with_clamp";
    case GateUp::kSitu:
      return "situ";
  }
  return "?";
}

namespace {

// The shortest decimal that reads back to `value` ("4", "0.25").
std::string shortest(double value) {
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

// situ's "<beta>:<linear_beta | none>": beta finite and > 0, linear_beta too or "none".
SituGlu parse_situ(std::string_view name, std::string_view params) {
  const auto bad = [&](const std::string& why) {
    return InvalidArgument("ragged_dot: fuse_gateup_activation '" + std::string(name) +
                               "': " + why +
                               " (expected situ:<beta>:<linear_beta or none>, beta and "
                               "linear_beta > 0)",
                           "fuse_gateup_activation");
  };
  const size_t colon = params.find(':');
  if (colon == std::string_view::npos) throw bad("no linear_beta");
  auto number = [&](std::string_view text, const char* what) {
    double value = 0.0;
    const auto result = std::from_chars(text.data(), text.data() + text.size(), value);
    // The kernels take it as f32: a normal f32 (not 0, inf or subnormal there).
    if (result.ec != std::errc() || result.ptr != text.data() + text.size() ||
        !(value >= std::numeric_limits<float>::min() &&
          value <= std::numeric_limits<float>::max())) {
      throw bad(std::string(what) + " '" + std::string(text) +
                "' is not a number > 0 within f32's normal range");
    }
    return value;
  };
  SituGlu situ;
  situ.beta = number(params.substr(0, colon), "beta");
  const std::string_view linear = params.substr(colon + 1);
  situ.linear_beta = linear == "none" ? 0.0 : number(linear, "linear_beta");
  return situ;
}

}  // namespace

std::string gate_up_spelling(GateUp gate_up, const SituGlu& situ) {
  if (gate_up != GateUp::kSitu) return std::string(gate_up_name(gate_up));
  return "situ:" + shortest(situ.beta) + ":" +
         (situ.linear_beta > 0.0 ? shortest(situ.linear_beta) : std::string("none"));
}

GateUp parse_gate_up(std::string_view name, SituGlu* situ) {
  // jax.nn.gelu's approximate=True, which is also its default ("gelu").
  if (name == "gelu_tanh") return GateUp::kGelu;
  if (name.substr(0, 5) == "situ:") {
    const SituGlu parsed = parse_situ(name, name.substr(5));
    if (situ != nullptr) *situ = parsed;
    return GateUp::kSitu;
  }
  std::string known;
  for (GateUp gate_up : kGateUps) {
    if (gate_up_name(gate_up) == name) return gate_up;
    known += (known.empty() ? "" : ", ") + std::string(gate_up_name(gate_up));
  }
  throw InvalidArgument("ragged_dot: unknown fuse_gateup_activation '" + std::string(name) +
                            "' (expected one of " + known +
                            ", gelu_tanh, situ:<beta>:<linear_beta or none>)",
                        "fuse_gateup_activation");
}

template <>
std::vector<TensorDecl> ProblemOp<RaggedDotProblem>::inputs(const BoundArgs& args) const {
  const RaggedDotProblem p = RaggedDotProblem::from(args);
  std::vector<TensorDecl> decls = {
      {"lhs", args.tensor("lhs")},
      {"rhs", args.tensor("rhs")},
      {"group_sizes", TensorSpec{DType::kI32, {static_cast<int64_t>(p.all_group_sizes.size())}}}};
  if (p.has_bias) decls.push_back({"rhs_bias", args.tensor("rhs_bias")});
  if (p.quantized()) decls.push_back({"rhs_scale", args.tensor("rhs_scale")});
  return decls;
}

template <>
std::vector<TensorDecl> ProblemOp<RaggedDotProblem>::outputs(const BoundArgs& args) const {
  const RaggedDotProblem p = RaggedDotProblem::from(args);
  if (p.dims == RaggedDims::kRaggedContracting) {
    return {{"out", TensorSpec{p.out_dtype, {p.G, p.M, p.N}}}};
  }
  return {{"out", TensorSpec{p.out_dtype, {p.M, p.out_N()}}}};
}

DType RaggedDotOp::compute_dtype(const BoundArgs& args) const {
  const RaggedDotProblem p = RaggedDotProblem::from(args);
  if (p.quantize_lhs && p.rhs_dtype == DType::kI8) return DType::kI8;
  // A precision preset multiplies its pieces (bf16, f16, or tf32 on the f32 units).
  if (const PrecisionPlan plan = p.precision_plan(); !plan.identity()) return plan.piece_dtype;
  return Op::compute_dtype(args);
}

bool RaggedDotOp::outputs_start_zeroed(const BoundArgs& args) const {
  return !RaggedDotProblem::from(args).zero_initialize;
}

template <>
double ProblemOp<RaggedDotProblem>::flops(const BoundArgs& args) const {
  const RaggedDotProblem p = RaggedDotProblem::from(args);
  // ragged_contracting: each of the grouped rows of K feeds an M x N outer product.
  if (p.dims == RaggedDims::kRaggedContracting) {
    return 2.0 * static_cast<double>(p.owned_rows()) * p.M * p.N;
  }
  return 2.0 * static_cast<double>(p.owned_rows()) * p.K * p.N;
}

template <>
double ProblemOp<RaggedDotProblem>::bytes(const BoundArgs& args) const {
  // Only the rows in groups and the rhs of non-empty groups must be read; every output row is
  // written (rows past the group sum are zeroed).
  const RaggedDotProblem p = RaggedDotProblem::from(args);
  const double used_groups = static_cast<double>(
      std::count_if(p.group_sizes.begin(), p.group_sizes.end(), [](int64_t s) { return s > 0; }));
  if (p.dims == RaggedDims::kRaggedContracting) {
    // The grouped rows of lhs [K, M] and rhs [K, N] once; every out[g] written.
    return static_cast<double>(p.owned_rows()) *
               (p.M * dtype_size(p.lhs_dtype) + p.N * dtype_size(p.rhs_dtype)) +
           static_cast<double>(p.G) * p.M * p.N * dtype_size(p.out_dtype) +
           static_cast<double>(p.all_group_sizes.size()) * 4.0;
  }
  return static_cast<double>(p.owned_rows()) * p.K * dtype_size(p.lhs_dtype) +
         used_groups * p.K * p.N * dtype_size(p.rhs_dtype) +
         (p.has_bias ? used_groups * p.N * dtype_size(p.bias_dtype) : 0.0) +
         (p.quantized() ? used_groups * p.scale_blocks * p.N * dtype_size(p.scale_dtype) : 0.0) +
         static_cast<double>(p.M) * p.out_N() * dtype_size(p.out_dtype) +
         static_cast<double>(p.all_group_sizes.size()) * 4.0;
}

}  // namespace tokamax
