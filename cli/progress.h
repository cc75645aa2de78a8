// The progress line of long commands (verify, bench): case i of n, what runs, elapsed time, on
// stderr when it is a terminal, redrawn in place each second, and never mixed into the table.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace tokamax::cli {

class ProgressLine {
 public:
  // Draws nothing unless `enabled` (stderr is a terminal and the command is not quiet).
  explicit ProgressLine(bool enabled);
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // Shows "[case i/n] what, Ns (M:SS in all)": the seconds count from this call, the total from
  // the line's construction. Stays (and ticks) until the next show() or clear().
  void show(int case_index, int num_cases, const std::string& what);
  // Erases the line, before the command prints a row on the same terminal.
  void clear();

  // The text show() draws, for tests.
  static std::string text(int case_index, int num_cases, const std::string& what, double step_s,
                          double total_s);

 private:
  void draw_locked();
  void tick();

  const bool enabled_;
  const std::chrono::steady_clock::time_point start_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  bool visible_ = false;
  int case_index_ = 0, num_cases_ = 0;
  std::string what_;
  std::chrono::steady_clock::time_point step_start_;
  std::thread ticker_;
};

}  // namespace tokamax::cli
