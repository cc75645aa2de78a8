// End-to-end: `tokamax verify` over layer_norm's ci_tests catalog.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/test_util.h"

using namespace tokamax::testing;
using nlohmann::json;

TEST_CASE("tokamax verify --op layer_norm --tag ci_tests passes", "[layer_norm][cli]") {
  ScratchDir dir;
  const CommandResult r =
      run_tokamax("verify --op layer_norm --tag ci_tests --json " + dir.file("v.json"));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("0 failed"));
  const json v = json::parse(read_file(dir.file("v.json")));
  REQUIRE(v["cases"].size() > 20);
  int cpu_passed = 0;
  for (const json& c : v["cases"]) {
    INFO(c.dump());
    if (c["disposition"] == "unsupported") {
      // Only the f64 case (cpu) and what oneDNN 2.6 lacks may be unsupported, with a reason.
      CHECK((c["impl"] == "onednn" || c["dtype"] == "f64"));
      CHECK(!c["reason"].get<std::string>().empty());
    } else {
      CHECK(c["disposition"] == "passed");
      if (c["impl"] == "cpu") ++cpu_passed;
    }
  }
  CHECK(cpu_passed >= 20);
}
