// The suite's own test names must survive ctest's registration: catch_discover_tests turns them
// into a CMake list, which splits a name at ';' and merges names across an unbalanced '['. Such a
// name becomes a ctest entry that matches no test case (and fails with "No tests ran", naming
// none of the tests it swallowed); this test names the culprit instead.
#include <catch2/catch.hpp>
#include <string>

namespace {

// Why `name` would not survive a CMake list, or "" when it would.
std::string registration_problem(const std::string& name) {
  if (name.find(';') != std::string::npos) return "it holds a ';'";
  int depth = 0;
  for (char c : name) {
    if (c == '[') ++depth;
    if (c == ']' && --depth < 0) return "a ']' closes no '['";
  }
  return depth == 0 ? "" : "a '[' is never closed";
}

}  // namespace

TEST_CASE("every test name survives ctest's registration (no semicolons, balanced brackets)",
          "[meta]") {
  CHECK(registration_problem("rows [start, end) of out") == "a '[' is never closed");
  CHECK(registration_problem("a; b") == "it holds a ';'");
  CHECK(registration_problem("clips to [0, n]").empty());
  for (const Catch::TestCase& test :
       Catch::getAllTestCasesSorted(*Catch::getCurrentContext().getConfig())) {
    const std::string& name = test.getTestCaseInfo().name;
    CAPTURE(name);
    CHECK(registration_problem(name).empty());
  }
}
