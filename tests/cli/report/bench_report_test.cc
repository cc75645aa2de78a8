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

TEST_CASE("implementations for another device are listed once per reason", "[bench_report]") {
  const std::string no_cuda = "no CUDA device: cudaErrorNoDevice";
  const std::vector<BenchResult> results = {
      result("ragged_dot", "cpu", "", false),
      result("ragged_dot", "cuda", no_cuda, true),
      result("ragged_dot", "cublas", no_cuda, true),
      result("ragged_dot", "onednn", "onednn: f16 operands", false),
      result("ragged_dot_vjp", "cublas", no_cuda, true),
      result("ragged_dot", "cuda", no_cuda, true),  // a second spec of the same op
      result("layer_norm", "tpu", "no TPU", true),
  };
  const std::vector<std::string> notes = other_device_notes(results, "cpu-x");
  REQUIRE(notes.size() == 2);
  CHECK(notes[0] == "not run on cpu-x: cuda (ragged_dot), cublas (ragged_dot, ragged_dot_vjp): " +
                        no_cuda);
  CHECK(notes[1] == "not run on cpu-x: tpu (layer_norm): no TPU");
  CHECK(other_device_notes({results[0], results[3]}, "cpu-x").empty());
}

TEST_CASE("an unsupported row keeps its identity and says why in the last column",
          "[bench_report]") {
  const std::vector<std::string> row =
      bench_row(result("ragged_dot", "onednn", "onednn: f16 operands", false),
                NoiseEstimator::kIqrMedian);
  REQUIRE(row.size() > 5);
  CHECK(row[0] == "ragged_dot");
  CHECK(row[2] == "onednn");
  CHECK(row[4] == "-");
  CHECK(row.back() == "unsupported: onednn: f16 operands");
}

}  // namespace
}  // namespace tokamax::cli
