// The worker process: the program itself started with fork + exec in its own process group,
// answering each request line on its stdin with one line on its stdout; deadlines, crash
// classification and reaping.
//
// Never a bare fork: the thread pool and oneDNN's OpenMP runtime do not survive one. The child gets
// PR_SET_PDEATHSIG so that it dies with its parent. Every child is waited for by this object, on
// every path (answer, crash, timeout, interrupt, exec failure, destruction): tokamax never leaves
// its workers to an init process, which in a container may not reap them.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <string>
#include <vector>

namespace tokamax {

// A child process that answers each line written to its stdin with one line on its stdout.
class WorkerProcess {
 public:
  // Seconds a worker gets to exit after SIGTERM, or after it closed its pipe, before SIGKILL.
  static constexpr double kGraceS = 1.0;

  // Starts argv[0] with these arguments (argv[0] is a path; "/proc/self/exe" is this program).
  // In a process that ignores SIGCHLD (an inherited SIG_IGN), the kernel would reap workers
  // itself and waitpid could not tell how one ended: SIGCHLD is set back to its default action.
  explicit WorkerProcess(const std::vector<std::string>& argv);
  // Closes the pipe (a worker exits at end of file), waits up to kGraceS, then kills the process
  // group; reaps the child.
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  struct Reply {
    std::string status;  // "ok" (line holds the answer), "crash" or "timeout"
    std::string line;
    // crash: "killed by signal 11 (SIGSEGV)", "worker exited with status 3", "worker closed its
    // pipe without answering; killed"; timeout: "no answer within 2 s; killed" (SIGTERM was
    // enough) or "no answer within 2 s; ignored SIGTERM, killed with SIGKILL".
    std::string reason;
  };
  // Sends `line` (no newline) and waits for one line back, at most timeout_s seconds (<= 0: no
  // limit). After "crash" or "timeout" the process is gone (killed and reaped) and alive() is
  // false. When *interrupt is raised while waiting, kills the process and throws Interrupted.
  Reply exchange(const std::string& line, double timeout_s, const std::atomic<bool>* interrupt);
  bool alive() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

 private:
  // Whether the child has ended, waiting up to `seconds`; it is not reaped (its pid, which is
  // also the process group's id, stays reserved until reap()).
  bool wait_ended(double seconds);
  // SIGKILL to the process group (what is left of it), then waits for the child. Returns its
  // wait status (-1 when there was none to wait for).
  int reap();
  // SIGTERM to the process group, up to kGraceS for the child to end, then reap(). Returns
  // whether SIGTERM was enough; *status: how the child ended.
  bool terminate(int* status);
  std::string ended_reason();  // after end of file or a failed send: how the child ended

  pid_t pid_ = -1;
  int fd_ = -1;
  std::string pending_;  // bytes read past the last complete line
};

// "SIGSEGV" for 11; "signal N" when unknown.
std::string signal_name(int signal);

// How a child ended, from its wait status: "killed by signal 11 (SIGSEGV)", "killed by signal 9
// (SIGKILL: the OOM killer or kill -9)", "worker exited with status 3".
std::string wait_status_reason(int status);

}  // namespace tokamax
