// ragged_dot's dimension numbers in binding.
#include "ops/ragged_dot/dimension_numbers.h"

#include <string>

#include "ops/framework/errors.h"

namespace tokamax {
namespace {

using nlohmann::json;

constexpr RaggedDims kForms[] = {RaggedDims::kDefault, RaggedDims::kTransRhs,
                                 RaggedDims::kRaggedContracting};

// lax.RaggedDotDimensionNumbers of each form (upstream's DEFAULT_RAGGED_DOT_DIM_NUMS, ...).
json upstream_structure(RaggedDims dims) {
  const json no_batch = {json::array(), json::array()};
  switch (dims) {
    case RaggedDims::kDefault:
      return {{"dot_dimension_numbers", {{{1}, {1}}, no_batch}},
              {"lhs_ragged_dimensions", {0}},
              {"rhs_group_dimensions", {0}}};
    case RaggedDims::kTransRhs:
      return {{"dot_dimension_numbers", {{{1}, {2}}, no_batch}},
              {"lhs_ragged_dimensions", {0}},
              {"rhs_group_dimensions", {0}}};
    case RaggedDims::kRaggedContracting:
      break;
  }
  return {{"dot_dimension_numbers", {{{0}, {0}}, no_batch}},
          {"lhs_ragged_dimensions", {0}},
          {"rhs_group_dimensions", json::array()}};
}

bool present(const json& args, const char* name) {
  return args.contains(name) && !args.at(name).is_null();
}

}  // namespace

std::string_view ragged_dims_name(RaggedDims dims) {
  switch (dims) {
    case RaggedDims::kDefault:
      return "default";
    case RaggedDims::kTransRhs:
      return "trans_rhs";
    case RaggedDims::kRaggedContracting:
      return "ragged_contracting";
  }
  return "default";
}

RaggedDims parse_ragged_dims(const json& value) {
  for (RaggedDims dims : kForms) {
    if ((value.is_string() && value.get<std::string>() == ragged_dims_name(dims)) ||
        (value.is_object() && value == upstream_structure(dims))) {
      return dims;
    }
  }
  throw InvalidArgument(
      "ragged_dot: ragged_dot_dimension_numbers must be default, trans_rhs or ragged_contracting "
      "(or upstream's lax.RaggedDotDimensionNumbers of one of them, e.g. " +
          upstream_structure(RaggedDims::kTransRhs).dump() + "), got " + value.dump(),
      "ragged_dot_dimension_numbers");
}

RaggedDims bind_ragged_dims(const json& args) {
  if (!present(args, "ragged_dot_dimension_numbers")) return RaggedDims::kDefault;
  return parse_ragged_dims(args.at("ragged_dot_dimension_numbers"));
}

RaggedExtents ragged_extents(RaggedDims dims, const TensorSpec& lhs, const TensorSpec& rhs,
                             const json& args) {
  RaggedExtents e;
  switch (dims) {
    case RaggedDims::kDefault:
    case RaggedDims::kTransRhs:
      e.M = lhs.dims[0];
      e.K = lhs.dims[1];
      e.G = rhs.dims[0];
      e.N = rhs.dims[dims == RaggedDims::kDefault ? 2 : 1];
      e.rhs_K = rhs.dims[dims == RaggedDims::kDefault ? 1 : 2];
      return e;
    case RaggedDims::kRaggedContracting:
      break;
  }
  e.K = lhs.dims[0];
  e.M = lhs.dims[1];
  e.N = rhs.dims[1];
  e.rhs_K = rhs.dims[0];
  const json* sizes = present(args, "group_sizes") ? &args.at("group_sizes") : nullptr;
  if (sizes && sizes->is_array()) {
    e.G = static_cast<int64_t>(sizes->size());
  } else if (sizes && sizes->is_object() && sizes->contains("num_groups") &&
             sizes->at("num_groups").is_number_integer()) {
    e.G = sizes->at("num_groups").get<int64_t>();
  } else {
    throw InvalidArgument(
        "ragged_dot: ragged_contracting takes its groups from group_sizes (rhs [K, N] has no "
        "group dimension): give a list of sizes or {num_groups: G, total_size: rows of K}",
        "group_sizes");
  }
  return e;
}

void require_plain_form(RaggedDims dims, const json& args) {
  if (dims == RaggedDims::kDefault) return;
  auto refuse = [&](const char* name) {
    throw InvalidArgument("ragged_dot: " + std::string(name) +
                              " is supported with the default "
                              "ragged_dot_dimension_numbers only; " +
                              std::string(ragged_dims_name(dims)) +
                              " takes a plain grouped product",
                          name);
  };
  for (const char* name : {"group_offset", "rhs_bias", "activation", "fuse_gateup_activation",
                           "rhs_scale", "maybe_quantize_lhs"}) {
    if (!present(args, name)) continue;
    const json& value = args.at(name);
    const bool neutral = (value.is_string() && value.get<std::string>() == "none") ||
                         (value.is_boolean() && !value.get<bool>());
    if (!neutral) refuse(name);
  }
  if (present(args, "zero_initialize") && args.at("zero_initialize") == false) {
    refuse("zero_initialize");
  }
  if (present(args, "precision") && args.at("precision") != "default") refuse("precision");
}

}  // namespace tokamax
