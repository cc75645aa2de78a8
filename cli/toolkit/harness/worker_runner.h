// Isolation: a CaseRunner whose implementations run in a worker process (`tokamax worker`), so
// that a candidate that crashes or hangs costs its own result, not the command.
//
// The worker is the program itself (`tokamax worker`, worker_process.h). Requests and responses
// are JSON lines over a socket on the worker's stdin/stdout (worker_protocol.h); the worker keeps
// its case's inputs and oracle between requests, so one worker serves every candidate of a case,
// and the next case too. After a crash or a timeout (the process group is killed) the next request
// starts a fresh worker and sets the case up again. A worker that dies setting the case up or
// computing its oracle is retried once in a fresh worker; a second death throws CaseLost.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "cli/toolkit/harness/case_runner.h"
#include "cli/toolkit/harness/worker_process.h"

namespace tokamax {

struct WorkerOptions {
  // The program to start as `<exe> worker`; default: this program.
  std::string exe = "/proc/self/exe";
  // Seconds one time / check / bench request (one candidate, one implementation) may take; <= 0
  // means no limit. Setting a case up and computing its oracle have no limit.
  double timeout_s = 60.0;
  const std::atomic<bool>* interrupt = nullptr;  // Ctrl-C: kill the worker, throw Interrupted
};

class WorkerRunner final : public CaseRunner {
 public:
  explicit WorkerRunner(WorkerOptions options);
  ~WorkerRunner() override;
  void setup(const CaseSetup& setup) override;
  TimeResult time(const Implementation& impl, const nlohmann::json& config,
                  const TimingOptions& timing) override;
  CheckResult check(const Implementation& impl, const nlohmann::json& config,
                    const std::string& dump_dir = "") override;
  // One request per job; with options.rounds > 1 one request for all of them (the rounds
  // interleave the jobs in one process), and one per job again if that worker dies.
  std::vector<BenchOutcome> bench(const std::vector<BenchJob>& jobs,
                                  const BenchOptions& options) override;
  std::vector<std::string> take_retries() override;

  // Workers started so far (1 + restarts after crashes and timeouts); for tests and reports.
  int starts() const { return starts_; }

 private:
  // Starts a worker and sets the case up when there is none; throws when that fails (CaseLost
  // when the worker died twice).
  void ensure_ready();
  // ensure_ready(), then the oracle computed in the worker.
  void ensure_oracle();
  // The worker died in step `what` (reply: crash). The first time (first_death empty) notes a
  // retry and keeps the reason there; the second throws CaseLost naming both.
  void lost_worker(const std::string& what, const WorkerProcess::Reply& reply,
                   std::string& first_death);
  // One request with the candidate timeout; crash / timeout come back as the reply's status.
  WorkerProcess::Reply request(const nlohmann::json& message, double timeout_s);
  // One exchange with the live worker: a device fault's response becomes a crash; after a
  // crash or timeout the worker is dropped, so that the next request starts a fresh one.
  WorkerProcess::Reply exchange(const nlohmann::json& message, double timeout_s);
  // A response line that must be {"ok": true, ...}; otherwise throws with the worker's reason.
  nlohmann::json parse_ok(const WorkerProcess::Reply& reply, const std::string& what);

  WorkerOptions options_;
  std::unique_ptr<WorkerProcess> process_;
  std::optional<CaseSetup> setup_;
  bool case_ready_ = false;    // the live worker holds setup_
  bool oracle_ready_ = false;  // ... and its oracle
  int starts_ = 0;
  std::vector<std::string> retries_;  // since the last take_retries()
};

}  // namespace tokamax
