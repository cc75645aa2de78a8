// Tests of kimi_delta_attention: the reference against the float64 oracle (every gate form,
// l2norm on and off, segments, initial and final state, a recurrence of T = 4096), the oracle's
// bound tight enough to fail a decay 2% off or a segment's state mixed with another's over that
// recurrence, and bind's errors named.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "ops/framework/numerics.h"
#include "ops/kimi_delta_attention/api.h"
#include "tests/ops/bind_errors.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/kimi_delta_attention/test_util.h"
#include "tests/ops/oracle_run.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

const KdaOp& op() { return kimi_delta_attention_op(); }

}  // namespace

TEST_CASE("kimi_delta_attention reference passes the oracle, whose bound catches a wrong decay",
          "[kda]") {
  std::vector<json> cases;
  json raw = kda_args("f32", 2, 2, 33, 8, 12);
  raw["output_final_state"] = true;
  cases.push_back(raw);
  json gated = kda_args("bf16", 2, 1, 40, 16, 16);
  gated.update({{"a_log", "f32[2]"},
                {"delta_time_bias", "f32[32]"},
                {"use_gate_in_kernel", true},
                {"use_qk_l2norm", true}});
  cases.push_back(gated);
  json bounded = gated;
  bounded["lower_bound"] = -3.0;
  cases.push_back(bounded);
  json segments = kda_args("f32", 1, 2, 70, 8, 8);
  segments.update({{"segment_ids", "i32[2,70]"},
                   {"max_num_segments", 3},
                   {"initial_state", "f32[2,3,1,8,8]"},
                   {"output_final_state", true},
                   {"use_qk_l2norm", true}});
  cases.push_back(segments);
  for (const json& c : cases) {
    const BoundArgs args = op().bind(c);
    const TensorMap inputs = op().make_inputs(args, 3);
    for (const TensorDecl& decl : op().outputs(args)) {
      CAPTURE(args.key(), decl.name);
      CHECK(judge(run_against_oracle(op(), "reference", args, json::object(), inputs, args,
                                     decl.name)) == Disposition::kPassed);
    }
  }
  // T = 4096: the bound holds over the whole recurrence, and a decay 2% off fails it (the
  // gate, a log-decay, scaled by 1.02 in the inputs the reference runs on).
  json long_case = kda_args("f32", 1, 1, 4096, 8, 8);
  long_case.update({{"use_qk_l2norm", true}, {"output_final_state", true}});
  const BoundArgs args = op().bind(long_case);
  const TensorMap inputs = op().make_inputs(args, 5);
  TensorMap outputs = op().allocate_outputs(args);
  run_json(op().implementation("reference"), args, json::object(), inputs, outputs);
  for (const char* name : {"out", "final_state"}) {
    CAPTURE(name);
    CHECK(judge(compare_whole_output(op(), args, inputs, outputs.at(name), name)) ==
          Disposition::kPassed);
  }
  // (Tensors share their buffers when copied: the changed inputs are new tensors.)
  TensorMap wrong = inputs;
  Tensor gate(inputs.at("gate").spec());
  for (int64_t e = 0; e < gate.num_elements(); ++e) gate.set(e, 1.02 * inputs.at("gate").get(e));
  wrong.erase("gate");
  wrong.emplace("gate", std::move(gate));
  TensorMap wrong_out = op().allocate_outputs(args);
  run_json(op().implementation("reference"), args, json::object(), wrong, wrong_out);
  CHECK(judge(compare_whole_output(op(), args, inputs, wrong_out.at("out"), "out")) ==
        Disposition::kFailed);
  // Segments sharing one state slot (all ids 1) fail the oracle of separate slots.
  const BoundArgs seg_args = op().bind(segments);
  TensorMap seg_inputs = op().make_inputs(seg_args, 3);
  TensorMap merged = seg_inputs;
  Tensor ids(seg_inputs.at("segment_ids").spec());
  for (int64_t e = 0; e < ids.num_elements(); ++e) {
    ids.set(e, seg_inputs.at("segment_ids").get(e) > 0 ? 1.0 : 0.0);
  }
  merged.erase("segment_ids");
  merged.emplace("segment_ids", std::move(ids));
  TensorMap merged_out = op().allocate_outputs(seg_args);
  run_json(op().implementation("reference"), seg_args, json::object(), merged, merged_out);
  CHECK(judge(compare_whole_output(op(), seg_args, seg_inputs, merged_out.at("out"), "out")) ==
        Disposition::kFailed);
}

TEST_CASE("kimi_delta_attention bind names each bad argument", "[kda]") {
  const json ok = kda_args("f32", 2, 1, 8, 4, 4);
  auto with = [&](const char* key, json value) {
    json args = ok;
    args[key] = std::move(value);
    return args;
  };
  CHECK(bind_error_field(op(), ok) == "<no error>");
  CHECK(bind_error_field(op(), with("key", "f32[2,1,8,5]")) == "key");
  CHECK(bind_error_field(op(), with("value", "bf16[2,1,8,4]")) == "value");
  CHECK(bind_error_field(op(), with("beta", "f32[2,8]")) == "beta");
  CHECK(bind_error_field(op(), with("use_gate_in_kernel", true)) == "a_log");
  CHECK(bind_error_field(op(), with("a_log", "f32[2]")) == "a_log");  // without the gate flag
  json gated = with("use_gate_in_kernel", true);
  gated["a_log"] = "f32[3]";
  CHECK(bind_error_field(op(), gated) == "a_log");
  gated["a_log"] = "f32[2]";
  gated["lower_bound"] = -6.0;
  CHECK(bind_error_field(op(), gated) == "lower_bound");
  gated["lower_bound"] = -5.0;
  CHECK(bind_error_field(op(), gated) == "<no error>");
  gated["delta_time_bias"] = "f32[4]";
  CHECK(bind_error_field(op(), gated) == "delta_time_bias");
  CHECK(bind_error_field(op(), with("segment_ids", "i32[1,8]")) == "max_num_segments");
  CHECK(bind_error_field(op(), with("segment_ids", "f32[1,8]")) == "segment_ids");
  json state = with("initial_state", "f32[1,2,2,4,4]");
  CHECK(bind_error_field(op(), state) == "<no error>");
  state["max_num_segments"] = 3;
  CHECK(bind_error_field(op(), state) == "max_num_segments");
  CHECK(bind_error_field(op(), with("initial_state", "f32[1,2,2,4,5]")) == "initial_state");
  CHECK(bind_error_field(op(), with("max_num_segments", 0)) == "max_num_segments");
  CHECK(bind_error_field(op(), with("return_residuals", true)) == "return_residuals");
  CHECK(bind_error_field(op(), with("scale", "x")) == "scale");
  CHECK(bind_error_field(op(), with("alpha", 1)) == "alpha");
  // With initial_state, N is its slot count.
  const BoundArgs bound = op().bind(with("initial_state", "f32[1,3,2,4,4]"));
  CHECK(KdaProblem::from(bound).N == 3);
}
