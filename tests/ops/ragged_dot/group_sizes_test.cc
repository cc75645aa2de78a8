// Tests of ragged_dot's group_sizes binding: upstream's {num_groups, total_size} expanded as its
// GroupSizes does (numpy's generator, with an optional skew p), and the errors that name it.
#include "ops/ragged_dot/group_sizes.h"

#include <catch2/catch.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "ops/ragged_dot/api.h"
#include "tests/ops/bind_errors.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

json with_group_sizes(json group_sizes) {
  return {{"lhs", "bf16[1000,4]"}, {"rhs", "bf16[4,4,3]"}, {"group_sizes", std::move(group_sizes)}};
}

std::vector<int64_t> bound_sizes(const json& args) {
  return ragged_dot_op().bind(args).option("group_sizes").get<std::vector<int64_t>>();
}

}  // namespace

TEST_CASE("ragged_dot group_sizes {num_groups, total_size} are upstream's, p skews them",
          "[ragged_dot]") {
  // upstream: GroupSizes(ShapeDtypeStruct([8], int32), 100).value, and its generator with p.
  json args = with_group_sizes({{"num_groups", 8}, {"total_size", 100}});
  args["rhs"] = "bf16[8,4,3]";
  CHECK(bound_sizes(args) == std::vector<int64_t>{15, 4, 12, 13, 16, 17, 13, 10});
  const std::vector<int64_t> skewed = bound_sizes(with_group_sizes(
      {{"num_groups", 4}, {"total_size", 1000}, {"p", {0.5, 0.25, 0.125, 0.125}}}));
  CHECK(skewed == std::vector<int64_t>{473, 260, 142, 125});
  const std::vector<int64_t> seeded =
      bound_sizes(with_group_sizes({{"num_groups", 4}, {"total_size", 999}, {"seed", 3}}));
  CHECK(std::accumulate(seeded.begin(), seeded.end(), int64_t{0}) == 999);
  CHECK(seeded != bound_sizes(with_group_sizes({{"num_groups", 4}, {"total_size", 999}})));
}

TEST_CASE("ragged_dot group_sizes mappings name group_sizes in their errors", "[ragged_dot]") {
  const std::vector<json> bad = {
      {{"num_groups", 4}, {"total_size", 1001}},                                // past M
      {{"num_groups", 5}, {"total_size", 10}},                                  // not G
      {{"num_groups", 4}, {"total_size", 10}, {"total", 10}},                   // both spellings
      {{"num_groups", 4}, {"total_size", 10}, {"p", {0.5, 0.5}}},               // length
      {{"num_groups", 4}, {"total_size", 10}, {"p", {0.5, 0.5, 0.5, -0.5}}},    // negative
      {{"num_groups", 4}, {"total_size", 10}, {"p", {0.5, 0.25, 0.125, 0.1}}},  // sum
      {{"num_groups", 4}, {"total_size", 10}, {"p", {1, 0, 0, "x"}}},           // not a number
      {{"num_groups", 4}, {"total", 10}, {"p", {1, 0, 0, 0}}},  // p without total_size
      {{"num_groups", 4}, {"total_size", 2.5}},
      {{"num_groups", 4}, {"size", 10}},
      {{"num_groups", 4}, {"total_size", 10}, {"seed", -1}},
  };
  for (const json& group_sizes : bad) {
    CAPTURE(group_sizes.dump());
    CHECK(bind_error_field(ragged_dot_op(), with_group_sizes(group_sizes)) == "group_sizes");
  }
}
