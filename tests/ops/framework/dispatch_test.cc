// ApiCall: what an op's C++ API binds and hands to the kernel.
#include "ops/framework/dispatch.h"

#include <catch2/catch.hpp>
#include <optional>

#include "ops/framework/errors.h"
#include "tests/ops/framework/fake_impls.h"

namespace tokamax::testing {
namespace {

TEST_CASE("ApiCall binds each tensor's spec, hands its data to the kernel, skips what is unset",
          "[framework][dispatch]") {
  const FakeRaggedDot fake("fake");
  const FakeRaggedDotOp op({&fake});
  const BoundArgs args = small_ragged_dot_args();
  const TensorMap inputs = op.make_inputs(args, 7);
  const Tensor* absent = nullptr;

  ApiCall call(op);
  call.tensor("lhs", inputs.at("lhs"))
      .tensor("rhs", inputs.at("rhs"))
      .tensor("rhs_bias", absent)
      .input("group_sizes", inputs.at("group_sizes"))
      .option("group_sizes", args.option("group_sizes"))
      .option("group_offset", std::optional<int64_t>());
  const BoundArgs bound = call.bind();
  CHECK_FALSE(bound.has("rhs_bias"));
  CHECK_FALSE(bound.has("group_offset"));  // left to the op, not given as a null
  CHECK(bound.tensor("lhs") == inputs.at("lhs").spec());

  // {0, 0}: mode 0 (correct), no delay; the kernel read the call's lhs and rhs.
  const TensorMap outputs = call.run("fake", nlohmann::json{{"mode", 0}, {"delay_us", 0}});
  Tensor expected(outputs.at("out").spec());
  ragged_dot_reference<float>(RaggedDotProblem::from(bound), inputs.at("lhs"), inputs.at("rhs"),
                              expected);
  for (int64_t i = 0; i < expected.num_elements(); ++i) {
    REQUIRE(outputs.at("out").get(i) == expected.get(i));
  }
}

TEST_CASE("ApiCall reports a bad argument by its name before any kernel runs",
          "[framework][dispatch]") {
  const FakeRaggedDot fake("fake");
  const FakeRaggedDotOp op({&fake});
  const TensorMap inputs = op.make_inputs(small_ragged_dot_args(), 7);
  ApiCall call(op);
  call.tensor("lhs", inputs.at("lhs"))
      .tensor("rhs", inputs.at("lhs"))  // rank 2, not [G, K, N]
      .input("group_sizes", inputs.at("group_sizes"))
      .option("group_sizes", std::vector<int64_t>{10, 0, 9});
  try {
    call.run("auto", std::nullopt);
    FAIL("bound a rank-2 rhs");
  } catch (const InvalidArgument& e) {
    CHECK(e.field() == "rhs");
  }
}

}  // namespace
}  // namespace tokamax::testing
