// End-to-end tests of scripts/plot.py on small synthetic `bench --json` and `tune --json` files.
#include <catch2/catch.hpp>
#include <string>

#include "tests/test_util.h"

using namespace tokamax::testing;

namespace {

const std::string kPython = "/usr/bin/python3";
const std::string kPlot = std::string(TOKAMAX_SOURCE_DIR) + "/scripts/plot.py";

// Empty when matplotlib is usable, otherwise why not.
std::string matplotlib_missing() {
  const CommandResult probe = run_command(kPython + " -c 'import matplotlib, numpy'");
  if (probe.exit_code == 0) return "";
  return "exit " + std::to_string(probe.exit_code) + ": " + probe.output;
}

bool is_png(const std::string& path) {
  const std::string data = read_file(path);
  return data.size() > 8 && data.compare(0, 8, std::string("\x89PNG\r\n\x1a\n", 8)) == 0;
}

CommandResult plot(const std::string& args) { return run_command(kPython + " " + kPlot + " " + args); }

const char* kBench = R"({
  "context": {}, "benchmarks": [],
  "tokamax": {
    "schema_version": 1, "kind": "tokamax-bench",
    "ceilings": {"bandwidth_gbps": 50.0, "f32_fma_gflops": 500.0, "bf16_dot_gflops": 1000.0,
                 "device_id": "test-device"},
    "cases": [
      {"op": "ragged_dot", "spec": "square_f32", "impl": "cpu", "ok": true,
       "flops": 1.6e10, "bytes": 4.8e7, "gflops": 220.0, "roofline_gflops": 500.0},
      {"op": "ragged_dot", "spec": "square_f32", "impl": "openblas", "ok": true,
       "flops": 1.6e10, "bytes": 4.8e7, "gflops": 120.0, "roofline_gflops": 500.0},
      {"op": "ragged_dot", "spec": "small_bf16", "impl": "cpu", "ok": true,
       "flops": 1.0e6, "bytes": 1.0e6, "gflops": 30.0, "roofline_gflops": 50.0},
      {"op": "ragged_dot", "spec": "small_bf16", "impl": "openblas", "ok": false,
       "error": "unsupported"}
    ]
  }
})";

const char* kTune = R"({
  "schema_version": 1, "kind": "tokamax-tune", "context": {}, "cache": "x.json",
  "results": [
    {"spec": "moe_f32", "key": {"device": "d", "op": "ragged_dot", "impl": "cpu"},
     "config": {"tile_m": 8}, "time_s": 5e-5, "verified": true,
     "candidates": [
       {"config": {"tile_m": 64}, "status": "ok", "time_s": 4e-4, "heuristics": true},
       {"config": {"tile_m": 8}, "status": "ok", "time_s": 5e-5},
       {"config": {"tile_m": 16}, "status": "ok", "time_s": 9e-5},
       {"config": {"tile_m": 3}, "status": "invalid", "reason": "tile_m < mr"},
       {"config": {"tile_m": 4}, "status": "numerics", "reason": "mismatch"}]},
    {"spec": "skewed_bf16", "key": {"device": "d", "op": "ragged_dot", "impl": "cpu"},
     "config": {"tile_m": 4}, "time_s": 2e-5, "verified": true,
     "candidates": [
       {"config": {"tile_m": 4}, "status": "ok", "time_s": 2e-5, "heuristics": true},
       {"config": {"tile_m": 1}, "status": "error", "reason": "threw"}]}
  ]
})";

}  // namespace

TEST_CASE("plot.py draws a roofline and tuning candidates as PNGs", "[plot][scripts]") {
  if (const std::string why = matplotlib_missing(); !why.empty()) {
    WARN("skipped: " << kPython << " cannot import matplotlib (apt-get install python3-matplotlib): " << why);
    return;
  }
  ScratchDir dir;
  write_file(dir.file("bench.json"), kBench);
  write_file(dir.file("tune.json"), kTune);

  const CommandResult roofline = plot("roofline " + dir.file("bench.json") + " -o " + dir.file("roofline.png"));
  INFO(roofline.output);
  CHECK(roofline.exit_code == 0);
  CHECK(is_png(dir.file("roofline.png")));

  const CommandResult tune = plot("tune " + dir.file("tune.json") + " -o " + dir.file("tune.png"));
  INFO(tune.output);
  CHECK(tune.exit_code == 0);
  CHECK(is_png(dir.file("tune.png")));
}

TEST_CASE("plot.py rejects malformed input with exit 2", "[plot][scripts]") {
  if (const std::string why = matplotlib_missing(); !why.empty()) {
    WARN("skipped: " << kPython << " cannot import matplotlib (apt-get install python3-matplotlib): " << why);
    return;
  }
  ScratchDir dir;
  write_file(dir.file("broken.json"), "{\"tokamax\": {\"cases\": [");
  write_file(dir.file("tune.json"), kTune);
  write_file(dir.file("bench.json"), kBench);

  const CommandResult not_json = plot("roofline " + dir.file("broken.json") + " -o " + dir.file("a.png"));
  INFO(not_json.output);
  CHECK(not_json.exit_code == 2);
  CHECK(not_json.output.find("not valid JSON") != std::string::npos);

  // A tune document given to `roofline` and a bench document given to `tune`.
  const CommandResult wrong_kind = plot("roofline " + dir.file("tune.json") + " -o " + dir.file("b.png"));
  INFO(wrong_kind.output);
  CHECK(wrong_kind.exit_code == 2);
  CHECK(wrong_kind.output.find("tokamax") != std::string::npos);
  const CommandResult wrong_tune = plot("tune " + dir.file("bench.json") + " -o " + dir.file("c.png"));
  INFO(wrong_tune.output);
  CHECK(wrong_tune.exit_code == 2);

  const CommandResult missing = plot("tune " + dir.file("absent.json") + " -o " + dir.file("d.png"));
  INFO(missing.output);
  CHECK(missing.exit_code == 2);
  CHECK_FALSE(std::filesystem::exists(dir.file("a.png")));
}
