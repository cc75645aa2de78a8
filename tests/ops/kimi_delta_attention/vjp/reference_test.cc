// Tests of kimi_delta_attention_vjp's oracle and reference: the oracle's gradients against
// central differences of the forward's float64 oracle (every gate form, l2 normalization or
// not, segments, initial state and dfinal_state); the reference against the oracle, whose bound
// fails a gradient computed with a decay 2% off at T = 1024; bind names bad arguments.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "ops/framework/numerics.h"
#include "ops/framework/vjp.h"
#include "ops/kimi_delta_attention/vjp/api.h"
#include "tests/ops/bind_errors.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/kimi_delta_attention/test_util.h"
#include "tests/ops/oracle_run.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

const KdaVjpOp& op() { return kimi_delta_attention_vjp_op(); }

// Small f32 cases covering every input's gradient.
std::vector<json> fd_cases() {
  json softplus = kda_args("f32", 1, 2, 10, 4, 3);
  softplus.update({{"dout", "f32[1,2,10,3]"},
                   {"a_log", "f32[1]"},
                   {"delta_time_bias", "f32[4]"},
                   {"use_gate_in_kernel", true},
                   {"use_qk_l2norm", true},
                   {"scale", 0.7},
                   {"initial_state", "f32[2,1,1,4,3]"},
                   {"output_final_state", true},
                   {"dfinal_state", "f32[2,1,1,4,3]"}});
  json bounded = kda_args("f32", 2, 1, 12, 3, 4);
  bounded.update({{"dout", "f32[2,1,12,4]"},
                  {"a_log", "f32[2]"},
                  {"use_gate_in_kernel", true},
                  {"lower_bound", -2.0},
                  {"segment_ids", "i32[1,12]"},
                  {"max_num_segments", 2}});
  json raw = kda_args("f32", 1, 1, 9, 3, 2);
  raw.update({{"dout", "f32[1,1,9,2]"},
              {"initial_state", "f32[1,1,1,3,2]"},
              {"output_final_state", true}});
  return {softplus, bounded, raw};
}

// L = sum dout . out + sum dfinal_state . final_state from the forward's float64 oracle.
double loss(const BoundArgs& fwd_args, const TensorMap& inputs) {
  const Op& fwd = kimi_delta_attention_op();
  double total = 0.0;
  for (const TensorDecl& decl : fwd.outputs(fwd_args)) {
    const std::string cot = vjp_name(decl.name);
    if (!inputs.contains(cot)) continue;
    std::vector<int64_t> index(static_cast<size_t>(decl.spec.num_elements()));
    std::iota(index.begin(), index.end(), 0);
    const OracleSample y = fwd.oracle(fwd_args, inputs, decl.name, index);
    for (size_t e = 0; e < index.size(); ++e) total += y.value[e] * inputs.at(cot).get(index[e]);
  }
  return total;
}

}  // namespace

TEST_CASE("kimi_delta_attention_vjp oracle matches central differences of the forward",
          "[kda_vjp]") {
  for (const json& c : fd_cases()) {
    const BoundArgs args = op().bind(c);
    BoundArgs fwd_args = primal_args(kimi_delta_attention_op(), args, op().cotangents());
    fwd_args.args.erase("dfinal_state");
    const TensorMap inputs = op().make_inputs(args, 11);
    for (const TensorDecl& decl : op().outputs(args)) {
      const std::string input = decl.name.substr(1);  // "dquery" -> "query"
      std::vector<int64_t> index(static_cast<size_t>(decl.spec.num_elements()));
      std::iota(index.begin(), index.end(), 0);
      const OracleSample grad = op().oracle(args, inputs, decl.name, index);
      double scale = 1e-3;
      for (const double g : grad.value) scale = std::max(scale, std::fabs(g));
      for (const int64_t e : index) {
        // Perturbed copies (tensors share buffers when copied); the step actually stored.
        TensorMap plus = inputs, minus = inputs;
        Tensor xp(inputs.at(input).spec()), xm(inputs.at(input).spec());
        for (int64_t i = 0; i < xp.num_elements(); ++i) {
          xp.set(i, inputs.at(input).get(i));
          xm.set(i, inputs.at(input).get(i));
        }
        const double x = inputs.at(input).get(e), h = 1e-3 * std::max(1.0, std::fabs(x));
        xp.set(e, x + h);
        xm.set(e, x - h);
        const double step = xp.get(e) - xm.get(e);
        plus.erase(input);
        plus.emplace(input, std::move(xp));
        minus.erase(input);
        minus.emplace(input, std::move(xm));
        const double fd = (loss(fwd_args, plus) - loss(fwd_args, minus)) / step;
        CAPTURE(args.key(), decl.name, e, fd, grad.value[e]);
        CHECK(std::fabs(fd - grad.value[e]) <= 1e-4 * scale);
      }
    }
  }
}

TEST_CASE("kimi_delta_attention_vjp reference passes the oracle, whose bound catches a wrong decay",
          "[kda_vjp]") {
  std::vector<json> cases = fd_cases();
  json bf16 = kda_args("bf16", 2, 2, 40, 16, 24);
  bf16.update({{"dout", "bf16[2,2,40,24]"}, {"use_qk_l2norm", true}});
  cases.push_back(bf16);
  for (const json& c : cases) {
    const BoundArgs args = op().bind(c);
    const TensorMap inputs = op().make_inputs(args, 3);
    for (const TensorDecl& decl : op().outputs(args)) {
      CAPTURE(args.key(), decl.name);
      CHECK(judge(run_against_oracle(op(), "reference", args, json::object(), inputs, args,
                                     decl.name)) == Disposition::kPassed);
    }
  }
  // T = 1024: the bound holds over the whole sweep, and gradients computed with a decay 2% off
  // (the gate, a log-decay, scaled by 1.02 in the inputs the reference runs on) fail it.
  json long_case = kda_args("f32", 1, 1, 1024, 8, 8);
  long_case.update({{"dout", "f32[1,1,1024,8]"}, {"use_qk_l2norm", true}});
  const BoundArgs args = op().bind(long_case);
  const TensorMap inputs = op().make_inputs(args, 5);
  TensorMap wrong = inputs;
  Tensor gate(inputs.at("gate").spec());
  for (int64_t e = 0; e < gate.num_elements(); ++e) gate.set(e, 1.02 * inputs.at("gate").get(e));
  wrong.erase("gate");
  wrong.emplace("gate", std::move(gate));
  TensorMap right_out = op().allocate_outputs(args), wrong_out = op().allocate_outputs(args);
  run_json(op().implementation("reference"), args, json::object(), inputs, right_out);
  run_json(op().implementation("reference"), args, json::object(), wrong, wrong_out);
  for (const char* name : {"dquery", "dkey", "dvalue", "dgate", "dbeta"}) {
    CAPTURE(name);
    CHECK(judge(compare_whole_output(op(), args, inputs, right_out.at(name), name)) ==
          Disposition::kPassed);
    CHECK(judge(compare_whole_output(op(), args, inputs, wrong_out.at(name), name)) ==
          Disposition::kFailed);
  }
}

TEST_CASE("kimi_delta_attention_vjp bind names each bad argument", "[kda_vjp]") {
  json ok = kda_args("f32", 2, 1, 8, 4, 4);
  ok["dout"] = "f32[2,1,8,4]";
  auto with = [&](const char* key, json value) {
    json args = ok;
    args[key] = std::move(value);
    return args;
  };
  CHECK(bind_error_field(op(), ok) == "<no error>");
  json no_dout = ok;
  no_dout.erase("dout");
  CHECK(bind_error_field(op(), no_dout) == "dout");
  CHECK(bind_error_field(op(), with("dout", "f32[2,1,8,5]")) == "dout");
  CHECK(bind_error_field(op(), with("key", "f32[2,1,8,5]")) == "key");
  // dfinal_state only with output_final_state, of final_state's spec.
  CHECK(bind_error_field(op(), with("dfinal_state", "f32[1,1,2,4,4]")) == "dfinal_state");
  json final_state = with("output_final_state", true);
  final_state["dfinal_state"] = "f32[1,1,2,4,4]";
  CHECK(bind_error_field(op(), final_state) == "<no error>");
  final_state["dfinal_state"] = "bf16[1,1,2,4,4]";
  CHECK(bind_error_field(op(), final_state) == "dfinal_state");
  final_state["dfinal_state"] = 3;
  CHECK(bind_error_field(op(), final_state) == "dfinal_state");
  CHECK(bind_error_field(op(), with("return_residuals", true)) == "return_residuals");
}
