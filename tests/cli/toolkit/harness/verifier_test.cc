// Tests for verify_case: dispositions for right, wrong, unsupported and skipped implementations.
#include "cli/toolkit/harness/verifier.h"

#include <catch2/catch.hpp>
#include <filesystem>

#include "tests/test_util.h"
#include "tests/ops/framework/fake_impls.h"
#include "ops/ragged_dot/api.h"

using namespace tokamax;
using namespace tokamax::testing;

namespace {

ArgSpec spec_of(BoundArgs args) {
  ArgSpec spec;
  spec.op = "ragged_dot";
  spec.name = "small";
  spec.args = std::move(args);
  return spec;
}

const VerifyRecord& record_of(const std::vector<VerifyRecord>& records, const std::string& impl) {
  for (const VerifyRecord& r : records) {
    if (r.impl == impl) return r;
  }
  FAIL("no record for " << impl);
  return records.front();
}

}  // namespace

TEST_CASE("verify passes correct implementations and fails a wrong one", "[verifier]") {
  const FakeRaggedDot wrong("wrong");
  const FakeRaggedDot unsupported("unsupported_device", /*supported=*/false);
  const FakeRaggedDot rejecting("rejecting", true, /*accepts=*/false);
  VerifyOptions options;
  options.configs.explicit_config = nlohmann::json{{"mode", 1}};
  const auto records =
      verify_case(spec_of(small_ragged_dot_args()), {&wrong, &unsupported, &rejecting}, options);
  CHECK(record_of(records, "wrong").disposition == Disposition::kFailed);
  CHECK(record_of(records, "wrong").comparison.worst_index == 0);
  CHECK(record_of(records, "unsupported_device").disposition == Disposition::kUnsupported);
  CHECK(record_of(records, "unsupported_device").reason == "fake device requirement");
  CHECK(record_of(records, "rejecting").disposition == Disposition::kUnsupported);

  const auto good = verify_case(spec_of(small_ragged_dot_args("bf16")),
                                ragged_dot_op().implementations(), VerifyOptions{});
  for (const VerifyRecord& r : good) {
    INFO(r.impl << ": " << r.reason);
    // Vendor baselines may lack a dtype (OpenBLAS without sbgemm has no bf16), and other
    // devices' implementations do not run on the host; ours for the host may not.
    const Implementation& impl = ragged_dot_op().implementation(r.impl);
    if ((impl.is_vendor() || impl.backend() != "cpu") &&
        r.disposition == Disposition::kUnsupported) {
      CHECK(!r.reason.empty());
      continue;
    }
    CHECK(r.disposition == Disposition::kPassed);
    CHECK(r.comparison.sampled == r.comparison.total);
    CHECK(r.dtype == "bf16");  // the output defaults to the inputs' type
  }
}

TEST_CASE("verify fills outputs with NaN first, so an element left unwritten fails",
          "[verifier]") {
  const FakeRaggedDot lazy("lazy");
  VerifyOptions options;
  options.configs.explicit_config = nlohmann::json{{"mode", 3}};
  // Rows 19-23 are past the group sum: they must be written (zeros), and `lazy` does not.
  const auto records = verify_case(spec_of(small_ragged_dot_args()), {&lazy}, options);
  CHECK(record_of(records, "lazy").disposition == Disposition::kFailed);
  CHECK(record_of(records, "lazy").comparison.nonfinite == 5 * 8);
  // With zero_initialize=false those rows are the op's to leave as they were: zeros to start.
  const BoundArgs kept = ragged_dot_op().bind({{"lhs", "f32[24,16]"},
                                               {"rhs", "f32[3,16,8]"},
                                               {"group_sizes", {10, 0, 9}},
                                               {"zero_initialize", false}});
  CHECK(ragged_dot_op().outputs_start_zeroed(kept));
  CHECK(!ragged_dot_op().outputs_start_zeroed(small_ragged_dot_args()));
  const auto kept_records = verify_case(spec_of(kept), {&lazy}, options);
  CHECK(record_of(kept_records, "lazy").disposition == Disposition::kPassed);
}

TEST_CASE("verify samples the oracle past its budget and says so", "[verifier]") {
  VerifyOptions options;
  options.oracle_budget = 16 * 50;  // K=16 multiply-adds per output: about 50 outputs
  const auto records = verify_case(spec_of(small_ragged_dot_args()),
                                   {&ragged_dot_op().implementation("reference")}, options);
  REQUIRE(records.size() == 1);
  CHECK(records[0].disposition == Disposition::kPassed);
  CHECK(records[0].comparison.sampled < records[0].comparison.total);
  CHECK(records[0].reason.find("sampled") != std::string::npos);
}

TEST_CASE("verify skips cases over the memory limit", "[verifier]") {
  VerifyOptions options;
  options.max_case_bytes = 100;
  const auto records = verify_case(spec_of(small_ragged_dot_args()),
                                   {&ragged_dot_op().implementation("reference")}, options);
  CHECK(records.at(0).disposition == Disposition::kSkipped);
}

TEST_CASE("verify --dump-dir writes inputs, oracle, outputs and case.json", "[verifier]") {
  ScratchDir dir;
  VerifyOptions options;
  options.dump_dir = dir.path().string();
  verify_case(spec_of(small_ragged_dot_args()), {&ragged_dot_op().implementation("cpu")}, options);
  const auto base = dir.path() / "ragged_dot" / "small";
  CHECK(std::filesystem::exists(base / "inputs" / "lhs.npy"));
  CHECK(std::filesystem::exists(base / "inputs" / "group_sizes.npy"));
  CHECK(std::filesystem::exists(base / "oracle" / "out.npy"));
  CHECK(std::filesystem::exists(base / "cpu" / "out.npy"));
  const auto case_json = nlohmann::json::parse(read_file((base / "case.json").string()));
  CHECK(case_json["results"][0]["disposition"] == "passed");
  CHECK(case_json["args"]["group_sizes"] == nlohmann::json({10, 0, 9}));
  CHECK(case_json["metadata"].contains("git_sha"));
}
