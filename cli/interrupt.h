// SIGINT and SIGTERM as a graceful stop for the commands that run cases (verify, bench, tune).
#pragma once

#include <atomic>

namespace tokamax::cli {

// While alive, the first SIGINT or SIGTERM sets flag(), which the case runners poll (the
// implementation running is abandoned: a worker is stopped, a local timing loop returns), so the
// command can print and write what it has finished and exit 130; the signal's default action is
// restored at once, so a second one ends the process. A batch system's SIGTERM before its
// SIGKILL (a time limit) thus still leaves every finished row on disk. The previous handlers
// come back on destruction. One scope at a time.
class InterruptScope {
 public:
  InterruptScope();
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

  const std::atomic<bool>* flag() const;
  bool interrupted() const { return flag()->load(); }
  // The signal that arrived first (SIGINT or SIGTERM), 0 when none did.
  int signal_number() const;

 private:
  void (*previous_int_)(int) = nullptr;
  void (*previous_term_)(int) = nullptr;
};

}  // namespace tokamax::cli
