// Tests of the bench report's printers: rows, and the implementations listed under the table.
#include "cli/report/bench_report.h"

#include <catch2/catch.hpp>

namespace tokamax::cli {
namespace {

BenchResult result(const std::string& op, const std::string& impl, const std::string& reason,
                   bool other_device) {
  BenchResult r;
  r.op = op;
  r.spec = "smoke";
  r.impl = impl;
  r.dtype = "f32";
  r.unsupported = reason;
  r.other_device = other_device;
  return r;
}

TEST_CASE("the results for another device are the runs listed under the table", "[bench_report]") {
  const std::vector<OtherDeviceRun> runs = other_device_runs(
      {result("ragged_dot", "cpu", "", false), result("ragged_dot", "cuda", "no CUDA device", true),
       result("ragged_dot", "onednn", "onednn: f16 operands", false)});
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].op == "ragged_dot");
  CHECK(runs[0].impl == "cuda");
  CHECK(runs[0].reason == "no CUDA device");
}

TEST_CASE("an unsupported row keeps its identity and says why in the last column",
          "[bench_report]") {
  const std::vector<std::string> row = bench_row(
      result("ragged_dot", "onednn", "onednn: f16 operands", false), NoiseEstimator::kIqrMedian);
  REQUIRE(row.size() > 5);
  CHECK(row[0] == "ragged_dot");
  CHECK(row[2] == "onednn");
  CHECK(row[4] == "-");
  CHECK(row.back() == "unsupported: onednn: f16 operands");
}

}  // namespace
}  // namespace tokamax::cli
