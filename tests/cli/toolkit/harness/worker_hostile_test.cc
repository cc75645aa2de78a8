// Hostile workers: SIGKILL from outside (OOM killer, kill -9), SIGTERM ignored, the pipe closed
// early, inherited signal settings; the retry of setup and oracle in a fresh worker; no zombies.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <optional>

#include "backends/clock.h"
#include "cli/toolkit/harness/worker_runner.h"
#include "tests/cli/toolkit/harness/harness_test_util.h"
#include "tests/support/fault_injection_op.h"
#include "tests/test_util.h"

using namespace tokamax;
using namespace tokamax::testing;

namespace {

// Sets an environment variable (which workers inherit) for the scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

WorkerRunner make_runner() {
  WorkerOptions options;
  options.exe = kTestCli;
  options.timeout_s = 1.0;
  return WorkerRunner(options);
}

}  // namespace

TEST_CASE("WorkerProcess names SIGKILL, an ignored SIGTERM and a closed pipe", "[isolation]") {
  SECTION("SIGKILL: the OOM killer or kill -9") {
    WorkerProcess killed({"/bin/sh", "-c", "read line; kill -KILL $$"});
    const WorkerProcess::Reply reply = killed.exchange("go", 5.0, nullptr);
    CHECK(reply.status == "crash");
    CHECK(reply.reason == "killed by signal 9 (SIGKILL: the OOM killer or kill -9)");
  }
  SECTION("a timeout sends SIGTERM first; SIGKILL when it is ignored") {
    WorkerProcess polite({"/bin/sh", "-c", "sleep 30"});
    double begin = wall_seconds();
    const WorkerProcess::Reply obeyed = polite.exchange("go", 0.2, nullptr);
    CHECK(obeyed.status == "timeout");
    CHECK(obeyed.reason == "no answer within 0.2 s; killed");
    CHECK(wall_seconds() - begin < 0.2 + WorkerProcess::kGraceS);

    WorkerProcess stubborn({"/bin/sh", "-c", "trap '' TERM; sleep 30"});
    begin = wall_seconds();
    const WorkerProcess::Reply ignored = stubborn.exchange("go", 0.2, nullptr);
    CHECK(ignored.status == "timeout");
    CHECK(ignored.reason == "no answer within 0.2 s; ignored SIGTERM, killed with SIGKILL");
    CHECK(wall_seconds() - begin >= 0.2 + WorkerProcess::kGraceS);
    CHECK(!stubborn.alive());
  }
  SECTION("a worker that closes its pipe and lingers is killed") {
    WorkerProcess closes({"/bin/sh", "-c", "exec 0<&- 1>&-; sleep 30"});
    const WorkerProcess::Reply reply = closes.exchange("go", 5.0, nullptr);
    CHECK(reply.status == "crash");
    CHECK(reply.reason == "worker closed its pipe without answering; killed");
    CHECK(!closes.alive());
  }
  SECTION("a worker starts with SIGTERM at its default action, whatever the parent ignores") {
    struct sigaction ignore {
    }, previous{};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    REQUIRE(sigaction(SIGTERM, &ignore, &previous) == 0);
    WorkerProcess inherits({"/bin/sh", "-c", "sleep 30"});
    sigaction(SIGTERM, &previous, nullptr);
    const WorkerProcess::Reply reply = inherits.exchange("go", 0.2, nullptr);
    CHECK(reply.reason == "no answer within 0.2 s; killed");
  }
  SECTION("with SIGCHLD ignored by the parent, crashes are still classified") {
    struct sigaction ignore {
    }, previous{};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    REQUIRE(sigaction(SIGCHLD, &ignore, &previous) == 0);
    WorkerProcess crash({"/bin/sh", "-c", "read line; kill -SEGV $$"});
    const WorkerProcess::Reply reply = crash.exchange("go", 5.0, nullptr);
    CHECK(reply.reason == "killed by signal 11 (SIGSEGV)");
    struct sigaction now {};
    sigaction(SIGCHLD, nullptr, &now);
    CHECK(now.sa_handler == SIG_DFL);
    sigaction(SIGCHLD, &previous, nullptr);
  }
  CHECK(zombie_children() == 0);
}

TEST_CASE("WorkerRunner goes on after an OOM kill, an ignored SIGTERM and a closed pipe",
          "[isolation]") {
  const ScopedEnv oom_limit("TOKAMAX_FAULT_OOM_MB", "128");
  const Implementation& faulty = fault_injection_op().implementation("faulty");
  WorkerRunner runner = make_runner();
  runner.setup(tiny_case("fault_injection"));

  const TimeResult oom = runner.time(faulty, fault("oom"), quick_timing());
  CHECK(oom.status == "crash");
  CHECK(oom.reason == "killed by signal 9 (SIGKILL: the OOM killer or kill -9)");
  CHECK(runner.time(faulty, fault("ok"), quick_timing()).status == "ok");

  const TimeResult stubborn = runner.time(faulty, fault("ignore_sigterm"), quick_timing());
  CHECK(stubborn.status == "timeout");
  CHECK(stubborn.reason == "no answer within 1 s; ignored SIGTERM, killed with SIGKILL");
  CHECK(all_pass(runner.check(faulty, fault("ok"))));

  const CheckResult closed = runner.check(faulty, fault("close_pipe"));
  CHECK(closed.status == "crash");
  CHECK(closed.reason == "worker closed its pipe without answering; killed");
  CHECK(runner.time(faulty, fault("ok"), quick_timing()).status == "ok");
  CHECK(runner.starts() == 4);
  // A candidate's death is the candidate's: nothing was retried.
  CHECK(runner.take_retries().empty());
  CHECK(zombie_children() == 0);
}

TEST_CASE("WorkerRunner retries setup and oracle once in a fresh worker", "[isolation]") {
  ScratchDir dir;
  const Implementation& faulty = fault_injection_op().implementation("faulty");
  for (const char* step : {"setup", "oracle"}) {
    const std::string what =
        std::string(step) == "setup" ? "setting up the case" : "computing the oracle";
    const ScopedEnv kill_in("TOKAMAX_FAULT_KILL", step);
    SECTION(std::string(step) + ": killed once, the retry succeeds") {
      const ScopedEnv file("TOKAMAX_FAULT_KILL_FILE", dir.file(std::string(step) + "-once"));
      WorkerRunner runner = make_runner();
      runner.setup(tiny_case("fault_injection"));
      CHECK(all_pass(runner.check(faulty, fault("ok"))));
      CHECK(runner.starts() == 2);
      const std::vector<std::string> retries = runner.take_retries();
      REQUIRE(retries.size() == 1);
      CHECK(retries[0] == "the worker died " + what +
                              " (killed by signal 9 (SIGKILL: the OOM killer or kill -9)); "
                              "retried in a fresh worker");
      CHECK(runner.take_retries().empty());
    }
    SECTION(std::string(step) + ": killed twice, the case is lost") {
      const ScopedEnv file("TOKAMAX_FAULT_KILL_FILE", dir.file(std::string(step) + "-twice"));
      const ScopedEnv times("TOKAMAX_FAULT_KILL_TIMES", "2");
      WorkerRunner runner = make_runner();
      const auto run = [&] {
        runner.setup(tiny_case("fault_injection"));
        runner.check(faulty, fault("ok"));
      };
      CHECK_THROWS_AS(run(), CaseLost);
      CHECK(runner.starts() == 2);
      try {
        WorkerRunner again = make_runner();  // a third worker: the kills are used up
        again.setup(tiny_case("fault_injection"));
        CHECK(all_pass(again.check(faulty, fault("ok"))));
      } catch (const CaseLost& e) {
        FAIL(e.what());
      }
    }
    SECTION(std::string(step) + ": the message names the step and both deaths") {
      const ScopedEnv file("TOKAMAX_FAULT_KILL_FILE", dir.file(std::string(step) + "-message"));
      const ScopedEnv times("TOKAMAX_FAULT_KILL_TIMES", "2");
      WorkerRunner runner = make_runner();
      try {
        runner.setup(tiny_case("fault_injection"));
        runner.check(faulty, fault("ok"));
        FAIL("no CaseLost");
      } catch (const CaseLost& e) {
        const std::string signal = "killed by signal 9 (SIGKILL: the OOM killer or kill -9)";
        CHECK(std::string(e.what()) == "the worker died " + what + " twice (" + signal +
                                           "; then, in a fresh worker, " + signal + ")");
      }
    }
  }
  CHECK(zombie_children() == 0);
}
