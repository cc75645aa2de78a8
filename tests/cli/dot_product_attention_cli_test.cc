// End-to-end: `tokamax verify` over dot_product_attention's ci_tests catalog.
#include <catch2/catch.hpp>
#include <string>

#include "tests/test_util.h"

using namespace tokamax::testing;

TEST_CASE("verify --op dot_product_attention --tag ci_tests passes", "[attention][cli]") {
  const CommandResult r = run_tokamax("verify --op dot_product_attention --tag ci_tests");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("all_options_f32") && Catch::Contains("onednn"));
}
