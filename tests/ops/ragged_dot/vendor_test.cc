// Tests for the vendor baselines of ragged_dot ("openblas", "mkl", "onednn") against the reference.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "ops/framework/dispatch.h"
#include "ops/framework/errors.h"
#include "ops/ragged_dot/api.h"
#include "ops/ragged_dot/base.h"
#include "tests/ops/impl_calls.h"

using namespace tokamax;
using nlohmann::json;

namespace {

const Implementation& impl(const std::string& name) { return ragged_dot_op().implementation(name); }

// True when `name` can run here; otherwise says why (a missing library skips, never fails).
bool available(const std::string& name) {
  const Support support = impl(name).supported_on(cpu::host_device());
  if (!support.ok) WARN("skipping " << name << ": " << support.reason);
  return support.ok;
}

// Empty groups, one group, odd sizes, rows past the sum, K = 1, K = 0 and a group-free call.
std::vector<json> f32_cases() {
  return {
      {{"lhs", "f32[64,32]"}, {"rhs", "f32[4,32,48]"}, {"group_sizes", {0, 7, 13, 33}}},
      {{"lhs", "f32[37,19]"}, {"rhs", "f32[1,19,23]"}, {"group_sizes", {37}}},
      {{"lhs", "f32[20,1]"}, {"rhs", "f32[3,1,16]"}, {"group_sizes", {7, 0, 13}}},
      {{"lhs", "f32[9,8]"}, {"rhs", "f32[2,8,8]"}, {"group_sizes", {0, 0}}},
      {{"lhs", "f32[130,300]"}, {"rhs", "f32[3,300,70]"}, {"group_sizes", {33, 64, 13}}},
      {{"lhs", "f32[11,0]"}, {"rhs", "f32[2,0,5]"}, {"group_sizes", {4, 3}}},
  };
}

std::vector<json> bf16_cases() {
  return {
      {{"lhs", "bf16[50,40]"}, {"rhs", "bf16[3,40,72]"}, {"group_sizes", {33, 0, 7}}},
      {{"lhs", "bf16[21,1]"}, {"rhs", "bf16[2,1,9]"}, {"group_sizes", {0, 21}}},
      {{"lhs", "bf16[50,40]"},
       {"rhs", "bf16[3,40,72]"},
       {"group_sizes", {13, 7, 29}},
       {"preferred_element_type", "bf16"}},
  };
}

// Runs `name` and checks every output element against the float64 oracle. Rows past the group
// sum must be written (exact zeros), so the output starts as NaN.
void check_against_oracle(const std::string& name, const json& args_json,
                          const json& config = json::object()) {
  const RaggedDotOp& op = ragged_dot_op();
  const BoundArgs args = op.bind(args_json);
  CAPTURE(name, args.key(), config.dump());
  const RaggedDotProblem p = RaggedDotProblem::from(args);
  const TensorMap inputs = op.make_inputs(args, 5);
  TensorMap outputs = op.allocate_outputs(args);
  Tensor& out = outputs.at("out");
  for (int64_t i = 0; i < out.num_elements(); ++i) out.set(i, std::nan(""));
  check_args(impl(name), args);
  run_json(impl(name), args, config, inputs, outputs);

  std::vector<int64_t> index(static_cast<size_t>(out.num_elements()));
  for (size_t i = 0; i < index.size(); ++i) index[i] = static_cast<int64_t>(i);
  const OracleSample oracle = op.oracle(args, inputs, "out", index);
  // Tolerance table: both baselines accumulate in f32 (any order, so K roundings of 2^-24 of
  // sum|a*b|), then round once to the output dtype.
  const std::map<DType, double> u_out = {{DType::kF32, std::ldexp(1.0, -24)},
                                         {DType::kBF16, std::ldexp(1.0, -8)}};
  const double u_acc = std::ldexp(1.0, -24);
  const double K = static_cast<double>(std::max<int64_t>(p.K, 1));
  for (size_t s = 0; s < index.size(); ++s) {
    const double expected = oracle.value[s], got = out.get(index[s]);
    CAPTURE(s, expected, got, oracle.magnitude[s]);
    if (index[s] / p.N >= p.rows()) {
      REQUIRE(got == 0.0);
      continue;
    }
    const double bound =
        (K + 1) * u_acc * oracle.magnitude[s] + u_out.at(p.out_dtype) * std::fabs(expected);
    REQUIRE(std::fabs(got - expected) <= bound);
  }
}

// The NotImplemented message of check_args, or "" when it accepts the args.
std::string rejection(const std::string& name, const json& args_json) {
  try {
    check_args(impl(name), ragged_dot_op().bind(args_json));
  } catch (const NotImplemented& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("vendor baselines are last in the dispatch order and auto never picks one", "[vendor]") {
  const std::vector<const Implementation*> impls = ragged_dot_op().implementations();
  bool seen_vendor = false;
  for (const Implementation* i : impls) {
    if (i->is_vendor()) seen_vendor = true;
    CHECK((i->is_vendor() || !seen_vendor));  // no tokamax implementation after a vendor one
  }
  CHECK(impl("openblas").is_vendor());
  CHECK(impl("onednn").is_vendor());
  for (const json& args_json : {f32_cases()[0], bf16_cases()[0]}) {
    const BoundArgs args = ragged_dot_op().bind(args_json);
    const TensorMap inputs = ragged_dot_op().make_inputs(args, 1);
    TensorMap outputs = ragged_dot_op().allocate_outputs(args);
    const DispatchResult result =
        dispatch(ragged_dot_op(), args, "auto", std::nullopt, inputs, outputs);
    CHECK_FALSE(result.impl->is_vendor());
  }
}

TEST_CASE("openblas ragged_dot matches the oracle on f32", "[vendor][openblas]") {
  if (!available("openblas")) return;
  for (const json& args : f32_cases()) {
    check_against_oracle("openblas", args);
    check_against_oracle("openblas", args, {{"num_threads", 1}});
  }
}

TEST_CASE("openblas ragged_dot runs bf16 only through cblas_sbgemm", "[vendor][openblas]") {
  if (!available("openblas")) return;
  const std::string why = rejection("openblas", bf16_cases()[0]);
  if (why.empty()) {
    check_against_oracle("openblas", bf16_cases()[0]);
    check_against_oracle("openblas", bf16_cases()[1]);
  } else {
    WARN("openblas bf16: " << why);
    CHECK_THAT(why, Catch::Contains("cblas_sbgemm") && Catch::Contains("OpenBLAS"));
  }
  // sbgemm writes f32: a bf16 output is never wired.
  CHECK_THAT(rejection("openblas", bf16_cases()[2]), Catch::Contains("openblas:"));
}

TEST_CASE("mkl ragged_dot matches the oracle on f32 and bf16", "[vendor][mkl]") {
  if (!available("mkl")) return;
  CHECK(impl("mkl").is_vendor());
  for (const json& args : f32_cases()) {
    check_against_oracle("mkl", args);
    check_against_oracle("mkl", args, {{"num_threads", 1}});
  }
  // cblas_gemm_bf16bf16f32 writes f32: bf16 inputs into an f32 output run, a bf16 output (the
  // default for bf16 inputs) is never wired.
  for (json args : bf16_cases()) {
    CHECK_THAT(rejection("mkl", args), Catch::Contains("mkl:") && Catch::Contains("f32 only"));
    args["preferred_element_type"] = "f32";
    check_against_oracle("mkl", args);
  }
  const json described = impl("mkl").describe();
  CHECK(described.at("library") == "oneMKL");
  CHECK_THAT(described.at("version").get<std::string>(), Catch::Contains("Math Kernel Library"));
}

TEST_CASE("mkl ragged_dot runs f32 groups in one grouped batch call", "[vendor][mkl]") {
  if (!available("mkl")) return;
  // Every f32 case through cblas_sgemm_batch: empty groups, one group, rows past the sum, K = 0
  // and the group-free call (no batch call at all).
  for (const json& args : f32_cases()) {
    check_against_oracle("mkl", args, {{"calls", "batch"}});
    check_against_oracle("mkl", args, {{"calls", "batch"}, {"num_threads", 1}});
  }
  // bf16 (and a preset's bf16 pieces) cannot: oneMKL has no bf16 batch.
  json bf16 = bf16_cases()[0];
  bf16["preferred_element_type"] = "f32";
  const BoundArgs bf16_args = ragged_dot_op().bind(bf16);
  CHECK_THROWS_WITH(check_config_json(impl("mkl"), bf16_args, {{"calls", "batch"}}),
                    Catch::Contains("calls=batch") && Catch::Contains("f32 only"));
}

TEST_CASE("mkl configs: the grouped batch for several f32 groups, per group otherwise",
          "[vendor][mkl]") {
  const Implementation& mkl = impl("mkl");
  auto args = [](const json& a) { return ragged_dot_op().bind(a); };
  CHECK(heuristics_config_json(mkl, args(f32_cases()[0])) ==
        json{{"calls", "batch"}, {"num_threads", 0}});
  // One non-empty group: one gemm either way.
  CHECK(heuristics_config_json(mkl, args(f32_cases()[1])).at("calls") == "per_group");
  json bf16 = bf16_cases()[0];
  bf16["preferred_element_type"] = "f32";
  CHECK(heuristics_config_json(mkl, args(bf16)).at("calls") == "per_group");
  cpu::CpuInfo cpu = cpu::host_cpu();
  cpu.cores = 8;
  const cpu::CpuDevice eight(cpu, false);
  CHECK(autotuning_configs_json(mkl, args(f32_cases()[0]), eight) ==
        std::vector<json>{{{"calls", "per_group"}, {"num_threads", 0}},
                          {{"calls", "batch"}, {"num_threads", 0}},
                          {{"calls", "per_group"}, {"num_threads", 1}},
                          {{"calls", "batch"}, {"num_threads", 1}}});
  CHECK(autotuning_configs_json(mkl, args(bf16), eight).size() == 2);
  CHECK_THROWS_WITH(mkl.canonical_config({{"calls", "grouped"}}),
                    Catch::Contains("calls") && Catch::Contains("per_group"));
}

TEST_CASE("onednn ragged_dot matches the oracle on f32 and bf16", "[vendor]") {
  if (!available("onednn")) return;
  for (const json& args : f32_cases()) check_against_oracle("onednn", args);
  for (const json& args : bf16_cases()) {
    const std::string why = rejection("onednn", args);
    if (!why.empty()) {
      WARN("onednn bf16 unsupported on this CPU: " << why);
      continue;
    }
    check_against_oracle("onednn", args);
  }
}

TEST_CASE("vendor baselines reject unwired dtypes with a reason", "[vendor][openblas]") {
  const std::vector<json> unwired = {
      {{"lhs", "f16[8,4]"}, {"rhs", "f16[2,4,8]"}, {"group_sizes", {3, 5}}},
      {{"lhs", "f64[8,4]"}, {"rhs", "f64[2,4,8]"}, {"group_sizes", {3, 5}}},
      {{"lhs", "f32[8,4]"}, {"rhs", "bf16[2,4,8]"}, {"group_sizes", {3, 5}}},
      {{"lhs", "f32[8,4]"},
       {"rhs", "f32[2,4,8]"},
       {"group_sizes", {3, 5}},
       {"preferred_element_type", "f16"}},
  };
  for (const std::string name : {"openblas", "mkl", "onednn"}) {
    if (!available(name)) continue;
    for (const json& args : unwired) {
      CAPTURE(name, args.dump());
      CHECK_THAT(rejection(name, args), Catch::StartsWith(name + ": "));
    }
  }
}

TEST_CASE("openblas configs: all cores by default, one and all cores to tune",
          "[vendor][openblas]") {
  const Implementation& blas = impl("openblas");
  const BoundArgs args = ragged_dot_op().bind(f32_cases()[0]);
  CHECK(heuristics_config_json(blas, args) == json{{"num_threads", 0}});
  cpu::CpuInfo cpu = cpu::host_cpu();
  cpu.cores = 8;
  CHECK(autotuning_configs_json(blas, args, cpu::CpuDevice(cpu, false)) ==
        std::vector<json>{{{"num_threads", 0}}, {{"num_threads", 1}}});
  cpu.cores = 1;
  CHECK(autotuning_configs_json(blas, args, cpu::CpuDevice(cpu, false)) ==
        std::vector<json>{{{"num_threads", 0}}});
  CHECK_THROWS_AS(blas.canonical_config({{"num_threads", -1}}), InvalidArgument);
  CHECK_THROWS_AS(blas.canonical_config({{"tile_m", 4}}), InvalidArgument);
  CHECK_THROWS_AS(check_config_json(blas, args, {{"num_threads", 100000}}), InvalidArgument);
  CHECK(impl("onednn").canonical_config(json::object()) == json::object());
}

TEST_CASE("vendor baselines describe their library for records", "[vendor][openblas]") {
  const json onednn = impl("onednn").describe();
  CHECK(onednn.at("library") == "oneDNN");
  CHECK_THAT(onednn.at("description").get<std::string>(), Catch::Contains("cpu_runtime="));
  const json blas = impl("openblas").describe();
  CHECK(blas.at("library") == "OpenBLAS");
  if (!available("openblas")) {
    CHECK_FALSE(blas.at("error").get<std::string>().empty());
    return;
  }
  CHECK_FALSE(blas.at("core_type").get<std::string>().empty());
  CHECK_THAT(blas.at("description").get<std::string>(),
             Catch::Contains("core=" + blas.at("core_type").get<std::string>()));
}
