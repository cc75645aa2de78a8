// End-to-end tests of the `tokamax` binary: outputs, JSON contracts and exit codes.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/test_util.h"

using namespace tokamax::testing;
using nlohmann::json;

namespace {

const std::string kBin = TOKAMAX_BIN;

}  // namespace

TEST_CASE("list shows ops, implementations with support, and catalog tags", "[cli]") {
  const CommandResult r = run_tokamax("list");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("ragged_dot") && Catch::Contains("reference") &&
                           Catch::Contains("supported") && Catch::Contains("ci_tests") &&
                           Catch::Contains("device: cpu-"));
  const CommandResult specs = run_tokamax("list --op ragged_dot --tag smoke");
  CHECK(specs.exit_code == 0);
  CHECK_THAT(specs.output, Catch::Contains("smoke"));
  // An op named: the other spellings its bind accepts (upstream's public API), and a spec
  // written with them binds to the same args.
  const CommandResult attention = run_tokamax("list --op dot_product_attention");
  CHECK_THAT(attention.output,
             Catch::Contains("dot_product_attention also accepts: scale = logits_scale") &&
                 Catch::Contains("local_window_size = local_window"));
  ScratchDir dir;
  const std::string spec = dir.file("upstream.yaml");
  write_file(spec,
             "op: dot_product_attention\nspecs:\n  - name: spelled\n    args:\n"
             "      q: f32[1,16,2,8]\n      k: f32[1,16,2,8]\n      v: f32[1,16,2,8]\n"
             "      scale: 0.5\n      local_window_size: 3\n");
  const CommandResult bound = run_tokamax("list --spec " + spec + " --name spelled");
  INFO(bound.output);
  CHECK(bound.exit_code == 0);
  CHECK_THAT(bound.output,
             Catch::Contains("\"local_window\":[3,3]") && Catch::Contains("\"logits_scale\":0.5"));
}

TEST_CASE("without a CUDA device the CUDA implementations are unsupported with why, exit 0",
          "[cli]") {
  const CommandResult listed = run_tokamax("list --op ragged_dot");
  REQUIRE(listed.exit_code == 0);
  // A machine with a GPU runs them; the GPU check covers that (scripts/gpu_check.sh).
  if (!Catch::Contains("no CUDA device").match(listed.output) &&
      !Catch::Contains("not built").match(listed.output)) {
    WARN("a CUDA device is present: " << listed.output.substr(0, 400));
    return;
  }
  const std::string impls = " --impl cuda,cublas,cublas_grouped,cudnn";
  const CommandResult verified = run_tokamax("verify --op ragged_dot --tag smoke" + impls);
  INFO(verified.output);
  CHECK(verified.exit_code == 0);
  CHECK_THAT(verified.output, Catch::Contains("16 results: 0 passed, 0 failed, 0 mistrusted, "
                                              "16 unsupported"));
  // verify lists them the same way: once, not a row per case.
  CHECK_THAT(verified.output, Catch::Contains("not run on cpu"));
  for (const char* impl : {"cuda", "cublas", "cublas_grouped", "cudnn"}) {
    INFO(impl);
    CHECK_THAT(verified.output, Catch::Contains(std::string(" ") + impl + " (ragged_dot)"));
    CHECK_THAT(verified.output, !Catch::Contains(std::string(impl) + "  "));
  }
  const CommandResult benched = run_tokamax("bench --op ragged_dot --name smoke_f32" + impls);
  INFO(benched.output);
  CHECK(benched.exit_code == 0);
  // Listed once under the table, with the reason, instead of a row of dashes each.
  CHECK_THAT(benched.output, Catch::Contains("not run on cpu"));
  for (const char* impl : {"cuda", "cublas", "cublas_grouped", "cudnn"}) {
    INFO(impl);
    CHECK_THAT(benched.output, Catch::Contains(std::string(" ") + impl + " (ragged_dot)"));
    CHECK_THAT(benched.output, !Catch::Contains(std::string("smoke_f32  ") + impl + " "));
  }
  CHECK_THAT(benched.output, Catch::Contains("0 benchmarks, 0 failed"));
  const CommandResult tuned = run_tokamax("tune --op ragged_dot --name smoke_f32 --impl cuda");
  INFO(tuned.output);
  CHECK(tuned.exit_code == 0);
  CHECK_THAT(tuned.output, Catch::Contains("smoke_f32/cuda: unsupported: "));
}

TEST_CASE("verify writes the JSON contract", "[cli]") {
  ScratchDir dir;
  const CommandResult r = run_tokamax(
      "verify --op ragged_dot --tag ci_tests --name '*_f32' --json " + dir.file("v.json"));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("0 failed"));
  const json v = json::parse(read_file(dir.file("v.json")));
  CHECK(v["schema_version"] == 1);
  for (const char* key :
       {"tokamax_version", "git_sha", "compiler", "flags", "device_id", "timestamp", "command"}) {
    CHECK(v["context"].contains(key));
  }
  REQUIRE(v["cases"].size() > 4);
  // Whether each case passes is the conformance test's (tests/ops/conformance_test.cc).
  for (const json& c : v["cases"]) {
    for (const char* key :
         {"op", "spec", "impl", "dtype", "disposition", "reason", "failure", "max_abs_error",
          "max_rel_error", "bound", "worst_ratio", "violations", "nonfinite", "sampled_outputs",
          "total_outputs", "args", "config", "config_source", "backend"}) {
      INFO(key);
      CHECK(c.contains(key));
    }
  }
}

TEST_CASE("bad usage and bad input exit 2 with a message that locates the problem", "[cli]") {
  ScratchDir dir;
  SECTION("unknown op lists the known ones") {
    const CommandResult r = run_tokamax("verify --op no_such_op");
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("no_such_op") && Catch::Contains("ragged_dot"));
  }
  SECTION("a tag that matches nothing lists the tags") {
    const CommandResult r = run_tokamax("bench --op ragged_dot --tag no_such_tag");
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("ci_tests"));
  }
  SECTION("unknown implementation") {
    const CommandResult r = run_tokamax("verify --tag smoke --impl cuda_magic");
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("cuda_magic") && Catch::Contains("reference"));
  }
  SECTION("an unknown device lists the available ones") {
    for (const char* command : {"list", "info", "verify --tag smoke", "bench --name smoke_f32",
                                "tune --name smoke_f32"}) {
      const CommandResult r = run_tokamax(std::string(command) + " --device cuda:0");
      INFO(command << ": " << r.output);
      CHECK(r.exit_code == 2);
      CHECK_THAT(r.output, Catch::Contains("unknown device 'cuda:0'") && Catch::Contains("cpu:0"));
    }
  }
  SECTION("unknown flag and missing subcommand") {
    CHECK(run_tokamax("verify --no-such-flag").exit_code == 2);
    CHECK(run_tokamax("").exit_code == 2);
    CHECK(run_tokamax("frobnicate").exit_code == 2);
  }
  SECTION("YAML syntax error names file, line and column") {
    write_file(dir.file("bad.yaml"), "op: ragged_dot\nspecs:\n  - name: [unclosed\n");
    const CommandResult r = run_tokamax("verify --spec " + dir.file("bad.yaml"));
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains(dir.file("bad.yaml") + ":"));
  }
  SECTION("a bad dtype names file, line and field") {
    write_file(dir.file("dtype.yaml"),
               "op: ragged_dot\nspecs:\n  - name: mine\n    args:\n      lhs: q7[4,4]\n"
               "      rhs: f32[1,4,4]\n");
    const CommandResult r = run_tokamax("verify --spec " + dir.file("dtype.yaml"));
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains(dir.file("dtype.yaml") + ":5:") && Catch::Contains("q7"));
  }
  SECTION("a user spec runs when valid") {
    write_file(dir.file("good.yaml"),
               "op: ragged_dot\nspecs:\n  - name: mine\n    tags: [own]\n    args:\n"
               "      lhs: f32[6,4]\n      rhs: f32[2,4,5]\n      group_sizes: [2, 3]\n");
    const CommandResult r = run_tokamax("verify --spec " + dir.file("good.yaml") + " --tag own");
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains("mine") && Catch::Contains("passed"));
  }
  SECTION("a corrupt cache is an error naming the file, and is not overwritten") {
    write_file(dir.file("cache.json"), "{\"format_version\": 1,\n \"entries\": {oops}}\n");
    const CommandResult tune =
        run_tokamax("tune --op ragged_dot --name smoke_f32 --cache " + dir.file("cache.json"));
    CHECK(tune.exit_code == 2);
    CHECK_THAT(tune.output, Catch::Contains(dir.file("cache.json") + ":2:"));
    CHECK(read_file(dir.file("cache.json")) == "{\"format_version\": 1,\n \"entries\": {oops}}\n");
    CHECK(run_tokamax("export-cache --cache " + dir.file("cache.json")).exit_code == 2);
    CHECK(run_tokamax("bench --cache " + dir.file("cache.json")).exit_code == 2);
  }
}

TEST_CASE("the device option names the host CPU by kind, index or id", "[cli]") {
  const CommandResult list = run_tokamax("list --device cpu:0");
  INFO(list.output);
  REQUIRE(list.exit_code == 0);
  // "device: <id>  <description>": the id names the same device.
  const std::string id = list.output.substr(8, list.output.find(' ', 8) - 8);
  CHECK(id.rfind("cpu-", 0) == 0);
  const CommandResult verify =
      run_tokamax("verify --op ragged_dot --name smoke_f32 --impl cpu --device " + id);
  INFO(verify.output);
  CHECK(verify.exit_code == 0);
  CHECK_THAT(verify.output, Catch::Contains("passed"));
}

TEST_CASE("bench writes Google Benchmark JSON and tune fills a cache that bench then uses",
          "[cli]") {
  ScratchDir dir;
  const std::string cache = dir.file("my_cache.json");
  const CommandResult bench = run_tokamax(
      "bench --op ragged_dot --name smoke_f32 --name smoke_bf16 "
      "--repetitions 3 --min-time 0.001 --json " +
      dir.file("out.json"));
  INFO(bench.output);
  REQUIRE(bench.exit_code == 0);
  CHECK_THAT(bench.output, Catch::Contains("heuristics") && Catch::Contains("roofline") &&
                               Catch::Contains("vs vendor"));
  const json out = json::parse(read_file(dir.file("out.json")));
  CHECK(out["context"].contains("tokamax_git_sha"));
  bool saw_median = false;
  for (const json& b : out["benchmarks"]) {
    CHECK_THAT(b["name"].get<std::string>(), Catch::StartsWith("ragged_dot/smoke_"));
    for (const char* counter : {"flops", "bytes", "gflops", "gbps"}) CHECK(b.contains(counter));
    if (b.value("aggregate_name", "") == "median") saw_median = true;
  }
  CHECK(saw_median);

  const CommandResult tune = run_tokamax(
      "tune --op ragged_dot --name smoke_f32 --impl cpu "
      "--min-time 0.005 --quiet --cache " +
      cache);
  INFO(tune.output);
  REQUIRE(tune.exit_code == 0);
  const json entries = json::parse(read_file(cache));
  CHECK(entries["format_version"] == 1);
  const CommandResult cached = run_tokamax(
      "bench --op ragged_dot --name smoke_f32 --impl cpu "
      "--repetitions 2 --min-time 0.001 --cache " +
      cache);
  INFO(cached.output);
  CHECK(cached.exit_code == 0);
  CHECK_THAT(cached.output, Catch::Contains(" cache "));

  const CommandResult exported =
      run_tokamax("export-cache --cache " + cache + " -o " + dir.file("merged.json"));
  INFO(exported.output);
  CHECK(exported.exit_code == 0);
  CHECK(json::parse(read_file(dir.file("merged.json"))) == entries);
}

TEST_CASE("Ctrl-C during tune keeps completed entries and exits 130", "[cli]") {
  ScratchDir dir;
  const std::string cache = dir.file("cache.json");
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    execl(kBin.c_str(), kBin.c_str(), "tune", "--op", "ragged_dot", "--tag", "ci_tests", "--impl",
          "cpu", "--quiet", "--min-time", "0.02", "--cache", cache.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait for the first completed entry, then interrupt.
  bool has_entry = false;
  for (int i = 0; i < 600 && !has_entry; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    has_entry = read_file(cache).find("\"cpu\"") != std::string::npos;
  }
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  REQUIRE(has_entry);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 130);
  const json kept = json::parse(read_file(cache));
  CHECK(kept["entries"].size() == 1);
}

TEST_CASE("info prints the device and its measured ceilings", "[cli]") {
  const CommandResult table = run_tokamax("info");
  INFO(table.output);
  REQUIRE(table.exit_code == 0);
  CHECK_THAT(table.output, Catch::Contains("f32 FMA peak") && Catch::Contains("memory bandwidth") &&
                               Catch::Contains("device id") && Catch::Contains("large buffers"));
  // A first run may say "measuring ..." on stderr; only stdout is JSON.
  const CommandResult as_json = run_command("(" + kBin + " info --json 2>/dev/null)");
  REQUIRE(as_json.exit_code == 0);
  const json info = json::parse(as_json.output);
  CHECK(info["ceilings"]["f32_fma_gflops"].get<double>() > 0);
  CHECK(info["ceilings"]["bandwidth_gbps"].get<double>() > 0);
  CHECK(info["device"]["id"] == info["ceilings"]["device_id"]);
  CHECK((info["huge_pages"] == "madvise" || info["huge_pages"] == "unavailable"));
  const CommandResult off = run_command("(TOKAMAX_HUGE_PAGES=0 " + kBin + " info 2>/dev/null)");
  CHECK_THAT(off.output, Catch::Contains("4 KiB pages (TOKAMAX_HUGE_PAGES=0)"));
}
