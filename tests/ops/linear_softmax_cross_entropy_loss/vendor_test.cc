// Tests for the composite baselines of linear_softmax_cross_entropy_loss (onednn, mkl).
#include <catch2/catch.hpp>
#include <string>

#include "backends/cpu/cpu_device.h"
#include "ops/framework/errors.h"
#include "ops/framework/numerics.h"
#include "ops/linear_softmax_cross_entropy_loss/api.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/linear_softmax_cross_entropy_loss/test_helpers.h"

using namespace tokamax;
using namespace tokamax::testing;

TEST_CASE("lsce vendor composites match the oracle or say why not", "[lsce][mkl]") {
  const auto& op = linear_softmax_cross_entropy_loss_op();
  for (const std::string name : {"onednn", "mkl"}) {
    const Implementation& vendor = op.implementation(name);
    const Support support = vendor.supported_on(cpu::host_device());
    if (!support.ok) {
      WARN(name << " unavailable: " << support.reason);
      continue;
    }
    for (const BoundArgs& args : {lsce_args("f32[33,48]", "f32[48,700]", "none"),
                                  lsce_args("bf16[16,64]", "bf16[64,1025]", "mean"),
                                  lsce_args("f32[1,8]", "f32[8,5]", "sum")}) {
      CAPTURE(name, args.key());
      const TensorMap inputs = op.make_inputs(args, 6);
      try {
        check_args(vendor, args);
      } catch (const NotImplemented& e) {
        WARN(name << " unsupported here: " << e.what());
        continue;
      }
      // Twice: the second call reuses the logits buffer.
      for (int call = 0; call < 2; ++call) {
        const Tensor out = run_lsce(args, inputs, name);
        const Comparison c =
            compare_to_oracle(out, lsce_full_oracle(args, inputs), op.error_model(args));
        CAPTURE(call, c.max_abs_error, c.bound);
        CHECK(judge(c) == Disposition::kPassed);
      }
    }
  }
}

TEST_CASE("lsce mkl rejects what its composite does not wire, with a reason", "[lsce][mkl]") {
  const Implementation& mkl = linear_softmax_cross_entropy_loss_op().implementation("mkl");
  if (!mkl.supported_on(cpu::host_device()).ok) return;
  CHECK_THROWS_WITH(check_args(mkl, lsce_args("f32[4,8]", "bf16[8,16]", "sum")),
                    Catch::Contains("x is f32 but w is bf16"));
  CHECK_THROWS_WITH(check_args(mkl, lsce_args("f16[4,8]", "f16[8,16]", "sum")),
                    Catch::StartsWith("mkl: f16 inputs"));
}

TEST_CASE("lsce onednn rejects mixed and f16 inputs with a reason", "[lsce]") {
  const Implementation& onednn = linear_softmax_cross_entropy_loss_op().implementation("onednn");
  CHECK_THROWS_WITH(check_args(onednn, lsce_args("f32[4,8]", "bf16[8,16]", "sum")),
                    Catch::Contains("x is f32 but w is bf16"));
  CHECK_THROWS_AS(check_args(onednn, lsce_args("f16[4,8]", "f16[8,16]", "sum")), NotImplemented);
  CHECK_THROWS_AS(check_args(onednn, lsce_args("f64[4,8]", "f64[8,16]", "sum")), NotImplemented);
}
