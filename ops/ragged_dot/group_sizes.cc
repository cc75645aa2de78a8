// ragged_dot: binding group_sizes (group_sizes.h).
#include "ops/ragged_dot/group_sizes.h"

#include <cmath>
#include <limits>
#include <string>

#include "ops/common/numpy_random.h"
#include "ops/framework/checked_math.h"
#include "ops/framework/errors.h"
#include "ops/ragged_dot/base.h"

namespace tokamax {
namespace {

using nlohmann::json;

int64_t json_int(const json& value, const std::string& what) {
  if (!value.is_number_integer()) {
    throw InvalidArgument("ragged_dot: " + what + " must be an integer, got " + value.dump(),
                          "group_sizes");
  }
  return value.get<int64_t>();
}

// upstream's generator's probabilities p (group_sizes.p): num_groups finite non-negative numbers
// summing to 1 within numpy's tolerance (sqrt of the f64 epsilon), as Generator.choice checks.
std::vector<double> bind_group_probabilities(const json& value, int64_t num_groups) {
  const auto bad = [](const std::string& why) {
    return InvalidArgument("ragged_dot: group_sizes.p " + why, "group_sizes");
  };
  if (!value.is_array() || static_cast<int64_t>(value.size()) != num_groups) {
    throw bad("must be a list of num_groups = " + std::to_string(num_groups) +
              " probabilities, got " + value.dump());
  }
  std::vector<double> p;
  double sum = 0.0;
  for (size_t g = 0; g < value.size(); ++g) {
    if (!value[g].is_number() || !std::isfinite(value[g].get<double>()) ||
        value[g].get<double>() < 0.0) {
      throw bad("[" + std::to_string(g) + "] must be a finite number >= 0, got " + value[g].dump());
    }
    p.push_back(value[g].get<double>());
    sum += p.back();
  }
  if (std::fabs(sum - 1.0) > std::sqrt(std::numeric_limits<double>::epsilon())) {
    throw bad("sums to " + std::to_string(sum) + "; probabilities must sum to 1");
  }
  return p;
}

// group_sizes as a mapping: {num_groups: Gt, total_size: rows[, p: [...]][, seed: s]} expanded
// as upstream's GroupSizes does (numpy's default_rng(seed).choice, numpy_random.h), or
// {num_groups: Gt, total: rows[, seed: s]}, a uniform random composition of our own.
std::vector<int64_t> bind_group_size_mapping(const json& value, const GroupCount& count,
                                             int64_t M) {
  int64_t num_groups = -1, total = -1;
  bool upstream = false;
  uint64_t seed = 0;
  const json* probabilities = nullptr;
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (it.key() == "num_groups") {
      num_groups = json_int(*it, "group_sizes.num_groups");
    } else if (it.key() == "total" || it.key() == "total_size") {
      if (total >= 0) {
        throw InvalidArgument("ragged_dot: group_sizes has both total and total_size",
                              "group_sizes");
      }
      total = json_int(*it, "group_sizes." + it.key());
      upstream = it.key() == "total_size";
    } else if (it.key() == "seed") {
      const int64_t value = json_int(*it, "group_sizes.seed");
      if (value < 0) {
        // numpy's default_rng refuses negative seeds too.
        throw InvalidArgument("ragged_dot: group_sizes.seed must be >= 0, got " + it->dump(),
                              "group_sizes");
      }
      seed = static_cast<uint64_t>(value);
    } else if (it.key() == "p") {
      probabilities = &*it;
    } else {
      throw InvalidArgument("ragged_dot: unknown key '" + it.key() +
                                "' in group_sizes (expected num_groups, total_size or total, p, "
                                "seed)",
                            "group_sizes");
    }
  }
  if (num_groups < 0 || total < 0) {
    throw InvalidArgument(
        "ragged_dot: group_sizes as a mapping needs non-negative num_groups and total_size (or "
        "total)",
        "group_sizes");
  }
  if (!count.fits(num_groups) || num_groups > kMaxGroups) {
    throw InvalidArgument("ragged_dot: group_sizes.num_groups is " + std::to_string(num_groups) +
                              " but must be " + count.expected(),
                          "group_sizes");
  }
  if (total > M) {
    throw InvalidArgument("ragged_dot: group_sizes total size is " + std::to_string(total) +
                              " but lhs has " + count.extent + "=" + std::to_string(M) + " rows",
                          "group_sizes");
  }
  if (probabilities != nullptr && !upstream) {
    throw InvalidArgument("ragged_dot: group_sizes.p goes with total_size (upstream's generator)",
                          "group_sizes");
  }
  if (!upstream) return random_group_sizes(num_groups, total, seed);
  if (num_groups == 0) {
    if (total > 0) {
      throw InvalidArgument("ragged_dot: group_sizes has no groups to put total_size rows in",
                            "group_sizes");
    }
    return {};
  }
  if (probabilities == nullptr) return numpy_choice_counts(num_groups, total, nullptr, seed);
  const std::vector<double> p = bind_group_probabilities(*probabilities, num_groups);
  return numpy_choice_counts(num_groups, total, &p, seed);
}

}  // namespace

// group_sizes as a list, a mapping (bind_group_size_mapping), or absent (even split of M).
std::vector<int64_t> bind_group_sizes(const json& args, const GroupCount& count, int64_t M) {
  if (!args.contains("group_sizes") || args.at("group_sizes").is_null()) {
    return even_group_sizes(count.has_offset ? count.offset + count.G : count.G, M);
  }
  const json& value = args.at("group_sizes");
  std::vector<int64_t> sizes;
  if (value.is_array()) {
    for (size_t g = 0; g < value.size(); ++g) {
      sizes.push_back(json_int(value[g], "group_sizes[" + std::to_string(g) + "]"));
    }
  } else if (value.is_object()) {
    return bind_group_size_mapping(value, count, M);
  } else {
    throw InvalidArgument(
        "ragged_dot: group_sizes must be a list of G integers or "
        "{num_groups: G, total_size: rows}, got " +
            value.dump(),
        "group_sizes");
  }
  if (!count.fits(static_cast<int64_t>(sizes.size()))) {
    throw InvalidArgument("ragged_dot: group_sizes has " + std::to_string(sizes.size()) +
                              " entries but must have " + count.expected(),
                          "group_sizes");
  }
  int64_t sum = 0;
  for (size_t g = 0; g < sizes.size(); ++g) {
    if (sizes[g] < 0) {
      throw InvalidArgument("ragged_dot: group_sizes[" + std::to_string(g) + "] is " +
                                std::to_string(sizes[g]) + "; sizes must be >= 0",
                            "group_sizes");
    }
    sum = checked_add(sum, sizes[g], "ragged_dot: the sum of group_sizes", "group_sizes");
  }
  if (sum > M) {
    throw InvalidArgument("ragged_dot: group_sizes sum to " + std::to_string(sum) +
                              " but lhs has " + count.extent + "=" + std::to_string(M) + " rows",
                          "group_sizes");
  }
  return sizes;
}

}  // namespace tokamax
