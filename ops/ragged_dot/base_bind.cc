// ragged_dot: canonical binding and validation (bind_canonical).
//
// Dimensions: as base.h (G owned groups, Gt entries of group_sizes, M, K, N of rhs).
#include <string>
#include <vector>

#include "ops/framework/checked_math.h"
#include "ops/framework/errors.h"
#include "ops/ragged_dot/base.h"
#include "ops/ragged_dot/dimension_numbers.h"
#include "ops/ragged_dot/group_sizes.h"

namespace tokamax {
namespace {

using nlohmann::json;

// A tensor argument of `rank`; float, or also quantized (i8, f8e4m3) when `quantized_ok`.
TensorSpec bind_tensor(const json& args, const char* name, int rank, const char* shape_doc,
                       bool quantized_ok = false) {
  return read_tensor_arg("ragged_dot: ", args, name,
                         {.shape = shape_doc,
                          .example = "bf16[4096,7168]",
                          .rank = rank,
                          .quantized_ok = quantized_ok,
                          .quantized_note = " (or quantized i8 / f8e4m3 with rhs_scale)"});
}

// Upstream's default: the inputs' common type (jnp.result_type): the type itself when both
// agree, f64 with an f64 input, f32 for any other mix (bf16 with f16 or f32).
DType default_output(DType lhs, DType rhs) {
  if (lhs == rhs) return lhs;
  if (lhs == DType::kF64 || rhs == DType::kF64) return DType::kF64;
  return DType::kF32;
}

// A string option: its value, or `fallback` when absent or null.
std::string string_option(const json& args, const char* name, const std::string& fallback) {
  if (!args.contains(name) || args.at(name).is_null()) return fallback;
  const json& value = args.at(name);
  if (!value.is_string()) {
    throw InvalidArgument(
        std::string("ragged_dot: ") + name + " must be a name (a string), got " + value.dump(),
        name);
  }
  return value.get<std::string>();
}

}  // namespace

template <>
BoundArgs ProblemOp<RaggedDotProblem>::bind_canonical(const json& args) const {
  check_arg_names("ragged_dot: ", args,
                  {"lhs", "rhs", "group_sizes", "preferred_element_type", "group_offset",
                   "rhs_bias", "activation", "fuse_gateup_activation", "zero_initialize",
                   "rhs_scale", "maybe_quantize_lhs", "precision", "ragged_dot_dimension_numbers"});
  const RaggedDims dims = bind_ragged_dims(args);
  const bool contracting = dims == RaggedDims::kRaggedContracting;
  const TensorSpec lhs = bind_tensor(args, "lhs", 2, contracting ? "[K, M]" : "[M, K]");
  const TensorSpec rhs = bind_tensor(args, "rhs", contracting ? 2 : 3,
                                     dims == RaggedDims::kDefault    ? "[G, K, N]"
                                     : dims == RaggedDims::kTransRhs ? "[G, N, K]"
                                                                     : "[K, N]",
                                     /*quantized_ok=*/true);
  require_plain_form(dims, args);
  const RaggedExtents extents = ragged_extents(dims, lhs, rhs, args);
  const int64_t M = extents.M, K = extents.K, G = extents.G, N = extents.N;
  if (extents.rhs_K != K) {
    throw InvalidArgument("ragged_dot: lhs has K=" + std::to_string(K) + " but rhs " +
                              rhs.to_string() + " has K=" + std::to_string(extents.rhs_K),
                          "rhs");
  }
  if (G < 1) {
    throw InvalidArgument(contracting ? "ragged_dot: group_sizes must have at least one group"
                                      : "ragged_dot: rhs must have at least one group",
                          contracting ? "group_sizes" : "rhs");
  }

  GroupCount count;
  count.G = G;
  if (contracting) count.extent = "K";
  if (args.contains("group_offset") && !args.at("group_offset").is_null()) {
    // An integer, or upstream's one-element array.
    json value = args.at("group_offset");
    if (value.is_array() && value.size() == 1) value = value[0];
    if (!value.is_number_integer() || value.get<int64_t>() < 0) {
      throw InvalidArgument(
          "ragged_dot: group_offset must be an integer >= 0 (the first group "
          "this call owns), got " +
              args.at("group_offset").dump(),
          "group_offset");
    }
    count.has_offset = true;
    count.offset = value.get<int64_t>();
  }
  // group_sizes has one entry per group (a list in the key, a vector here): a count from a file
  // must not size an allocation unchecked.
  const int64_t total_groups =
      checked_add(count.offset, G, "ragged_dot: group_offset + G", "group_offset");
  if (total_groups > kMaxGroups) {
    throw InvalidArgument("ragged_dot: " + std::to_string(total_groups) +
                              " groups (group_offset + G); at most " + std::to_string(kMaxGroups),
                          count.has_offset && count.offset > 0 ? "group_offset" : "rhs");
  }
  if (contracting && count.G > kMaxGroups) {
    throw InvalidArgument(
        "ragged_dot: " + std::to_string(count.G) + " groups; at most " + std::to_string(kMaxGroups),
        "group_sizes");
  }
  const std::vector<int64_t> sizes = bind_group_sizes(args, count, contracting ? K : M);

  const bool zero_initialize = read_bool_arg("ragged_dot: ", args, "zero_initialize", true);

  // Quantized weights: rhs i8 / f8e4m3 with rhs_scale per expert and output column [G, N] or per
  // K block [G, K / b, N]; maybe_quantize_lhs quantizes lhs per row and K block to int8.
  const bool quantized = is_quantized(rhs.dtype);
  const bool has_scale = args.contains("rhs_scale") && !args.at("rhs_scale").is_null();
  if (quantized != has_scale) {
    throw InvalidArgument(
        quantized ? "ragged_dot: rhs " + rhs.to_string() +
                        " is quantized: it needs rhs_scale, f32[G, N] (per expert and column) "
                        "or f32[G, K / b, N] (per K block of b rows)"
                  : "ragged_dot: rhs_scale is the scale of quantized weights, but rhs " +
                        rhs.to_string() + " is not quantized (i8 or f8e4m3)",
        quantized ? "rhs" : "rhs_scale");
  }
  TensorSpec scale;
  if (has_scale) {
    const json& value = args.at("rhs_scale");
    try {
      if (!value.is_string()) throw InvalidArgument("not a string");
      scale = parse_tensor_spec(value.get<std::string>());
    } catch (const InvalidArgument&) {
      throw InvalidArgument("ragged_dot: rhs_scale must be a tensor spec like f32[" +
                                std::to_string(G) + "," + std::to_string(N) + "], got " +
                                value.dump(),
                            "rhs_scale");
    }
    const bool per_channel = scale.rank() == 2 && scale.dims == std::vector<int64_t>{G, N};
    const bool per_block = scale.rank() == 3 && scale.dims[0] == G && scale.dims[2] == N &&
                           scale.dims[1] >= 1 && K % scale.dims[1] == 0;
    if (!is_floating(scale.dtype) || !(per_channel || per_block)) {
      throw InvalidArgument("ragged_dot: rhs_scale must be a float [G, N] = [" + std::to_string(G) +
                                ", " + std::to_string(N) +
                                "] or [G, K / b, N] with K / b dividing K=" + std::to_string(K) +
                                ", got " + scale.to_string(),
                            "rhs_scale");
    }
  }
  const bool quantize_lhs = read_bool_arg("ragged_dot: ", args, "maybe_quantize_lhs");
  if (quantize_lhs && !quantized) {
    throw InvalidArgument(
        "ragged_dot: maybe_quantize_lhs quantizes lhs to the weights' type; rhs " +
            rhs.to_string() + " is not quantized (i8 or f8e4m3)",
        "maybe_quantize_lhs");
  }

  // Quantized weights keep lhs's type by default (jnp.result_type(bf16, int8) is bf16).
  DType out_dtype = quantized ? lhs.dtype : default_output(lhs.dtype, rhs.dtype);
  if (args.contains("preferred_element_type") && !args.at("preferred_element_type").is_null()) {
    const json& value = args.at("preferred_element_type");
    if (!value.is_string()) {
      throw InvalidArgument(
          "ragged_dot: preferred_element_type must be a dtype name, got " + value.dump(),
          "preferred_element_type");
    }
    try {
      out_dtype = parse_dtype(value.get<std::string>());
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(std::string("ragged_dot: preferred_element_type: ") + e.what(),
                            "preferred_element_type");
    }
    if (!is_floating(out_dtype)) {
      throw InvalidArgument("ragged_dot: preferred_element_type must be a float dtype",
                            "preferred_element_type");
    }
  }

  const std::string activation = string_option(args, "activation", "none");
  try {
    parse_activation(activation);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(std::string("ragged_dot: ") + e.what(), "activation");
  }
  // The canonical name: one cache key for upstream's two spellings of the same form.
  SituGlu situ;
  const GateUp gate_up_form =
      parse_gate_up(string_option(args, "fuse_gateup_activation", "none"), &situ);
  const std::string gate_up = gate_up_spelling(gate_up_form, situ);
  if (gate_up != "none") {
    if (N % 2 != 0) {
      throw InvalidArgument(
          "ragged_dot: fuse_gateup_activation needs rhs [G, K, N] with [gate | "
          "up] along an even N, got N=" +
              std::to_string(N),
          "fuse_gateup_activation");
    }
    if (activation != "none") {
      throw InvalidArgument(
          "ragged_dot: activation and fuse_gateup_activation together are not supported "
          "(fuse_gateup_activation already applies its activation to the gate)",
          "activation");
    }
  }

  const DotPrecision parsed_precision = bind_precision(args, "ragged_dot: ", lhs.dtype, rhs.dtype);

  BoundArgs bound;
  bound.op = "ragged_dot";
  bound.args = {{"lhs", lhs.to_string()},
                {"rhs", rhs.to_string()},
                {"group_sizes", sizes},
                {"preferred_element_type", std::string(dtype_name(out_dtype))}};
  // Defaults stay out of the canonical form, so plain calls keep their cache keys.
  if (count.has_offset && (count.offset != 0 || static_cast<int64_t>(sizes.size()) != G)) {
    bound.args["group_offset"] = count.offset;
  }
  if (args.contains("rhs_bias") && !args.at("rhs_bias").is_null()) {
    const TensorSpec bias = bind_tensor(args, "rhs_bias", 2, "[G, N]");
    if (bias.dims != std::vector<int64_t>{G, N}) {
      throw InvalidArgument("ragged_dot: rhs_bias must be [G, N] = [" + std::to_string(G) + ", " +
                                std::to_string(N) +
                                "] (one bias per group and column of rhs), got " + bias.to_string(),
                            "rhs_bias");
    }
    bound.args["rhs_bias"] = bias.to_string();
  }
  if (!zero_initialize) bound.args["zero_initialize"] = false;
  if (has_scale) bound.args["rhs_scale"] = scale.to_string();
  if (quantize_lhs) bound.args["maybe_quantize_lhs"] = true;
  if (activation != "none") bound.args["activation"] = activation;
  if (gate_up != "none") bound.args["fuse_gateup_activation"] = gate_up;
  if (parsed_precision != DotPrecision::kDefault) {
    bound.args["precision"] = std::string(precision_name(parsed_precision));
  }
  if (dims != RaggedDims::kDefault) {
    bound.args["ragged_dot_dimension_numbers"] = std::string(ragged_dims_name(dims));
  }
  return bound;
}

}  // namespace tokamax
