// SIGINT / SIGTERM handling for the case-running commands (interrupt.h).
#include "cli/interrupt.h"

#include <csignal>

namespace tokamax::cli {
namespace {

std::atomic<bool> g_interrupted{false};
std::atomic<int> g_signal{0};

// Async-signal-safe: lock-free atomics and signal() only.
extern "C" void on_stop_signal(int signal_number) {
  int none = 0;
  g_signal.compare_exchange_strong(none, signal_number);
  g_interrupted.store(true);
  std::signal(signal_number, SIG_DFL);
}

}  // namespace

InterruptScope::InterruptScope() {
  g_interrupted.store(false);
  g_signal.store(0);
  previous_int_ = std::signal(SIGINT, on_stop_signal);
  previous_term_ = std::signal(SIGTERM, on_stop_signal);
}

InterruptScope::~InterruptScope() {
  std::signal(SIGINT, previous_int_ == SIG_ERR ? SIG_DFL : previous_int_);
  std::signal(SIGTERM, previous_term_ == SIG_ERR ? SIG_DFL : previous_term_);
}

const std::atomic<bool>* InterruptScope::flag() const { return &g_interrupted; }

int InterruptScope::signal_number() const { return g_signal.load(); }

}  // namespace tokamax::cli
