// End-to-end tests of `tokamax verify` on linear_softmax_cross_entropy_loss's catalog.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/test_util.h"

using namespace tokamax::testing;
using nlohmann::json;

TEST_CASE("verify lsce ci_tests passes for every implementation", "[lsce][cli]") {
  ScratchDir dir;
  const CommandResult r = run_tokamax(
      "verify --op linear_softmax_cross_entropy_loss --tag ci_tests --json " + dir.file("v.json"));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("0 failed"));
  const json v = json::parse(read_file(dir.file("v.json")));
  REQUIRE(v["cases"].size() >= 3 * 13);
  int passed_cpu = 0;
  for (const json& c : v["cases"]) {
    if (c["impl"] == "onednn" && c["disposition"] == "unsupported") {
      CHECK(!c["reason"].get<std::string>().empty());
      continue;
    }
    CHECK(c["disposition"] == "passed");
    if (c["impl"] == "cpu") ++passed_cpu;
  }
  CHECK(passed_cpu == 13);
}
