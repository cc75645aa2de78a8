// The worker process: the program itself started with fork + exec in its own process group,
// answering each request line on its stdin with one line on its stdout; deadlines and crash
// classification.
//
// Never a bare fork: the thread pool and oneDNN's OpenMP runtime do not survive one. The child gets
// PR_SET_PDEATHSIG so that it dies with its parent.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <string>
#include <vector>

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

}  // namespace tokamax
