// Tests for linear_softmax_cross_entropy_loss's and its VJP's float64 oracles: the blocked method
// (logits chunk by chunk of V, an online log-sum-exp) against the plain loop, every reduction,
// padding, vocabularies past one chunk.
#include "ops/linear_softmax_cross_entropy_loss/oracle.h"

#include <catch2/catch.hpp>
#include <string>

#include "ops/linear_softmax_cross_entropy_loss/api.h"
#include "ops/linear_softmax_cross_entropy_loss/vjp/api.h"
#include "tests/ops/linear_softmax_cross_entropy_loss/vjp/test_util.h"
#include "tests/ops/oracle_methods.h"

using namespace tokamax;
using nlohmann::json;

namespace {

void check_forward(const json& args_json) {
  CAPTURE(args_json.dump());
  const LinearSoftmaxCrossEntropyLossOp& op = linear_softmax_cross_entropy_loss_op();
  const BoundArgs args = op.bind(args_json);
  const TensorMap inputs = op.make_inputs(args, 5);
  testing::check_oracle_methods(
      op, args, [&](const std::string&, std::span<const int64_t> index, OracleMethod method) {
        return linear_softmax_cross_entropy_oracle(args, inputs, index, method);
      });
}

void check_vjp(const json& args_json) {
  CAPTURE(args_json.dump());
  const LinearSoftmaxCrossEntropyLossVjpOp& op = linear_softmax_cross_entropy_loss_vjp_op();
  const BoundArgs args = op.bind(args_json);
  const TensorMap inputs = op.make_inputs(args, 6);
  testing::check_oracle_methods(
      op, args,
      [&](const std::string& output, std::span<const int64_t> index, OracleMethod method) {
        return linear_softmax_cross_entropy_vjp_oracle(args, inputs, output, index, method);
      });
}

}  // namespace

TEST_CASE("linear_softmax_cross_entropy_loss blocked oracle matches the plain loop",
          "[linear_softmax_cross_entropy_loss][oracle]") {
  // V = 4100: three chunks of logits, the last one short; padded rows.
  check_forward(
      {{"x", "f32[30,40]"}, {"w", "f32[40,4100]"}, {"reduction", "none"}, {"padded_labels", 0.3}});
  check_forward({{"x", "bf16[16,64]"}, {"w", "bf16[64,777]"}, {"reduction", "mean"}});
  check_forward(
      {{"x", "f16[4,48]"}, {"w", "f32[48,300]"}, {"reduction", "sum"}, {"padded_labels", 0.25}});
}

TEST_CASE("linear_softmax_cross_entropy_loss_vjp blocked oracle matches the plain loop",
          "[linear_softmax_cross_entropy_loss_vjp][oracle]") {
  check_vjp(testing::lsce_vjp_json("f32[24,40]", "f32[40,2100]", "none", 0.3));
  check_vjp(testing::lsce_vjp_json("bf16[16,33]", "bf16[33,300]", "mean"));
  check_vjp(testing::lsce_vjp_json("f16[5,20]", "f16[20,70]", "sum", 0.25));
}
