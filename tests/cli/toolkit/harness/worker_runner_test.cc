// WorkerProcess (crash / exit / timeout / interrupt classification) and WorkerRunner against the
// fault-injection op, and the worker's check against the in-process one.
#include "cli/toolkit/harness/worker_runner.h"

#include <signal.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>

#include "ops/framework/errors.h"
#include "cli/toolkit/harness/local_runner.h"
#include "tests/cli/toolkit/harness/harness_test_util.h"
#include "tests/support/fault_injection_op.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

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
