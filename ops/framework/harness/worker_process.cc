// The worker process: fork + exec, a socket for the request lines, deadlines, crash
// classification.
#include "ops/framework/harness/worker_process.h"

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

}  // namespace

std::string signal_name(int signal) {
  const char* abbrev = sigabbrev_np(signal);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(signal);
}

WorkerProcess::WorkerProcess(const std::vector<std::string>& argv) {
  if (argv.empty()) throw InvalidArgument("worker: empty command line");
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
    kill_and_reap();
    throw std::runtime_error("worker: cannot run " + argv[0] + ": " + std::strerror(error));
  }
}

WorkerProcess::~WorkerProcess() { kill_and_reap(); }

void WorkerProcess::kill_and_reap() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  if (pid_ > 0) {
    kill(-pid_, SIGKILL);
    kill(pid_, SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  pid_ = -1;
  pending_.clear();
}

std::string WorkerProcess::reap_reason() {
  // The worker closed its end: it is exiting. Give it a moment, then make sure.
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 200 && done == 0; ++i) {
    done = waitpid(pid_, &status, WNOHANG);
    if (done == 0) usleep(5000);
  }
  std::string reason;
  if (done == pid_ && WIFSIGNALED(status)) {
    reason = "killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
             signal_name(WTERMSIG(status)) + ")";
  } else if (done == pid_ && WIFEXITED(status)) {
    reason = "worker exited with status " + std::to_string(WEXITSTATUS(status));
  } else {
    reason = "worker closed its output";
  }
  if (done == pid_) pid_ = -1;  // reaped: nothing left to kill
  kill_and_reap();
  return reason;
}

WorkerProcess::Reply WorkerProcess::exchange(const std::string& line, double timeout_s,
                                             const std::atomic<bool>* interrupt) {
  if (!alive()) return Reply{"crash", "", "worker is not running"};
  const std::string message = line + "\n";
  size_t sent = 0;
  while (sent < message.size()) {
    const ssize_t n = send(fd_, message.data() + sent, message.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Reply{"crash", "", reap_reason()};
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
      kill_and_reap();
      throw Interrupted();
    }
    const double left = deadline - wall_seconds();
    if (left <= 0) {
      kill_and_reap();
      return Reply{"timeout", "", "no answer within " + seconds_text(timeout_s) + "; killed"};
    }
    // Short slices: Ctrl-C is noticed within 50 ms.
    pollfd poll_fd{fd_, POLLIN, 0};
    const int wait_ms = static_cast<int>(std::ceil(std::min(left, 0.05) * 1000));
    const int ready = poll(&poll_fd, 1, wait_ms);
    if (ready < 0 && errno != EINTR) return Reply{"crash", "", reap_reason()};
    if (ready <= 0) continue;
    char buffer[65536];
    const ssize_t n = read(fd_, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Reply{"crash", "", reap_reason()};
    pending_.append(buffer, static_cast<size_t>(n));
  }
}

}  // namespace tokamax
