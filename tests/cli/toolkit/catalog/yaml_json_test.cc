// YAML from hostile files: aliases that expand exponentially and deep nesting end in a clear
// error at a line, in bounded time and memory.
#include "cli/toolkit/catalog/yaml_json.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "cli/toolkit/catalog/arg_spec.h"
#include "ops/framework/errors.h"

using namespace tokamax;
using Catch::Contains;

namespace {

// "a0: &a0 [x, x, ...]" then each level a list of `width` aliases of the one before: width^levels
// values once expanded, in a few hundred bytes.
std::string billion_laughs(int levels, int width) {
  std::string text = "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (int level = 1; level <= levels; ++level) {
    text += "a" + std::to_string(level) + ": &a" + std::to_string(level) + " [";
    for (int i = 0; i < width; ++i) text += (i ? ", *a" : "*a") + std::to_string(level - 1);
    text += "]\n";
  }
  return text;
}

}  // namespace

TEST_CASE("YAML aliases that expand exponentially stop at the value budget", "[catalog]") {
  const std::string text = billion_laughs(9, 10);  // 10^10 values
  REQUIRE(text.size() < 1000);
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(yaml_to_json(parse_yaml(text, "laughs.yaml"), "laughs.yaml"),
                    Contains("laughs.yaml:") &&
                        Contains("the document expands to more than 1048576 values"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
  // A small expansion is an ordinary document.
  CHECK(yaml_to_json(parse_yaml(billion_laughs(2, 3), "small.yaml"), "small.yaml")["a2"].size() ==
        3);
}

TEST_CASE("one value budget covers a whole catalog, aliases shared between specs included",
          "[catalog]") {
  // group_sizes of 100000 empty groups, written once and aliased by every spec: each spec alone
  // is under the budget, twenty of them are not.
  std::string sizes = "[0";
  for (int g = 1; g < 100000; ++g) sizes += ",0";
  sizes += "]";
  std::string catalog = "op: ragged_dot\nspecs:\n";
  catalog += "  - {name: s0, args: {lhs: 'f32[8,1]', rhs: 'f32[100000,1,1]', group_sizes: &sizes " +
             sizes + "}}\n";
  for (int i = 1; i < 20; ++i) {
    catalog += "  - {name: s" + std::to_string(i) +
               ", args: {lhs: 'f32[8,1]', rhs: 'f32[100000,1,1]', group_sizes: *sizes}}\n";
  }
  CHECK_THROWS_WITH(parse_catalog(catalog, "shared.yaml"),
                    Contains("shared.yaml:") &&
                        Contains("the document expands to more than 1048576 values"));
  // Fewer specs: the same catalog binds.
  const size_t cut = catalog.find("  - {name: s5,");
  CHECK(parse_catalog(catalog.substr(0, cut), "few.yaml").size() == 5);
}

TEST_CASE("deeply nested YAML is refused at its line", "[catalog]") {
  const std::string deep = "op: ragged_dot\nspecs:\n  - name: deep\n    args:\n      lhs: " +
                           std::string(100, '[') + std::string(100, ']') + "\n";
  CHECK_THROWS_WITH(parse_catalog(deep, "deep.yaml"),
                    Contains("deep.yaml:5:") && Contains("nested deeper than 64 levels"));
  // Past yaml-cpp's own parser limit: its error, still an InputError.
  const std::string deeper = "a: " + std::string(100000, '[');
  CHECK_THROWS_AS(parse_yaml(deeper, "deeper.yaml"), InputError);
}

TEST_CASE("a token no YAML node consumes is refused at its position, without looping",
          "[catalog]") {
  // yaml-cpp 0.7's LoadAll made empty documents at such a token forever (gigabytes within
  // seconds); the inputs are the catalog fuzzer's, minimized.
  struct Case {
    std::string text;
    std::string where;
  };
  const std::vector<Case> cases = {
      {",4096,4096]", "t.yaml:1:1: YAML syntax error: ',' outside a flow collection"},
      {"!,", "t.yaml:1:2: YAML syntax error: ',' outside a flow collection"},
      {"!L!s,", "t.yaml:1:5: YAML syntax error: ',' outside a flow collection"},
      {"{op: ragged_dot, specs: []}\n,  group_sizes: [1]\n",
       "t.yaml:2:1: YAML syntax error: ',' outside a flow collection"},
      // Other tokens after the top-level node (LoadAll read them as further documents).
      {"[a]\n- b\n", "t.yaml:2:1: YAML syntax error: '-' after the end of the document's"},
      {"{a: 1} \xc3\xa9", "t.yaml:1:8: YAML syntax error: '\xc3\xa9' after the end of the"},
  };
  const auto start = std::chrono::steady_clock::now();
  for (const Case& c : cases) {
    INFO(c.text);
    CHECK_THROWS_WITH(parse_yaml(c.text, "t.yaml"), Contains(c.where));
    CHECK_THROWS_WITH(parse_catalog(c.text, "t.yaml"), Contains(c.where));
  }
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
  // A second document is refused where it starts; one document with its markers is fine.
  CHECK_THROWS_WITH(parse_yaml("a: 1\n---\nb: 2\n", "two.yaml"),
                    Contains("two.yaml:2:1: expected a single YAML document"));
  CHECK(parse_yaml("---\na: 1\n...\n", "one.yaml")["a"].as<int>() == 1);
  CHECK(parse_yaml("", "empty.yaml").IsNull());
  CHECK(parse_yaml("[a, b]", "flow.yaml").size() == 2);
}
