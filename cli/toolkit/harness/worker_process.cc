// The worker process: fork + exec, a socket for the request lines, deadlines, crash
// classification, SIGTERM then SIGKILL, and reaping.
#include "cli/toolkit/harness/worker_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "backends/clock.h"
#include "ops/framework/errors.h"

namespace tokamax {
namespace {

std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g s", s);
  return text;
}

// A process started with SIGCHLD ignored (SIG_IGN survives exec; some launchers pass it on) has
// its children reaped by the kernel: waitpid then blocks until every child has ended and fails,
// and a crash could not be told from a clean exit. Workers need the default action, which
// reaps nothing by itself (each worker is waited for by its WorkerProcess).
void restore_default_sigchld() {
  struct sigaction current {};
  if (sigaction(SIGCHLD, nullptr, &current) != 0) return;
  if (current.sa_handler == SIG_IGN || (current.sa_flags & SA_NOCLDWAIT) != 0) {
    struct sigaction default_action {};
    default_action.sa_handler = SIG_DFL;
    sigemptyset(&default_action.sa_mask);
    sigaction(SIGCHLD, &default_action, nullptr);
  }
}

}  // namespace

std::string signal_name(int signal) {
  const char* abbrev = sigabbrev_np(signal);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(signal);
}

std::string wait_status_reason(int status) {
  if (status != -1 && WIFSIGNALED(status)) {
    const int signal = WTERMSIG(status);
    std::string reason = "killed by signal " + std::to_string(signal) + " (" + signal_name(signal);
    // No worker sends itself SIGKILL; the kernel's OOM killer does, and so does `kill -9`.
    if (signal == SIGKILL) reason += ": the OOM killer or kill -9";
    return reason + ")";
  }
  if (status != -1 && WIFEXITED(status)) {
    return "worker exited with status " + std::to_string(WEXITSTATUS(status));
  }
  return "worker ended; its exit status was lost";
}

WorkerProcess::WorkerProcess(const std::vector<std::string>& argv) {
  if (argv.empty()) throw InvalidArgument("worker: empty command line");
  restore_default_sigchld();
  int sockets[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets) != 0) {
    throw std::runtime_error(std::string("worker: socketpair: ") + std::strerror(errno));
  }
  // Everything the child needs is prepared before fork: between fork and exec only
  // async-signal-safe calls are allowed (the parent has other threads).
  std::vector<std::string> args = argv;
  std::vector<char*> raw;
  for (std::string& arg : args) raw.push_back(arg.data());
  raw.push_back(nullptr);
  sigset_t no_signals;
  sigemptyset(&no_signals);
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  // exec failures come back through a close-on-exec pipe: end of file means exec succeeded.
  int exec_status[2];
  if (pipe2(exec_status, O_CLOEXEC) != 0) {
    close(sockets[0]);
    close(sockets[1]);
    throw std::runtime_error(std::string("worker: pipe: ") + std::strerror(errno));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    for (int fd : {sockets[0], sockets[1], exec_status[0], exec_status[1]}) close(fd);
    throw std::runtime_error(std::string("worker: fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    // Own process group: the parent kills the whole group on a timeout, and a terminal's Ctrl-C
    // reaches only the parent, which decides. Dies with the parent.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    // Default actions and nothing blocked, whatever the parent inherited (an ignored SIGTERM
    // would cost every timeout the grace period), except SIGHUP, which nohup ignores on purpose.
    for (int signal = 1; signal < NSIG; ++signal) {
      if (signal != SIGHUP && signal != SIGKILL && signal != SIGSTOP) {
        sigaction(signal, &default_action, nullptr);
      }
    }
    sigprocmask(SIG_SETMASK, &no_signals, nullptr);
    dup2(sockets[1], STDIN_FILENO);  // dup2 clears close-on-exec on the copies
    dup2(sockets[1], STDOUT_FILENO);
    execv(raw[0], raw.data());
    const int error = errno;
    if (write(exec_status[1], &error, sizeof(error))) {
    }
    _exit(127);
  }
  setpgid(pid, pid);  // also here, so that a kill right after fork finds the group
  close(sockets[1]);
  close(exec_status[1]);
  pid_ = pid;
  fd_ = sockets[0];
  int error = 0;
  ssize_t n;
  while ((n = read(exec_status[0], &error, sizeof(error))) < 0 && errno == EINTR) {
  }
  close(exec_status[0]);
  if (n > 0) {
    reap();
    throw std::runtime_error("worker: cannot run " + argv[0] + ": " + std::strerror(error));
  }
}

WorkerProcess::~WorkerProcess() {
  if (pid_ <= 0) return;
  // End of file ends serve_worker's loop: the worker exits by itself, its device released and
  // its exit handlers (sanitizers, coverage) run.
  close(fd_);
  fd_ = -1;
  wait_ended(kGraceS);
  reap();
}

bool WorkerProcess::wait_ended(double seconds) {
  const double deadline = wall_seconds() + seconds;
  for (;;) {
    // WNOWAIT: the child stays a zombie, so its pid (the group's id) cannot be reused before
    // reap() kills the rest of the group.
    siginfo_t info{};
    const int result = waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT);
    if (result == 0 && info.si_pid == pid_) return true;
    if (result < 0 && errno != EINTR) return true;  // nothing left to wait for
    if (wall_seconds() >= deadline) return false;
    usleep(2000);
  }
}

int WorkerProcess::reap() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  pending_.clear();
  int status = -1;
  if (pid_ > 0) {
    kill(-pid_, SIGKILL);  // the worker and whatever it started in its group
    kill(pid_, SIGKILL);   // in case it left the group
    int result;
    while ((result = waitpid(pid_, &status, 0)) < 0 && errno == EINTR) {
    }
    if (result != pid_) status = -1;
  }
  pid_ = -1;
  return status;
}

bool WorkerProcess::terminate(int* status) {
  kill(-pid_, SIGTERM);
  const bool ended = wait_ended(kGraceS);
  *status = reap();
  return ended;
}

std::string WorkerProcess::ended_reason() {
  // The worker's end of the socket is closed: it is exiting, or it closed its pipe.
  if (wait_ended(kGraceS)) return wait_status_reason(reap());
  int status = -1;
  const bool obeyed = terminate(&status);
  // Still dying of a signal of its own after the grace period (a core dump takes time).
  if (status != -1 && WIFSIGNALED(status) && WTERMSIG(status) != SIGTERM &&
      WTERMSIG(status) != SIGKILL) {
    return wait_status_reason(status);
  }
  return obeyed ? "worker closed its pipe without answering; killed"
                : "worker closed its pipe without answering and ignored SIGTERM; killed with "
                  "SIGKILL";
}

WorkerProcess::Reply WorkerProcess::exchange(const std::string& line, double timeout_s,
                                             const std::atomic<bool>* interrupt) {
  if (!alive()) return Reply{"crash", "", "worker is not running"};
  const std::string message = line + "\n";
  size_t sent = 0;
  while (sent < message.size()) {
    const ssize_t n = send(fd_, message.data() + sent, message.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Reply{"crash", "", ended_reason()};
    sent += static_cast<size_t>(n);
  }
  const double deadline = timeout_s > 0 ? wall_seconds() + timeout_s : INFINITY;
  for (;;) {
    const size_t newline = pending_.find('\n');
    if (newline != std::string::npos) {
      Reply reply{"ok", pending_.substr(0, newline), ""};
      pending_.erase(0, newline + 1);
      return reply;
    }
    if (interrupt != nullptr && interrupt->load()) {
      reap();  // Ctrl-C: at once, no grace period
      throw Interrupted();
    }
    const double left = deadline - wall_seconds();
    if (left <= 0) {
      int status = -1;
      const bool obeyed = terminate(&status);
      return Reply{"timeout", "",
                   "no answer within " + seconds_text(timeout_s) +
                       (obeyed ? "; killed" : "; ignored SIGTERM, killed with SIGKILL")};
    }
    // Short slices: Ctrl-C is noticed within 50 ms.
    pollfd poll_fd{fd_, POLLIN, 0};
    const int wait_ms = static_cast<int>(std::ceil(std::min(left, 0.05) * 1000));
    const int ready = poll(&poll_fd, 1, wait_ms);
    if (ready < 0 && errno != EINTR) return Reply{"crash", "", ended_reason()};
    if (ready <= 0) continue;
    char buffer[65536];
    const ssize_t n = read(fd_, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Reply{"crash", "", ended_reason()};
    pending_.append(buffer, static_cast<size_t>(n));
  }
}

}  // namespace tokamax
