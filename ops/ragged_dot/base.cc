// ragged_dot: canonical binding, validation, FLOP/byte counts.
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens), split into consecutive groups by group_sizes
//   K      contraction extent
//   N      output features
//   rows   sum(group_sizes) <= M; output rows past it are zero
#include "ops/ragged_dot/base.h"

#include <algorithm>
#include <string>

#include "ops/framework/errors.h"

namespace tokamax {
namespace {

using nlohmann::json;

TensorSpec bind_tensor(const json& args, const char* name, int rank, const char* shape_doc) {
  if (!args.contains(name)) {
    throw InvalidArgument(
        std::string("ragged_dot: missing argument '") + name + "' (" + shape_doc + ")", name);
  }
  const json& value = args.at(name);
  if (!value.is_string()) {
    throw InvalidArgument(std::string("ragged_dot: ") + name + " must be a tensor spec like " +
                              "bf16[4096,7168], got " + value.dump(),
                          name);
  }
  TensorSpec spec;
  try {
    spec = parse_tensor_spec(value.get<std::string>());
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(std::string("ragged_dot: ") + name + ": " + e.what(), name);
  }
  if (spec.rank() != rank) {
    throw InvalidArgument(std::string("ragged_dot: ") + name + " must have rank " +
                              std::to_string(rank) + " " + shape_doc + ", got " + spec.to_string(),
                          name);
  }
  if (!is_floating(spec.dtype)) {
    throw InvalidArgument(
        std::string("ragged_dot: ") + name + " must be a float tensor, got " + spec.to_string(),
        name);
  }
  return spec;
}

int64_t json_int(const json& value, const std::string& what) {
  if (!value.is_number_integer()) {
    throw InvalidArgument("ragged_dot: " + what + " must be an integer, got " + value.dump(),
                          "group_sizes");
  }
  return value.get<int64_t>();
}

// group_sizes as a list, {num_groups: G, total: rows[, seed: s]}, or absent (even split of M).
std::vector<int64_t> bind_group_sizes(const json& args, int64_t G, int64_t M) {
  if (!args.contains("group_sizes") || args.at("group_sizes").is_null()) {
    return even_group_sizes(G, M);
  }
  const json& value = args.at("group_sizes");
  std::vector<int64_t> sizes;
  if (value.is_array()) {
    for (size_t g = 0; g < value.size(); ++g) {
      sizes.push_back(json_int(value[g], "group_sizes[" + std::to_string(g) + "]"));
    }
  } else if (value.is_object()) {
    int64_t num_groups = -1, total = -1;
    uint64_t seed = 0;
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (it.key() == "num_groups") {
        num_groups = json_int(*it, "group_sizes.num_groups");
      } else if (it.key() == "total") {
        total = json_int(*it, "group_sizes.total");
      } else if (it.key() == "seed") {
        seed = static_cast<uint64_t>(json_int(*it, "group_sizes.seed"));
      } else {
        throw InvalidArgument("ragged_dot: unknown key '" + it.key() +
                                  "' in group_sizes (expected num_groups, total, seed)",
                              "group_sizes");
      }
    }
    if (num_groups < 0 || total < 0) {
      throw InvalidArgument(
          "ragged_dot: group_sizes as a mapping needs non-negative num_groups and total",
          "group_sizes");
    }
    if (num_groups != G) {
      throw InvalidArgument("ragged_dot: group_sizes.num_groups is " + std::to_string(num_groups) +
                                " but rhs has G=" + std::to_string(G) + " groups",
                            "group_sizes");
    }
    if (total > M) {
      throw InvalidArgument("ragged_dot: group_sizes.total is " + std::to_string(total) +
                                " but lhs has M=" + std::to_string(M) + " rows",
                            "group_sizes");
    }
    return random_group_sizes(G, total, seed);
  } else {
    throw InvalidArgument(
        "ragged_dot: group_sizes must be a list of G integers or "
        "{num_groups: G, total: rows}, got " +
            value.dump(),
        "group_sizes");
  }
  if (static_cast<int64_t>(sizes.size()) != G) {
    throw InvalidArgument("ragged_dot: group_sizes has " + std::to_string(sizes.size()) +
                              " entries but rhs has G=" + std::to_string(G) + " groups",
                          "group_sizes");
  }
  int64_t sum = 0;
  for (size_t g = 0; g < sizes.size(); ++g) {
    if (sizes[g] < 0) {
      throw InvalidArgument("ragged_dot: group_sizes[" + std::to_string(g) + "] is " +
                                std::to_string(sizes[g]) + "; sizes must be >= 0",
                            "group_sizes");
    }
    sum += sizes[g];
  }
  if (sum > M) {
    throw InvalidArgument("ragged_dot: group_sizes sum to " + std::to_string(sum) +
                              " but lhs has M=" + std::to_string(M) + " rows",
                          "group_sizes");
  }
  return sizes;
}

// bf16/f16 inputs accumulate and return f32 by default; f32 and f64 keep their own type.
DType default_output(DType lhs, DType rhs) {
  if (lhs == DType::kF64 || rhs == DType::kF64) return DType::kF64;
  return DType::kF32;
}

}  // namespace

RaggedDotProblem RaggedDotProblem::from(const BoundArgs& args) {
  RaggedDotProblem problem;
  const TensorSpec lhs = args.tensor("lhs");
  const TensorSpec rhs = args.tensor("rhs");
  problem.M = lhs.dims[0];
  problem.K = lhs.dims[1];
  problem.G = rhs.dims[0];
  problem.N = rhs.dims[2];
  problem.lhs_dtype = lhs.dtype;
  problem.rhs_dtype = rhs.dtype;
  problem.out_dtype = parse_dtype(args.option("preferred_element_type").get<std::string>());
  problem.group_sizes = args.option("group_sizes").get<std::vector<int64_t>>();
  problem.group_starts.assign(1, 0);
  for (int64_t size : problem.group_sizes) {
    problem.group_starts.push_back(problem.group_starts.back() + size);
  }
  return problem;
}

BoundArgs RaggedDotOp::bind(const json& args) const {
  if (!args.is_object()) throw InvalidArgument("ragged_dot: args must be a mapping");
  for (auto it = args.begin(); it != args.end(); ++it) {
    const std::string& key = it.key();
    if (key != "lhs" && key != "rhs" && key != "group_sizes" && key != "preferred_element_type") {
      throw InvalidArgument("ragged_dot: unknown argument '" + key +
                                "' (expected lhs, rhs, group_sizes, preferred_element_type)",
                            key);
    }
  }
  const TensorSpec lhs = bind_tensor(args, "lhs", 2, "[M, K]");
  const TensorSpec rhs = bind_tensor(args, "rhs", 3, "[G, K, N]");
  const int64_t M = lhs.dims[0], K = lhs.dims[1];
  const int64_t G = rhs.dims[0], rhs_K = rhs.dims[1];
  if (rhs_K != K) {
    throw InvalidArgument("ragged_dot: lhs has K=" + std::to_string(K) + " but rhs " +
                              rhs.to_string() + " has K=" + std::to_string(rhs_K),
                          "rhs");
  }
  if (G < 1) throw InvalidArgument("ragged_dot: rhs must have at least one group", "rhs");
  const std::vector<int64_t> sizes = bind_group_sizes(args, G, M);

  DType out_dtype = default_output(lhs.dtype, rhs.dtype);
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
  BoundArgs bound;
  bound.op = "ragged_dot";
  bound.args = {{"lhs", lhs.to_string()},
                {"rhs", rhs.to_string()},
                {"group_sizes", sizes},
                {"preferred_element_type", std::string(dtype_name(out_dtype))}};
  return bound;
}

std::vector<TensorDecl> RaggedDotOp::inputs(const BoundArgs& args) const {
  const RaggedDotProblem p = RaggedDotProblem::from(args);
  return {{"lhs", args.tensor("lhs")},
          {"rhs", args.tensor("rhs")},
          {"group_sizes", TensorSpec{DType::kI32, {p.G}}}};
}

std::vector<TensorDecl> RaggedDotOp::outputs(const BoundArgs& args) const {
  const RaggedDotProblem p = RaggedDotProblem::from(args);
  return {{"out", TensorSpec{p.out_dtype, {p.M, p.N}}}};
}

double RaggedDotOp::flops(const BoundArgs& args) const {
  const RaggedDotProblem p = RaggedDotProblem::from(args);
  return 2.0 * static_cast<double>(p.rows()) * p.K * p.N;
}

double RaggedDotOp::bytes(const BoundArgs& args) const {
  // Only the rows in groups and the rhs of non-empty groups must be read; every output row is
  // written (rows past the group sum are zeroed).
  const RaggedDotProblem p = RaggedDotProblem::from(args);
  const double used_groups = static_cast<double>(
      std::count_if(p.group_sizes.begin(), p.group_sizes.end(), [](int64_t s) { return s > 0; }));
  return static_cast<double>(p.rows()) * p.K * dtype_size(p.lhs_dtype) +
         used_groups * p.K * p.N * dtype_size(p.rhs_dtype) +
         static_cast<double>(p.M) * p.N * dtype_size(p.out_dtype) + p.G * 4.0;
}

}  // namespace tokamax
