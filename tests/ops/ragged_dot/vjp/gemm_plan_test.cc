// Tests for ragged_dot_vjp's GEMM plan (ops/ragged_dot/vjp/gemm_plan.h), the index math of the
// cuBLAS baseline, on the CPU: the plan run with a plain row-major GEMM (op(A), op(B) as the
// plan says) into NaN-filled outputs must pass the float64 oracle, so every element is written
// once by a zero fill or a product and every offset, stride and transpose is right.
#include "ops/ragged_dot/vjp/gemm_plan.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "backends/cpu/cpu_device.h"
#include "ops/framework/errors.h"
#include "ops/ragged_dot/vjp/api.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/ragged_dot/vjp/test_util.h"
#include "tests/support/fake_device.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

// Runs `plan` on host tensors (any float dtype, element offsets) with f64 accumulation.
void run_plan(const RaggedDotVjpGemmPlan& plan, const TensorMap& inputs, TensorMap& outputs) {
  auto tensor = [&](RaggedDotVjpTensor t) -> const Tensor& {
    const char* name = ragged_dot_vjp_tensor_name(t);
    return is_output(t) ? outputs.at(name) : inputs.at(name);
  };
  auto output = [&](RaggedDotVjpTensor t) -> Tensor& {
    REQUIRE(is_output(t));
    return outputs.at(ragged_dot_vjp_tensor_name(t));
  };
  for (const RaggedDotVjpZeros& z : plan.zeros) {
    Tensor& out = output(z.tensor);
    REQUIRE(z.offset >= 0);
    REQUIRE(z.offset + z.count <= out.num_elements());
    for (int64_t i = 0; i < z.count; ++i) out.set(z.offset + i, 0.0);
  }
  for (const RaggedDotVjpGemm& g : plan.gemms) {
    const Tensor &a = tensor(g.a), &b = tensor(g.b);
    Tensor& c = output(g.c);
    for (int64_t i = 0; i < g.m; ++i) {
      for (int64_t j = 0; j < g.n; ++j) {
        double sum = 0;
        for (int64_t l = 0; l < g.k; ++l) {
          const int64_t ai = g.a_transposed ? l * g.lda + i : i * g.lda + l;
          const int64_t bi = g.b_transposed ? j * g.ldb + l : l * g.ldb + j;
          sum += a.get(g.a_offset + ai) * b.get(g.b_offset + bi);
        }
        const int64_t ci = g.c_offset + i * g.ldc + j;
        REQUIRE(ci < c.num_elements());
        REQUIRE(std::isnan(c.get(ci)));  // written once
        c.set(ci, sum);
      }
    }
  }
}

}  // namespace

TEST_CASE("the ragged_dot_vjp GEMM plan computes both gradients on the CPU", "[ragged_dot_vjp]") {
  for (const json& args_json :
       {json{{"lhs", "f32[64,32]"},
             {"rhs", "f32[4,32,48]"},
             {"group_sizes", {0, 7, 13, 33}},
             {"dout", "f32[64,48]"}},  // an empty group and rows past the sum
        json{{"lhs", "bf16[50,40]"},
             {"rhs", "bf16[3,40,72]"},
             {"group_sizes", {33, 0, 7}},
             {"dout", "bf16[50,72]"}},
        json{{"lhs", "f32[60,20]"},
             {"rhs", "f32[2,20,30]"},
             {"group_offset", 1},
             {"group_sizes", {10, 20, 25, 5}},
             {"dout", "f32[60,30]"}},  // rows before the shard
        json{{"lhs", "f32[9,8]"},
             {"rhs", "f32[2,8,8]"},
             {"group_sizes", {0, 0}},
             {"dout", "f32[9,8]"}},  // nothing to multiply
        json{{"lhs", "f32[12,5]"},
             {"rhs", "f32[2,5,0]"},
             {"group_sizes", {4, 8}},
             {"dout", "f32[12,0]"}},  // N = 0: empty sums
        json{{"lhs", "f32[7,3]"},
             {"rhs", "f32[1,3,5]"},
             {"group_sizes", {7}},
             {"dout", "f32[7,5]"}}}) {
    const BoundArgs args = ragged_dot_vjp_op().bind(args_json);
    CAPTURE(args.key());
    const RaggedDotVjpProblem p = RaggedDotVjpProblem::from(args);
    const RaggedDotVjpGemmPlan plan = ragged_dot_vjp_gemm_plan(p);
    // Two products per group with rows (when N > 0), nothing for the others.
    int64_t busy = 0;
    for (int64_t rows : p.fwd.group_sizes) busy += rows > 0 && p.fwd.N > 0;
    CHECK(plan.gemms.size() == static_cast<size_t>(2 * busy));
    const TensorMap inputs = ragged_dot_vjp_op().make_inputs(args, 5);
    TensorMap outputs = ragged_dot_vjp_op().allocate_outputs(args);
    for (auto& [name, out] : outputs) {
      for (int64_t i = 0; i < out.num_elements(); ++i) {
        out.set(i, std::numeric_limits<double>::quiet_NaN());
      }
    }
    run_plan(plan, inputs, outputs);
    check_ragged_dot_vjp_outputs(args, inputs, outputs);
  }
}

TEST_CASE("the dlhs product reads rhs transposed and the drhs product lhs transposed",
          "[ragged_dot_vjp]") {
  const BoundArgs args = ragged_dot_vjp_op().bind({{"lhs", "f32[10,6]"},
                                                   {"rhs", "f32[2,6,4]"},
                                                   {"group_sizes", {3, 7}},
                                                   {"dout", "f32[10,4]"}});
  const RaggedDotVjpGemmPlan plan = ragged_dot_vjp_gemm_plan(RaggedDotVjpProblem::from(args));
  REQUIRE(plan.gemms.size() == 4);
  CHECK(plan.zeros.empty());
  const RaggedDotVjpGemm& dlhs = plan.gemms[2];  // group 1: rows 3-9
  CHECK((dlhs.m == 7 && dlhs.n == 6 && dlhs.k == 4));
  CHECK((dlhs.a == RaggedDotVjpTensor::kDout && dlhs.a_offset == 3 * 4 && !dlhs.a_transposed));
  CHECK((dlhs.b == RaggedDotVjpTensor::kRhs && dlhs.b_offset == 6 * 4 && dlhs.b_transposed));
  CHECK((dlhs.c == RaggedDotVjpTensor::kDlhs && dlhs.c_offset == 3 * 6 && dlhs.ldc == 6));
  const RaggedDotVjpGemm& drhs = plan.gemms[3];
  CHECK((drhs.m == 6 && drhs.n == 4 && drhs.k == 7));
  CHECK((drhs.a == RaggedDotVjpTensor::kLhs && drhs.a_offset == 3 * 6 && drhs.a_transposed));
  CHECK((drhs.b == RaggedDotVjpTensor::kDout && drhs.b_offset == 3 * 4 && !drhs.b_transposed));
  CHECK((drhs.c == RaggedDotVjpTensor::kDrhs && drhs.c_offset == 6 * 4 && drhs.ldc == 4));
}

TEST_CASE("cublas ragged_dot_vjp runs on CUDA devices only, and says why not elsewhere",
          "[ragged_dot_vjp][cuda]") {
  const Implementation& cublas = ragged_dot_vjp_op().implementation("cublas");
  CHECK(cublas.is_vendor());
  CHECK(cublas.backend() == "cuda");
  const Support on_host = cublas.supported_on(cpu::host_device());
  CHECK_FALSE(on_host.ok);
  CHECK_FALSE(on_host.reason.empty());
  // Its checks, on a stand-in CUDA device: one dtype for all three operands, no f64.
  const testing::FakeDevice gpu("cuda");
  const BoundArgs plain = ragged_dot_vjp_op().bind(
      {{"lhs", "bf16[8,4]"}, {"rhs", "bf16[1,4,4]"}, {"group_sizes", {8}}, {"dout", "bf16[8,4]"}});
  CHECK_NOTHROW(check_args(cublas, plain, gpu));
  const BoundArgs mixed = ragged_dot_vjp_op().bind({{"lhs", "bf16[8,4]"},
                                                    {"rhs", "bf16[1,4,4]"},
                                                    {"preferred_element_type", "f32"},
                                                    {"group_sizes", {8}},
                                                    {"dout", "f32[8,4]"}});
  CHECK_THROWS_WITH(check_args(cublas, mixed, gpu), Catch::StartsWith("cublas:"));
  const BoundArgs f64 = ragged_dot_vjp_op().bind(
      {{"lhs", "f64[8,4]"}, {"rhs", "f64[1,4,4]"}, {"group_sizes", {8}}, {"dout", "f64[8,4]"}});
  CHECK_THROWS_WITH(check_args(cublas, f64, gpu), Catch::Contains("f32, bf16 and f16"));
}
