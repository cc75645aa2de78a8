// Tests of gated_delta_rule: the reference against the float64 oracle (mixed and decode-only
// batches, padded requests and tokens, initial states or none, kernel sizes, dtypes, a
// recurrence of T = 4096), the oracle's bound tight enough to fail a decay 2% off or a conv
// weight's sign flipped, upstream's state rules checked on the outputs, and bind's errors named.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "ops/framework/numerics.h"
#include "ops/gated_delta_rule/api.h"
#include "tests/ops/bind_errors.h"
#include "tests/ops/gated_delta_rule/test_util.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/oracle_run.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

const GdnOp& op() { return gated_delta_rule_op(); }

std::vector<json> reference_cases() {
  std::vector<json> cases;
  cases.push_back(gdn_args({.dtype = "bf16",
                            .state_dtype = "bf16",
                            .lengths = {1, 1, 7, 2, 5},
                            .context = {3, 0, 0, 9, 2},
                            .n_kq = 2,
                            .n_v = 4,
                            .max_reqs = 7,
                            .pad_tokens = 3}));
  cases.push_back(gdn_args({.lengths = {1, 1, 1},
                            .context = {4, 0, 2},
                            .max_reqs = 4,
                            .pad_tokens = 2,
                            .bias = false}));  // decode only
  cases.push_back(gdn_args(
      {.dtype = "f16", .lengths = {30, 2}, .context = {0, 6}, .n_kq = 2, .d_v = 16, .W = 2}));
  return cases;
}

// A copy of `inputs` with `name` replaced by f(element index, value).
template <typename F>
TensorMap changed(const TensorMap& inputs, const std::string& name, F&& f) {
  TensorMap out = inputs;
  Tensor x(inputs.at(name).spec());  // a new buffer: copies share theirs
  for (int64_t e = 0; e < x.num_elements(); ++e) x.set(e, f(e, inputs.at(name).get(e)));
  out.erase(name);
  out.emplace(name, std::move(x));
  return out;
}

}  // namespace

TEST_CASE("gated_delta_rule reference passes the oracle, whose bound catches a wrong decay",
          "[gated_delta_rule]") {
  for (const json& c : reference_cases()) {
    const BoundArgs args = op().bind(c);
    const TensorMap inputs = op().make_inputs(args, 3);
    for (const TensorDecl& decl : op().outputs(args)) {
      CAPTURE(args.key(), decl.name);
      CHECK(judge(run_against_oracle(op(), "reference", args, json::object(), inputs, args,
                                     decl.name)) == Disposition::kPassed);
    }
  }
  // T = 4096 in one request: the bound holds over the whole recurrence; a decay 2% off (g
  // scaled by 1.02 through a_log) and one conv weight negated each fail it.
  const BoundArgs args = op().bind(gdn_args({.lengths = {4096}, .context = {5}, .n_v = 1}));
  const TensorMap inputs = op().make_inputs(args, 5);
  auto outputs_of = [&](const TensorMap& x) {
    TensorMap out = op().allocate_outputs(args);
    run_json(op().implementation("reference"), args, json::object(), x, out);
    return out;
  };
  const TensorMap right = outputs_of(inputs);
  for (const char* name : {"out", "updated_recurrent_state", "updated_conv_state"}) {
    CAPTURE(name);
    CHECK(judge(compare_whole_output(op(), args, inputs, right.at(name), name)) ==
          Disposition::kPassed);
  }
  const TensorMap decay =
      outputs_of(changed(inputs, "a_log", [](int64_t, double x) { return x + std::log(1.02); }));
  CHECK(judge(compare_whole_output(op(), args, inputs, decay.at("out"), "out")) ==
        Disposition::kFailed);
  const TensorMap conv = outputs_of(
      changed(inputs, "conv_weight", [](int64_t e, double x) { return e == 5 ? -x : x; }));
  CHECK(judge(compare_whole_output(op(), args, inputs, conv.at("out"), "out")) ==
        Disposition::kFailed);
}

TEST_CASE("gated_delta_rule keeps upstream's state rules", "[gated_delta_rule]") {
  // Requests 0 and 1 decode (request 1 without an initial state), request 2 prefills; request
  // 3 is padding with seq_len 0; slot 0 belongs to no request.
  const json c = gdn_args({.lengths = {1, 1, 4}, .context = {3, 0, 2}, .max_reqs = 4});
  const BoundArgs args = op().bind(c);
  const GdnProblem p = GdnProblem::from(args);
  CHECK(!p.decode_only());
  CHECK(p.has_initial_state(0));
  CHECK(!p.has_initial_state(1));
  CHECK(!p.has_initial_state(3));
  const TensorMap inputs = op().make_inputs(args, 7);
  TensorMap out = op().allocate_outputs(args);
  run_json(op().implementation("reference"), args, json::object(), inputs, out);
  const Tensor& state = out.at("updated_recurrent_state");
  const Tensor& old = inputs.at("recurrent_state");
  const int64_t slot = p.n_v * p.d_k * p.d_v;
  bool zeroed = true, kept = true;
  for (int64_t e = 0; e < slot; ++e) {
    zeroed = zeroed && state.get(4 * slot + e) == 0.0;  // request 3's slot, no initial state
    kept = kept && state.get(e) == old.get(e);          // slot 0
  }
  CHECK(zeroed);
  CHECK(kept);
  // The padding request's conv state stays; request 1's new conv state starts from zeros (no
  // initial state, not a decode-only batch): rows 0 and 1 zero, row 2 its token.
  const Tensor& conv = out.at("updated_conv_state");
  const int64_t rows = p.W - 1, C = p.C;
  bool conv_kept = true, conv_fresh = true;
  for (int64_t e = 0; e < rows * C; ++e) {
    conv_kept =
        conv_kept && conv.get(4 * rows * C + e) == inputs.at("conv_state").get(4 * rows * C + e);
    const int64_t row = e / C;
    const double want = row < 2 ? 0.0 : inputs.at("qkv").get(1 * C + e % C);
    conv_fresh = conv_fresh && conv.get(2 * rows * C + e) == want;
  }
  CHECK(conv_kept);
  CHECK(conv_fresh);
  // Padding tokens output zeros.
  const json padded = gdn_args({.lengths = {2}, .pad_tokens = 2});
  const BoundArgs pargs = op().bind(padded);
  const TensorMap pin = op().make_inputs(pargs, 1);
  TensorMap pout = op().allocate_outputs(pargs);
  run_json(op().implementation("reference"), pargs, json::object(), pin, pout);
  bool zeros = true;
  const int64_t width = 2 * 8;
  for (int64_t e = 2 * width; e < 4 * width; ++e) zeros = zeros && pout.at("out").get(e) == 0.0;
  CHECK(zeros);
}

TEST_CASE("gated_delta_rule bind names each bad argument", "[gated_delta_rule]") {
  const json ok = gdn_args({.lengths = {1, 3}, .context = {2, 0}, .n_kq = 1, .n_v = 2});
  auto with = [&](const char* key, json value) {
    json args = ok;
    args[key] = std::move(value);
    return args;
  };
  CHECK(bind_error_field(op(), ok) == "<no error>");
  CHECK(bind_error_field(op(), with("qkv", "f32[4,41]")) == "qkv");  // C not 2 n_kq d_k + n_v d_v
  CHECK(bind_error_field(op(), with("qkv", "f64[4,32]")) == "qkv");
  CHECK(bind_error_field(op(), with("b", "f32[4,3]")) == "b");
  CHECK(bind_error_field(op(), with("a_log", "f32[3]")) == "a_log");
  CHECK(bind_error_field(op(), with("conv_state", "bf16[3,3,32]")) == "conv_state");
  CHECK(bind_error_field(op(), with("conv_weight", "f32[32,2,4]")) == "conv_weight");
  CHECK(bind_error_field(op(), with("conv_bias", "f32[31]")) == "conv_bias");
  CHECK(bind_error_field(op(), with("recurrent_state", "f32[3,3,8,8]")) == "qkv");
  CHECK(bind_error_field(op(), with("n_kq", 2)) == "n_kq");
  CHECK(bind_error_field(op(), with("kernel_size", 3)) == "kernel_size");
  CHECK(bind_error_field(op(), with("d_k", 8)) == "<no error>");
  CHECK(bind_error_field(op(), with("query_start_loc", {0, 3, 1})) == "query_start_loc");
  CHECK(bind_error_field(op(), with("query_start_loc", {0, 1, 9})) == "query_start_loc");
  CHECK(bind_error_field(op(), with("query_start_loc", {1, 1, 4})) == "query_start_loc");
  CHECK(bind_error_field(op(), with("state_indices", {1, 1})) == "state_indices");
  CHECK(bind_error_field(op(), with("state_indices", {1, 3})) == "state_indices");
  CHECK(bind_error_field(op(), with("seq_lens", {2, 2})) == "seq_lens");
  CHECK(bind_error_field(op(), with("seq_lens", {2})) == "seq_lens");
  CHECK(bind_error_field(op(), with("distribution", {1, 3, 2})) == "distribution");
  // A decode-only distribution over a request of three tokens.
  CHECK(bind_error_field(op(), with("distribution", {2, 2, 2})) == "query_start_loc");
  CHECK(bind_error_field(op(), with("num_spec_tokens", 1)) == "num_spec_tokens");
}
