// The progress line of long commands (see progress.h).
#include "cli/progress.h"

#include <cstdio>
#include <iostream>

namespace tokamax::cli {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::string minutes_seconds(double s) {
  const long total = static_cast<long>(s);
  char text[32];
  std::snprintf(text, sizeof(text), "%ld:%02ld", total / 60, total % 60);
  return text;
}

}  // namespace

ProgressLine::ProgressLine(bool enabled)
    : enabled_(enabled), start_(std::chrono::steady_clock::now()) {
  if (enabled_) ticker_ = std::thread([this] { tick(); });
}

ProgressLine::~ProgressLine() {
  if (!enabled_) return;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  ticker_.join();
  clear();
}

std::string ProgressLine::text(int case_index, int num_cases, const std::string& what,
                               double step_s, double total_s) {
  return "[case " + std::to_string(case_index) + "/" + std::to_string(num_cases) + "] " + what +
         ", " + std::to_string(static_cast<long>(step_s)) + " s (" + minutes_seconds(total_s) +
         " in all)";
}

void ProgressLine::show(int case_index, int num_cases, const std::string& what) {
  if (!enabled_) return;
  const std::lock_guard<std::mutex> lock(mutex_);
  case_index_ = case_index;
  num_cases_ = num_cases;
  what_ = what;
  step_start_ = std::chrono::steady_clock::now();
  visible_ = true;
  draw_locked();
}

void ProgressLine::clear() {
  if (!enabled_) return;
  const std::lock_guard<std::mutex> lock(mutex_);
  if (visible_) std::cerr << "\r\033[K" << std::flush;
  visible_ = false;
}

void ProgressLine::draw_locked() {
  std::cerr << "\r\033[K"
            << text(case_index_, num_cases_, what_, seconds_since(step_start_),
                    seconds_since(start_))
            << std::flush;
}

void ProgressLine::tick() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::seconds(1));
    if (!stop_ && visible_) draw_locked();
  }
}

}  // namespace tokamax::cli
