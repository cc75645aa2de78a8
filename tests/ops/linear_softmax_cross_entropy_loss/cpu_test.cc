// Tests for the cpu linear_softmax_cross_entropy_loss: every config family against the float64
// oracle, the bound's teeth (perturbed outputs fail), labels, config errors, determinism.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "backends/cpu/cpu_device.h"
#include "ops/framework/errors.h"
#include "ops/framework/numerics.h"
#include "ops/linear_softmax_cross_entropy_loss/api.h"
#include "ops/linear_softmax_cross_entropy_loss/cpu_config.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/linear_softmax_cross_entropy_loss/test_helpers.h"
#include "tests/tile_modes.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

Comparison compare(const BoundArgs& args, const TensorMap& inputs, const Tensor& out) {
  const auto& op = linear_softmax_cross_entropy_loss_op();
  return compare_to_oracle(out, lsce_full_oracle(args, inputs), op.error_model(args));
}

bool has_native_bf16() { return cpu::host_cpu().has("avx512_bf16"); }

}  // namespace

TEST_CASE("lsce cpu matches the oracle across tiles, chunks, splits and threads", "[lsce]") {
  const auto& op = linear_softmax_cross_entropy_loss_op();
  for (const BoundArgs& args : {lsce_args("f32[37,48]", "f32[48,1000]", "none"),
                                lsce_args("bf16[20,96]", "bf16[96,517]", "mean"),
                                lsce_args("f16[9,40]", "bf16[40,260]", "sum"),
                                lsce_args("f32[1,16]", "f32[16,3]", "none")}) {
    const TensorMap inputs = op.make_inputs(args, 11);
    for (int chunk : {16, 100, 512}) {
      for (int tile_b : {1, 5, 256}) {
        for (int splits : {0, 1, 3}) {
          json config = {{"chunk_v", chunk}, {"tile_b", tile_b}, {"v_splits", splits}};
          CAPTURE(args.key(), config.dump());
          const Comparison c = compare(args, inputs, run_lsce(args, inputs, "cpu", config));
          CAPTURE(c.max_abs_error, c.bound);
          CHECK(judge(c) == Disposition::kPassed);
        }
      }
    }
    const Comparison heuristic = compare(args, inputs, run_lsce(args, inputs, "cpu"));
    CHECK(judge(heuristic) == Disposition::kPassed);
  }
}

TEST_CASE("lsce cpu native bf16 path matches the oracle", "[lsce]") {
  if (!has_native_bf16()) {
    WARN("skipped: this CPU has no avx512_bf16");
    return;
  }
  const auto& op = linear_softmax_cross_entropy_loss_op();
  // Odd H: the last bf16 pair is padded.
  for (const BoundArgs& args : {lsce_args("bf16[30,97]", "bf16[97,700]", "none"),
                                lsce_args("bf16[300,64]", "bf16[64,1100]", "sum")}) {
    const TensorMap inputs = op.make_inputs(args, 2);
    for (int chunk : {64, 512}) {
      const json config = {{"bf16_path", "native_dot"}, {"chunk_v", chunk}};
      CAPTURE(args.key(), config.dump());
      CHECK(judge(compare(args, inputs, run_lsce(args, inputs, "cpu", config))) ==
            Disposition::kPassed);
    }
  }
}

TEST_CASE("lsce cpu AMX path matches the oracle (emulated tiles everywhere)", "[lsce][amx]") {
  const auto& op = linear_softmax_cross_entropy_loss_op();
  testing::for_each_tile_mode([&](cpu::TileMode) {
    // Odd H: the last bf16 pair and 15 pairs of the last k step are padding.
    for (const BoundArgs& args : {lsce_args("bf16[30,97]", "bf16[97,700]", "none"),
                                  lsce_args("bf16[40,64]", "bf16[64,300]", "sum")}) {
      const TensorMap inputs = op.make_inputs(args, 2);
      for (int chunk : {64, 512}) {
        const json config = {{"bf16_path", "amx"}, {"chunk_v", chunk}};
        CAPTURE(args.key(), config.dump());
        CHECK(judge(compare(args, inputs, run_lsce(args, inputs, "cpu", config))) ==
              Disposition::kPassed);
      }
    }
  });
}

TEST_CASE("lsce bound has teeth: perturbed or wrong outputs fail", "[lsce]") {
  const auto& op = linear_softmax_cross_entropy_loss_op();
  for (const std::string reduction : {"none", "mean"}) {
    const BoundArgs args = lsce_args("bf16[24,128]", "bf16[128,900]", reduction);
    const TensorMap inputs = op.make_inputs(args, 4);
    const OracleSample oracle = lsce_full_oracle(args, inputs);
    const ErrorModel model = op.error_model(args);
    Tensor out = run_lsce(args, inputs, "cpu");
    REQUIRE(judge(compare_to_oracle(out, oracle, model)) == Disposition::kPassed);
    // Element 0 moved by twice its bound.
    const double bound = error_bound(model, oracle.value[0], oracle.magnitude[0]);
    Tensor perturbed(out.spec());
    for (int64_t i = 0; i < out.num_elements(); ++i) perturbed.set(i, out.get(i));
    perturbed.set(0, out.get(0) + 2.0 * bound);
    CAPTURE(reduction, bound, oracle.value[0]);
    CHECK(judge(compare_to_oracle(perturbed, oracle, model)) == Disposition::kFailed);
    // A plausible bug: every label off by one class.
    TensorMap shifted = op.make_inputs(args, 4);
    int32_t* labels = shifted.at("labels").data<int32_t>();
    for (int i = 0; i < 24; ++i) labels[i] = (labels[i] + 1) % 900;
    const Tensor wrong = run_lsce(args, shifted, "cpu");
    CHECK(judge(compare_to_oracle(wrong, oracle, model)) == Disposition::kFailed);
  }
}

TEST_CASE("lsce cpu and reference give padding labels zero loss", "[lsce]") {
  const auto& op = linear_softmax_cross_entropy_loss_op();
  for (const char* reduction : {"none", "sum", "mean"}) {
    const BoundArgs args = lsce_args("f32[20,8]", "f32[8,64]", reduction);
    TensorMap inputs = op.make_inputs(args, 0);
    int32_t* labels = inputs.at("labels").data<int32_t>();
    labels[3] = -1;  // the usual padding
    labels[9] = 64;  // V itself
    labels[17] = 70000;
    labels[18] = std::numeric_limits<int32_t>::min();
    std::vector<int64_t> index(static_cast<size_t>(op.outputs(args)[0].spec.num_elements()));
    std::iota(index.begin(), index.end(), 0);
    const OracleSample oracle = op.oracle(args, inputs, "loss", index);
    for (const char* impl : {"cpu", "reference", "onednn"}) {
      CAPTURE(reduction, impl);
      const Tensor loss = run_lsce(args, inputs, impl);
      CHECK(judge(compare_to_oracle(loss, oracle, op.error_model(args))) == Disposition::kPassed);
      if (std::string(reduction) == "none") {
        for (int i : {3, 9, 17, 18}) CHECK(loss.get(i) == 0.0);
      }
    }
  }
}

TEST_CASE("lsce cpu config errors name the field", "[lsce]") {
  const auto& cpu = linear_softmax_cross_entropy_loss_op().implementation("cpu");
  auto field_of = [&](const BoundArgs& args, const json& config) -> std::string {
    try {
      check_config_json(cpu, args, cpu.canonical_config(config));
    } catch (const InvalidArgument& e) {
      return e.field();
    }
    return "<no error>";
  };
  const BoundArgs f32 = lsce_args("f32[8,16]", "f32[16,100]", "sum");
  CHECK(field_of(f32, json::object()) == "<no error>");
  CHECK(field_of(f32, {{"chunk_v", 0}}) == "chunk_v");
  CHECK(field_of(f32, {{"tile_b", -1}}) == "tile_b");
  CHECK(field_of(f32, {{"v_splits", -2}}) == "v_splits");
  CHECK(field_of(f32, {{"bf16_path", "fast"}}) == "bf16_path");
  CHECK(field_of(f32, {{"bf16_path", "native_dot"}}) == "bf16_path");  // f32 inputs
  CHECK(field_of(f32, {{"mr", 14}}) == "mr");                          // nr missing
  CHECK(field_of(f32, {{"mr", 13}, {"nr", 32}}) == "mr");              // no such micro-kernel
  CHECK(field_of(f32, {{"num_threads", 100000}}) == "num_threads");
  CHECK(field_of(f32, {{"chunk", 5}}) == "chunk");  // unknown field
}

TEST_CASE("lsce cpu autotuning configs are valid and pass", "[lsce]") {
  const auto& op = linear_softmax_cross_entropy_loss_op();
  const auto& cpu = op.implementation("cpu");
  const BoundArgs args = lsce_args("bf16[16,64]", "bf16[64,333]", "none");
  const TensorMap inputs = op.make_inputs(args, 9);
  const auto configs = autotuning_configs_json(cpu, args, cpu::host_device());
  REQUIRE(configs.size() > 5);
  for (const json& config : configs) {
    CAPTURE(config.dump());
    CHECK(judge(compare(args, inputs, run_lsce(args, inputs, "cpu", config))) ==
          Disposition::kPassed);
  }
}

TEST_CASE("lsce cpu is deterministic across thread counts", "[lsce]") {
  const auto& op = linear_softmax_cross_entropy_loss_op();
  const BoundArgs args = lsce_args("f32[40,32]", "f32[32,2000]", "none");
  const TensorMap inputs = op.make_inputs(args, 1);
  const json one = {{"chunk_v", 64}, {"v_splits", 5}, {"num_threads", 1}};
  const json all = {{"chunk_v", 64}, {"v_splits", 5}, {"num_threads", 0}};
  const Tensor a = run_lsce(args, inputs, "cpu", one);
  const Tensor b = run_lsce(args, inputs, "cpu", all);
  for (int i = 0; i < 40; ++i) CHECK(a.get(i) == b.get(i));
}

TEST_CASE("lsce empty extents: no rows, no hidden size, one class", "[lsce]") {
  const auto& op = linear_softmax_cross_entropy_loss_op();
  for (const char* impl : {"cpu", "reference"}) {
    INFO(impl);
    // B = 0: the mean of no rows is 0 here (no division by zero), none gives an empty vector.
    const BoundArgs no_rows = lsce_args("f32[0,8]", "f32[8,9]", "mean");
    CHECK(run_lsce(no_rows, op.make_inputs(no_rows, 0), impl).get(0) == 0.0);
    // H = 0: every logit is 0, so each loss is log V.
    const BoundArgs no_hidden = lsce_args("f32[5,0]", "f32[0,9]", "none");
    const Tensor flat = run_lsce(no_hidden, op.make_inputs(no_hidden, 0), impl);
    for (int i = 0; i < 5; ++i) CHECK(flat.get(i) == Approx(std::log(9.0)).epsilon(1e-6));
    // V = 1: the only class is certain, the loss is exactly 0.
    const BoundArgs one_class = lsce_args("bf16[5,8]", "bf16[8,1]", "sum");
    CHECK(run_lsce(one_class, op.make_inputs(one_class, 0), impl).get(0) == 0.0);
  }
}

TEST_CASE("lsce cpu and reference write the residual lse within its bound, and a shifted lse fails",
          "[lsce]") {
  const auto& op = linear_softmax_cross_entropy_loss_op();
  for (const std::string reduction : {"none", "mean"}) {
    const BoundArgs args = op.bind({{"x", "bf16[40,64]"},
                                    {"w", "bf16[64,900]"},
                                    {"reduction", reduction},
                                    {"padded_labels", 0.25},
                                    {"return_residuals", true}});
    REQUIRE(op.outputs(args).size() == 2);
    CHECK(op.outputs(args)[1].name == "lse");
    CHECK(op.outputs(args)[1].spec.to_string() == "f32[40]");
    const TensorMap inputs = op.make_inputs(args, 6);
    std::vector<int64_t> rows(40);
    std::iota(rows.begin(), rows.end(), 0);
    const OracleSample oracle = op.oracle(args, inputs, "lse", rows);
    const ErrorModel model = op.error_model(args);
    for (const char* impl : {"cpu", "reference"}) {
      CAPTURE(reduction, impl);
      const Implementation& implementation = op.implementation(impl);
      TensorMap outputs = op.allocate_outputs(args);
      run_json(implementation, args,
               heuristics_config_json(implementation, args, cpu::host_device()), inputs, outputs);
      const Tensor& lse = outputs.at("lse");
      CHECK(judge(compare_to_oracle(lse, oracle, model)) == Disposition::kPassed);
      // The loss beside it is unchanged by the extra output.
      CHECK(judge(compare(args, inputs, outputs.at("loss"))) == Disposition::kPassed);
      // lse is a log: a value off by 1e-3 (a lost term of the sum) is caught.
      Tensor shifted(lse.spec());
      for (int64_t i = 0; i < lse.num_elements(); ++i) shifted.set(i, lse.get(i));
      shifted.set(7, lse.get(7) + 1e-3);
      CHECK(judge(compare_to_oracle(shifted, oracle, model)) == Disposition::kFailed);
    }
  }
  // Only a bool.
  CHECK_THROWS_AS(op.bind({{"x", "f32[2,3]"}, {"w", "f32[3,4]"}, {"return_residuals", "yes"}}),
                  InvalidArgument);
  // The default stays out of the canonical args.
  CHECK_FALSE(op.bind({{"x", "f32[2,3]"}, {"w", "f32[3,4]"}, {"return_residuals", false}})
                  .has("return_residuals"));
}
