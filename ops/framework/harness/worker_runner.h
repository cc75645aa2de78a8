// Isolation: a CaseRunner whose implementations run in a worker process (`tokamax worker`), so
// that a candidate that crashes or hangs costs its own result, not the command.
//
// The worker is the program itself, started with fork + exec (never a bare fork: the thread pool
// and oneDNN's OpenMP runtime do not survive one) in its own process group, with
// PR_SET_PDEATHSIG so that it dies with its parent. Requests and responses are JSON lines over a
// socket on the worker's stdin/stdout (ops/framework/harness/case_runner.h); the worker keeps its case's inputs
// and oracle between requests, so one worker serves every candidate of a case, and the next
// case too. After a crash or a timeout (the process group is killed) the next request starts a
// fresh worker and sets the case up again.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "ops/framework/harness/case_runner.h"

namespace tokamax {

// A child process that answers each line written to its stdin with one line on its stdout.
class WorkerProcess {
 public:
  // Starts argv[0] with these arguments (argv[0] is a path; "/proc/self/exe" is this program).
  explicit WorkerProcess(const std::vector<std::string>& argv);
  ~WorkerProcess();  // kills the process group and reaps the child
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  struct Reply {
    std::string status;  // "ok" (line holds the answer), "crash" or "timeout"
    std::string line;
    std::string reason;  // crash: "killed by signal 11 (SIGSEGV)"; timeout: the limit
  };
  // Sends `line` (no newline) and waits for one line back, at most timeout_s seconds (<= 0: no
  // limit). After "crash" or "timeout" the process is gone (killed and reaped) and alive() is
  // false. When *interrupt is raised while waiting, kills the process and throws Interrupted.
  Reply exchange(const std::string& line, double timeout_s, const std::atomic<bool>* interrupt);
  bool alive() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

 private:
  void kill_and_reap();
  std::string reap_reason();  // waits for the exited child, describes how it ended

  pid_t pid_ = -1;
  int fd_ = -1;
  std::string pending_;  // bytes read past the last complete line
};

// "SIGSEGV" for 11; "signal N" when unknown.
std::string signal_name(int signal);

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
  std::vector<BenchOutcome> bench(const std::vector<BenchJob>& jobs,
                                  const BenchOptions& options) override;

  // Workers started so far (1 + restarts after crashes and timeouts); for tests and reports.
  int starts() const { return starts_; }

 private:
  // Starts a worker and sets the case up when there is none; throws when that fails.
  void ensure_ready();
  // One request with the candidate timeout; crash / timeout come back as the reply's status.
  WorkerProcess::Reply request(const nlohmann::json& message, double timeout_s);
  // A response line that must be {"ok": true, ...}; otherwise throws with the worker's reason.
  nlohmann::json parse_ok(const WorkerProcess::Reply& reply, const std::string& what);

  WorkerOptions options_;
  std::unique_ptr<WorkerProcess> process_;
  std::optional<CaseSetup> setup_;
  bool case_ready_ = false;    // the live worker holds setup_
  bool oracle_ready_ = false;  // ... and its oracle
  int starts_ = 0;
};

}  // namespace tokamax
