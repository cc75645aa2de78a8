// Tests for the progress line of long commands (cli/progress.h).
#include "cli/progress.h"

#include <catch2/catch.hpp>
#include <iostream>
#include <sstream>

using tokamax::cli::ProgressLine;

TEST_CASE("the progress line says the case, the step and the elapsed times", "[cli]") {
  CHECK(ProgressLine::text(3, 12, "ragged_dot/smoke_f32: cpu", 42.7, 125.2) ==
        "[case 3/12] ragged_dot/smoke_f32: cpu, 42 s (2:05 in all)");
  CHECK(ProgressLine::text(1, 1, "x", 0, 3600) == "[case 1/1] x, 0 s (60:00 in all)");
}

TEST_CASE("a disabled progress line writes nothing", "[cli]") {
  std::stringstream captured;
  std::streambuf* old = std::cerr.rdbuf(captured.rdbuf());
  {
    ProgressLine line(false);
    line.show(1, 2, "op/spec: cpu");
    line.clear();
  }
  std::cerr.rdbuf(old);
  CHECK(captured.str().empty());
}
