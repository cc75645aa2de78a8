// The worker protocol: serialization, serve_worker, WorkerProcess (crash / exit / timeout /
// interrupt classification) and WorkerRunner against the fault-injection op.
#include "ops/framework/harness/case_runner.h"

#include <signal.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "tests/test_util.h"
#include "ops/framework/errors.h"
#include "ops/ragged_dot/api.h"
#include "ops/framework/harness/worker_runner.h"
#include "tests/support/fault_injection_op.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

const std::string kTestCli = TOKAMAX_TEST_CLI;

CaseSetup tiny_case(const std::string& op) {
  CaseSetup setup;
  setup.op = op;
  setup.args = ragged_dot_op().bind(
      {{"lhs", "f32[24,16]"}, {"rhs", "f32[3,16,8]"}, {"group_sizes", {10, 0, 9}}});
  setup.args.op = op;
  setup.seed = 3;
  return setup;
}

TimingOptions quick_timing() {
  TimingOptions timing;
  timing.min_samples = 3;
  timing.max_samples = 5;
  timing.min_time_s = 0.002;
  timing.sample_time_s = 5e-4;
  return timing;
}

// Exactly two samples, one warm-up call, no drift probe: a bench request that is quick.
BenchOptions two_sample_bench() {
  BenchOptions bench;
  bench.warmup_runs = 1;
  bench.stop.min_samples = 2;
  bench.stop.max_samples = 2;
  bench.stop.min_time_s = 0;
  bench.drift_probe = false;
  return bench;
}

json two_sample_bench_json() { return bench_options_to_json(two_sample_bench()); }

json fault(const std::string& mode) { return {{"mode", mode}, {"delay_us", 0}}; }

bool all_pass(const CheckResult& check) {
  if (check.status != "ok" || check.comparisons.empty()) return false;
  for (const auto& [name, comparison] : check.comparisons) {
    if (judge(comparison) != Disposition::kPassed) return false;
  }
  return true;
}

// Runs request lines through serve_worker; returns the response lines parsed.
std::vector<json> serve(const std::vector<json>& requests) {
  std::string input;
  for (const json& r : requests) input += r.dump() + "\n";
  input += "this is not json\n";
  std::istringstream in(input);
  std::vector<json> responses;
  CHECK(serve_worker(in, [&](const std::string& line) {
          CHECK(line.find('\n') == std::string::npos);
          responses.push_back(json::parse(line));
        }) == 0);
  REQUIRE(responses.size() == requests.size() + 1);
  CHECK(responses.back()["ok"] == false);  // the non-JSON line
  responses.pop_back();
  return responses;
}

}  // namespace

TEST_CASE("worker protocol round-trips results exactly, inf and nan included", "[isolation]") {
  TimeResult timed;
  timed.samples = {1.2345678901234567e-6, 3e-3, std::nextafter(1.0, 2.0), 5e-324};
  const TimeResult back = time_result_from_json(json::parse(time_result_to_json(timed).dump()));
  CHECK(back.status == "ok");
  REQUIRE(back.samples.size() == timed.samples.size());
  for (size_t i = 0; i < timed.samples.size(); ++i) {
    CHECK(std::memcmp(&back.samples[i], &timed.samples[i], sizeof(double)) == 0);
  }

  CheckResult check;
  Comparison c;
  c.worst_ratio = INFINITY;
  c.max_abs_error = NAN;
  c.nonfinite = 2;
  c.sampled = 10;
  c.total = 20;
  c.worst_index = 7;
  check.comparisons["out"] = c;
  const CheckResult parsed =
      check_result_from_json(json::parse(check_result_to_json(check).dump()));
  const Comparison& p = parsed.comparisons.at("out");
  CHECK(std::isinf(p.worst_ratio));
  CHECK(std::isnan(p.max_abs_error));
  CHECK(p.nonfinite == 2);
  CHECK(p.worst_index == 7);
  CHECK(judge(p) == Disposition::kFailed);

  BenchStats stats;
  stats.name = "a/b/c";
  stats.samples_s = {1e-5, 2.5e-5};
  stats.median_s = 1.75e-5;
  stats.iterations = 1000;
  stats.noise = std::numeric_limits<double>::infinity();
  stats.noisy = true;
  stats.stop_reason = StopReason::kTimeout;
  stats.cache_copies = 7;
  stats.drift.change = 0.06;
  stats.drift.drifted = true;
  stats.bandwidth.before_gbps = 51.5;
  stats.bandwidth.after_gbps = 49.25;
  const BenchStats s = bench_stats_from_json(json::parse(bench_stats_to_json(stats).dump()));
  CHECK(s.bandwidth.before_gbps == 51.5);
  CHECK(s.bandwidth.after_gbps == 49.25);
  CHECK(s.samples_s == stats.samples_s);
  CHECK(s.median_s == stats.median_s);
  CHECK(s.iterations == 1000);
  CHECK(s.noise == stats.noise);
  CHECK(s.noisy);
  CHECK(s.stop_reason == StopReason::kTimeout);
  CHECK(s.cache_copies == 7);
  CHECK(s.drift.change == 0.06);
  CHECK(s.drift.drifted);

  TimingOptions timing = quick_timing();
  timing.warmup_runs = 0;
  const TimingOptions t = timing_from_json(timing_to_json(timing));
  CHECK(t.warmup_runs == 0);
  CHECK(t.min_time_s == timing.min_time_s);
  BenchOptions options;
  options.context = {{"k", "v"}};
  options.json_path = "x.json";
  options.stop.max_noise = 0.02;
  options.stop.timeout_s = std::numeric_limits<double>::infinity();
  options.stop.estimator = NoiseEstimator::kStdevMean;
  options.cache_mode = CacheMode::kCold;
  options.llc_bytes = 32 << 20;
  options.drift_probe = false;
  options.bandwidth_probe = true;
  options.max_drift = 0.1;
  const BenchOptions o = bench_options_from_json(bench_options_to_json(options));
  CHECK(o.bandwidth_probe);
  CHECK(o.context == options.context);
  CHECK(o.json_path == "x.json");
  CHECK(o.stop.max_noise == 0.02);
  CHECK(o.stop.timeout_s == options.stop.timeout_s);
  CHECK(o.stop.estimator == NoiseEstimator::kStdevMean);
  CHECK(o.cache_mode == CacheMode::kCold);
  CHECK(o.llc_bytes == 32 << 20);
  CHECK(!o.drift_probe);
  CHECK(o.max_drift == 0.1);
}

TEST_CASE("serve_worker answers setup, time, check and bench requests", "[isolation]") {
  const CaseSetup setup = tiny_case("ragged_dot");
  const json setup_request = {
      {"cmd", "setup"}, {"op", "ragged_dot"},   {"args", setup.args.to_json()},
      {"seed", 3},      {"oracle_budget", 5e8}, {"dump_dir", ""}};
  const std::vector<json> responses = serve({
      {{"cmd", "time"},  // before setup
       {"impl", "reference"},
       {"config", json::object()},
       {"timing", timing_to_json(quick_timing())}},
      setup_request,
      {{"cmd", "oracle"}},
      {{"cmd", "time"},
       {"impl", "reference"},
       {"config", json::object()},
       {"timing", timing_to_json(quick_timing())}},
      {{"cmd", "check"}, {"impl", "reference"}, {"config", json::object()}},
      {{"cmd", "check"}, {"impl", "no_such_impl"}, {"config", json::object()}},
      {{"cmd", "bench"},
       {"jobs",
        {{{"impl", "reference"},
          {"config", json::object()},
          {"name", "ragged_dot/tiny/reference"},
          {"flops", 100.0},
          {"bytes", 10.0},
          {"label", ""}}}},
       {"options", two_sample_bench_json()}},
      {{"cmd", "frobnicate"}},
  });
  CHECK(responses[0]["ok"] == false);
  CHECK_THAT(responses[0]["reason"].get<std::string>(), Catch::Contains("no case"));
  CHECK(responses[1]["ok"] == true);
  CHECK(responses[2]["ok"] == true);
  CHECK(responses[3]["ok"] == true);
  CHECK(responses[3]["status"] == "ok");
  CHECK(responses[3]["samples"].size() >= 3);
  CHECK(responses[4]["ok"] == true);
  CHECK(all_pass(check_result_from_json(responses[4])));
  CHECK(responses[5]["ok"] == false);
  CHECK_THAT(responses[5]["reason"].get<std::string>(), Catch::Contains("no_such_impl"));
  CHECK(responses[6]["ok"] == true);
  const json& outcome = responses[6]["outcomes"][0];
  CHECK(outcome["status"] == "ok");
  CHECK(bench_stats_from_json(outcome["stats"]).samples_s.size() == 2);
  CHECK(responses[7]["ok"] == false);
}

TEST_CASE("WorkerProcess tells answers, crashes, exits and timeouts apart", "[isolation]") {
  SECTION("a line-echoing process answers each request") {
    WorkerProcess echo({"/bin/cat"});
    for (const char* line : {"{\"a\": 1}", "second"}) {
      const WorkerProcess::Reply reply = echo.exchange(line, 5.0, nullptr);
      CHECK(reply.status == "ok");
      CHECK(reply.line == line);
    }
  }
  SECTION("a program that cannot be started is an error at once") {
    CHECK_THROWS_WITH(WorkerProcess({"/no/such/program"}),
                      Catch::Contains("cannot run /no/such/program"));
  }
  SECTION("a signal is a crash that names the signal") {
    WorkerProcess crash({"/bin/sh", "-c", "read line; kill -SEGV $$"});
    const WorkerProcess::Reply reply = crash.exchange("go", 5.0, nullptr);
    CHECK(reply.status == "crash");
    CHECK(reply.reason == "killed by signal 11 (SIGSEGV)");
    CHECK(!crash.alive());
    CHECK(crash.exchange("again", 5.0, nullptr).status == "crash");
  }
  SECTION("an exit without an answer is a crash with the exit status") {
    WorkerProcess quits({"/bin/sh", "-c", "read line; exit 3"});
    const WorkerProcess::Reply reply = quits.exchange("go", 5.0, nullptr);
    CHECK(reply.status == "crash");
    CHECK(reply.reason == "worker exited with status 3");
  }
  SECTION("no answer in time kills the process group") {
    WorkerProcess hangs({"/bin/sh", "-c", "sleep 30 & sleep 30"});
    const pid_t pid = hangs.pid();
    const WorkerProcess::Reply reply = hangs.exchange("go", 0.2, nullptr);
    CHECK(reply.status == "timeout");
    CHECK_THAT(reply.reason, Catch::Contains("0.2 s"));
    CHECK(!hangs.alive());
    CHECK(kill(pid, 0) != 0);  // killed and reaped
  }
  SECTION("an interrupt kills the process and throws Interrupted") {
    WorkerProcess hangs({"/bin/sh", "-c", "sleep 30"});
    std::atomic<bool> interrupt{true};
    CHECK_THROWS_AS(hangs.exchange("go", 0.0, &interrupt), Interrupted);
    CHECK(!hangs.alive());
  }
}

TEST_CASE("WorkerRunner survives crashing, hanging and throwing candidates", "[isolation]") {
  const Implementation& faulty = fault_injection_op().implementation("faulty");
  WorkerOptions options;
  options.exe = kTestCli;
  options.timeout_s = 1.0;
  WorkerRunner runner(options);
  runner.setup(tiny_case("fault_injection"));
  CHECK(runner.starts() == 1);

  const TimeResult ok = runner.time(faulty, fault("ok"), quick_timing());
  CHECK(ok.status == "ok");
  CHECK(ok.samples.size() >= 3);

  const TimeResult crash = runner.time(faulty, fault("crash"), quick_timing());
  CHECK(crash.status == "crash");
  CHECK_THAT(crash.reason, Catch::Contains("SIGSEGV"));
  const TimeResult aborted = runner.time(faulty, fault("abort"), quick_timing());
  CHECK(aborted.status == "crash");
  CHECK_THAT(aborted.reason, Catch::Contains("SIGABRT"));
  const TimeResult hang = runner.time(faulty, fault("hang"), quick_timing());
  CHECK(hang.status == "timeout");
  const TimeResult thrown = runner.time(faulty, fault("throw"), quick_timing());
  CHECK(thrown.status == "error");
  CHECK(thrown.reason == "injected failure");
  CHECK(runner.starts() == 4);  // restarted after each crash and the timeout, not after throw

  CHECK(all_pass(runner.check(faulty, fault("ok"))));
  const CheckResult wrong = runner.check(faulty, fault("wrong"));
  CHECK(wrong.status == "ok");
  CHECK(!all_pass(wrong));
  CHECK(runner.check(faulty, fault("crash")).status == "crash");
  CHECK(all_pass(runner.check(faulty, fault("ok"))));  // a fresh worker, set up again

  const BenchOptions bench = two_sample_bench();
  std::vector<BenchJob> jobs(3);
  const char* modes[] = {"ok", "crash", "throw"};
  for (size_t k = 0; k < jobs.size(); ++k) {
    jobs[k].impl = &faulty;
    jobs[k].config = fault(modes[k]);
    jobs[k].name = std::string("fault_injection/tiny/") + modes[k];
  }
  const std::vector<BenchOutcome> outcomes = runner.bench(jobs, bench);
  REQUIRE(outcomes.size() == 3);
  CHECK(outcomes[0].status == "ok");
  CHECK(outcomes[0].stats.samples_s.size() == 2);
  CHECK(outcomes[1].status == "crash");
  CHECK(!outcomes[1].stats.ok);
  CHECK_THAT(outcomes[1].stats.error, Catch::StartsWith("crash: killed by signal"));
  CHECK(outcomes[2].status == "error");
  CHECK(outcomes[2].stats.error == "injected failure");
}

TEST_CASE("the worker's check of an implementation equals the in-process one", "[isolation]") {
  const Implementation& reference = ragged_dot_op().implementation("reference");
  WorkerOptions options;
  options.exe = kTestCli;
  WorkerRunner worker(options);
  LocalRunner local;
  const CaseSetup setup = tiny_case("ragged_dot");
  worker.setup(setup);
  local.setup(setup);
  const CheckResult a = worker.check(reference, json::object());
  const CheckResult b = local.check(reference, json::object());
  REQUIRE(a.comparisons.size() == 1);
  REQUIRE(b.comparisons.size() == 1);
  const Comparison& x = a.comparisons.at("out");
  const Comparison& y = b.comparisons.at("out");
  CHECK(x.max_abs_error == y.max_abs_error);
  CHECK(x.worst_ratio == y.worst_ratio);
  CHECK(x.sampled == y.sampled);
  CHECK(x.total == y.total);
}
