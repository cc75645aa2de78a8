// Tensor specs from hostile files: extents and ranks whose counts overflow are refused when they
// are parsed or bound, before anything is allocated.
#include "ops/framework/tensor.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "ops/framework/checked_math.h"
#include "ops/framework/errors.h"
#include "ops/registry.h"

using namespace tokamax;
using Catch::Contains;
using nlohmann::json;

TEST_CASE("checked_mul and checked_add refuse overflow and negative operands", "[tensor]") {
  CHECK(checked_mul(int64_t{1} << 31, int64_t{1} << 31, "x") == int64_t{1} << 62);
  CHECK_THROWS_WITH(checked_mul(int64_t{1} << 32, int64_t{1} << 32, "the size"),
                    Contains("the size overflows 64 bits (4294967296 * 4294967296)"));
  CHECK_THROWS_AS(checked_mul(-1, 2, "x"), InvalidArgument);
  CHECK(checked_add(INT64_MAX - 1, 1, "x") == INT64_MAX);
  CHECK_THROWS_AS(checked_add(INT64_MAX, 1, "x"), InvalidArgument);
}

TEST_CASE("a tensor spec whose size overflows is refused when parsed", "[tensor]") {
  CHECK(parse_tensor_spec("f32[1073741824,1073741824]").checked_size_bytes() == int64_t{1} << 62);
  // 2^62 elements of 4 bytes: the element count fits, the byte count does not.
  CHECK_THROWS_WITH(parse_tensor_spec("f32[4611686018427387904,4]"),
                    Contains("the size of f32[4611686018427387904,4] overflows 64 bits"));
  CHECK_THROWS_WITH(parse_tensor_spec("f32[4294967296,4294967296]"), Contains("overflows"));
  CHECK_THROWS_WITH(parse_tensor_spec("bf16[9223372036854775807,9223372036854775807]"),
                    Contains("overflows"));
  // One extent past int64.
  CHECK_THROWS_WITH(parse_tensor_spec("f32[9223372036854775808]"), Contains("malformed dimension"));
  // Zero anywhere: an empty tensor, whatever the other extents.
  CHECK(parse_tensor_spec("f32[0,9223372036854775807]").checked_size_bytes() == 0);
}

TEST_CASE("a tensor spec with thousands of dimensions is refused, quoted short", "[tensor]") {
  std::string many = "f32[1";
  for (int i = 0; i < 5000; ++i) many += ",1";
  many += "]";
  try {
    parse_tensor_spec(many);
    FAIL("5001 dimensions parsed");
  } catch (const InvalidArgument& e) {
    CHECK_THAT(e.what(), Contains("has more than 16 dimensions"));
    CHECK(std::string(e.what()).size() < 300);
  }
  std::string ok = "f32[1";
  for (int i = 1; i < 16; ++i) ok += ",1";
  CHECK(parse_tensor_spec(ok + "]").rank() == 16);
}

TEST_CASE("binding refuses outputs and group sums that overflow, naming the argument", "[tensor]") {
  const Op& ragged_dot = find_op("ragged_dot");
  // Each input fits; the output [M, N] = 2^40 x 2^40 does not.
  try {
    ragged_dot.bind({{"lhs", "f32[1099511627776,1]"}, {"rhs", "f32[1,1,1099511627776]"}});
    FAIL("an output of 2^80 elements bound");
  } catch (const InvalidArgument& e) {
    CHECK(e.field() == "out");
    CHECK_THAT(e.what(), Contains("ragged_dot: out the size of f32[1099511627776,1099511627776] "
                                  "overflows 64 bits"));
  }
  // Group sizes whose sum passes int64.
  try {
    ragged_dot.bind({{"lhs", "f32[8,4]"},
                     {"rhs", "f32[2,4,4]"},
                     {"group_sizes", json::array({INT64_MAX, INT64_MAX})}});
    FAIL("group sizes summing past int64 bound");
  } catch (const InvalidArgument& e) {
    CHECK(e.field() == "group_sizes");
    CHECK_THAT(e.what(), Contains("the sum of group_sizes overflows 64 bits"));
  }
  // More groups than any layer has, even with empty experts.
  CHECK_THROWS_WITH(ragged_dot.bind({{"lhs", "f32[8,0]"}, {"rhs", "f32[2000000,0,0]"}}),
                    Contains("2000000 groups (group_offset + G); at most 1048576"));
  CHECK_THROWS_WITH(
      ragged_dot.bind({{"lhs", "f32[8,4]"}, {"rhs", "f32[2,4,4]"}, {"group_offset", INT64_MAX}}),
      Contains("group_offset + G overflows 64 bits"));
}

TEST_CASE("a view shares its tensor's buffer from an offset and must fit inside it", "[tensor]") {
  Tensor base(parse_tensor_spec("f32[4,3]"));
  for (int64_t i = 0; i < base.num_elements(); ++i) base.set(i, static_cast<double>(i));
  Tensor row = base.view(parse_tensor_spec("f32[2,3]"), 2 * 3 * sizeof(float));
  CHECK(row.get(0) == 6.0);
  CHECK(row.get(5) == 11.0);
  row.set(1, -1.0);
  CHECK(base.get(7) == -1.0);
  {
    const Tensor kept = base.view(parse_tensor_spec("f32[3]"), 0);
    base = Tensor();  // the view keeps the buffer alive
    CHECK(kept.get(2) == 2.0);
  }
  Tensor other(parse_tensor_spec("bf16[8]"));
  CHECK_THROWS_WITH(other.view(parse_tensor_spec("bf16[5]"), 8), Contains("does not fit"));
  CHECK_THROWS_WITH(other.view(parse_tensor_spec("bf16[1]"), 17), Contains("does not fit"));
  CHECK_NOTHROW(other.view(parse_tensor_spec("bf16[0]"), 16));
}
