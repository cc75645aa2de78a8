// Tests of scripts/gpu_run_checks.sh's time plan on the CPU, with a stand-in tokamax whose verify
// hangs: the hanging step is stopped at its limit, the later steps are skipped once the budget is
// spent, and the whole run stays inside the budget.
#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "tests/test_util.h"

using namespace tokamax::testing;

TEST_CASE("the GPU check stops a hanging step at its limit and keeps to its budget",
          "[gpu_check]") {
  ScratchDir dir;
  const std::string fake = dir.file("tokamax");
  write_file(fake,
             "#!/bin/sh\n"
             "case \"$1\" in\n"
             "  verify) exec sleep 100 ;;\n"
             "  *) echo \"stand-in tokamax $*\" ;;\n"
             "esac\n");
  REQUIRE(run_command("chmod +x " + fake).exit_code == 0);
  const std::string script = std::string(TOKAMAX_SOURCE_DIR) + "/scripts/gpu_run_checks.sh";
  const auto begin = std::chrono::steady_clock::now();
  const CommandResult r = run_command("TOKAMAX_CHECK_BIN=" + fake +
                                      " TOKAMAX_CHECK_BUDGET_S=14 TOKAMAX_CHECK_DEVICE=cpu bash " +
                                      script + " " + dir.file("results"));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  const std::string summary = read_file(dir.file("results/summary.txt"));
  INFO(r.output << "\n" << summary);
  CHECK(r.exit_code == 0);
  CHECK_THAT(summary, Catch::Contains("plan: every step below within 14s"));
  CHECK_THAT(summary, Catch::Contains("step info: exit 0"));
  // The first verify hangs: stopped at what was left of the budget.
  CHECK_THAT(summary, Catch::Contains("step verify-cuda-ci_tests: timed out after"));
  CHECK_THAT(summary, Catch::Contains("skipped (the 14s budget is spent)"));
  CHECK(seconds < 14 + 8);
}
