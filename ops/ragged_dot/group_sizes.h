// ragged_dot: binding group_sizes: a list of sizes, upstream's {num_groups, total_size}
// (expanded by numpy's generator, as upstream's GroupSizes), our {num_groups, total} random
// split, or absent (an even split of lhs's rows).
//
// Dimensions: as base.h (G owned groups, Gt entries of group_sizes, M rows of lhs).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tokamax {

// The most groups a call may have (MoE layers have up to a few thousand experts).
inline constexpr int64_t kMaxGroups = int64_t{1} << 20;

// How many entries group_sizes must have: exactly G, or, with a group_offset, at least
// group_offset + G (the groups of the other shards of an expert-parallel layer).
struct GroupCount {
  int64_t G = 0, offset = 0;
  bool has_offset = false;
  const char* extent = "M";  // the ragged dimension's name in errors (ragged_contracting: K)
  bool fits(int64_t count) const { return has_offset ? count >= offset + G : count == G; }
  std::string expected() const {
    return has_offset ? "at least group_offset + G = " + std::to_string(offset + G) +
                            " and at most " + std::to_string(kMaxGroups)
                      : "G=" + std::to_string(G) + " (the groups of rhs)";
  }
};

// The group sizes of ragged_dot's args (or its VJP's). Throws InvalidArgument naming
// group_sizes on a bad value, a count `count` does not accept, or sizes summing past M.
std::vector<int64_t> bind_group_sizes(const nlohmann::json& args, const GroupCount& count,
                                      int64_t M);

}  // namespace tokamax
