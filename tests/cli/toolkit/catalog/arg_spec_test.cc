// Tests for ArgSpec catalogs: parsing, error locations, loading, filtering, the embedded catalog.
#include "cli/toolkit/catalog/arg_spec.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "ops/framework/errors.h"
#include "cli/toolkit/catalog/yaml_json.h"

using namespace tokamax;

namespace {

const char* const kValid = R"(op: ragged_dot
specs:
  - name: tiny
    tags: [ci_tests, smoke]
    project: moe
    args:
      lhs: bf16[64, 32]
      rhs: bf16[4,32,48]
      group_sizes: [7, 0, 33, 13]
  - name: tiny_f16_out
    args:
      lhs: f16[8,16]
      rhs: f16[2,16,8]
      preferred_element_type: f16
)";

// The InputError that parsing `text` raises (fails the test if none).
InputError error_of(const std::string& text) {
  try {
    parse_catalog(text, "test.yaml");
  } catch (const InputError& e) {
    return e;
  }
  FAIL("expected an InputError for:\n" << text);
  throw std::logic_error("unreachable");
}

// A catalog with one spec whose body (the lines after "  - name: s") is `body`.
std::string one_spec(const std::string& body) {
  return "op: ragged_dot\nspecs:\n  - name: s\n" + body;
}

const std::string kArgs =
    "    args:\n      lhs: f32[8,4]\n      rhs: f32[2,4,3]\n      group_sizes: [3, 5]\n";

std::filesystem::path write_temp(const std::string& name, const std::string& text) {
  auto path = std::filesystem::temp_directory_path() /
              ("tokamax_arg_spec_test_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("a valid catalog parses and binds to canonical args", "[arg_spec]") {
  const std::vector<ArgSpec> specs = parse_catalog(kValid, "test.yaml");
  REQUIRE(specs.size() == 2);
  const ArgSpec& tiny = specs[0];
  CHECK(tiny.op == "ragged_dot");
  CHECK(tiny.name == "tiny");
  CHECK(tiny.tags == std::vector<std::string>{"ci_tests", "smoke"});
  CHECK(tiny.project == "moe");
  CHECK(tiny.source == "test.yaml");
  CHECK(tiny.line == 3);
  CHECK(tiny.args.args == nlohmann::json{{"lhs", "bf16[64,32]"},
                                         {"rhs", "bf16[4,32,48]"},
                                         {"group_sizes", {7, 0, 33, 13}},
                                         {"preferred_element_type", "bf16"}});
  const ArgSpec& f16_out = specs[1];
  CHECK(f16_out.line == 10);
  CHECK(f16_out.tags.empty());
  CHECK(f16_out.project.empty());
  CHECK(f16_out.args.args["group_sizes"] == nlohmann::json{4, 4});  // even split
  CHECK(f16_out.args.args["preferred_element_type"] == "f16");
}

TEST_CASE("YAML scalars convert with the core schema", "[arg_spec]") {
  const YAML::Node node = parse_yaml(
      "a: true\nb: 'true'\nc: 42\nd: -0x10\ne: 0x10\nf: 1.5e3\ng: ~\nh: bf16[4,4]\ni: [1, x]\n"
      "j: {k: null}\nl: yes\nm: .inf\n",
      "t.yaml");
  const nlohmann::json value = yaml_to_json(node, "t.yaml");
  CHECK(value["a"] == true);
  CHECK(value["b"] == "true");
  CHECK(value["c"].is_number_integer());
  CHECK(value["c"] == 42);
  CHECK(value["d"] == "-0x10");  // the core schema has no signed hex
  CHECK(value["e"] == 16);
  CHECK(value["f"].is_number_float());
  CHECK(value["f"] == 1500.0);
  CHECK(value["g"].is_null());
  CHECK(value["h"] == "bf16[4,4]");
  CHECK(value["i"] == nlohmann::json{1, "x"});
  CHECK(value["j"]["k"].is_null());
  CHECK(value["l"] == "yes");  // YAML 1.1 booleans stay strings
  CHECK(value["m"].get<double>() == std::numeric_limits<double>::infinity());

  const InputError duplicate = [] {
    try {
      yaml_to_json(parse_yaml("a: 1\nb: 2\na: 3\n", "t.yaml"), "t.yaml");
    } catch (const InputError& e) {
      return e;
    }
    throw std::logic_error("no error");
  }();
  CHECK(duplicate.line() == 3);
  CHECK(duplicate.column() == 1);
}

TEST_CASE("catalog structure errors point at the offending node", "[arg_spec]") {
  // YAML syntax: the unterminated flow sequence is reported where the parser gave up.
  InputError e = error_of("op: ragged_dot\nspecs:\n  - name: s\n    tags: [a, b\n" + kArgs);
  CHECK(e.file() == "test.yaml");
  CHECK(e.line() == 5);
  CHECK(std::string(e.what()).find("YAML syntax error") != std::string::npos);

  e = error_of("op: ragged_dot\nspecz: []\n");
  CHECK(e.line() == 2);
  CHECK(e.column() == 1);
  CHECK(std::string(e.what()).find("expected op, specs") != std::string::npos);

  e = error_of(one_spec("    tagz: [a]\n" + kArgs));
  CHECK(e.line() == 4);
  CHECK(e.column() == 5);
  CHECK(std::string(e.what()).find("expected name, tags, project, args") != std::string::npos);

  e = error_of("op: ragged_dot\nspecs:\n  - tags: [a]\n" + kArgs);
  CHECK(e.line() == 3);
  CHECK(e.column() == 5);
  CHECK(std::string(e.what()).find("missing 'name'") != std::string::npos);

  e = error_of(one_spec("    tags: [a]\n"));
  CHECK(e.line() == 3);
  CHECK(std::string(e.what()).find("missing 'args'") != std::string::npos);

  e = error_of(one_spec("    tags: primary\n" + kArgs));
  CHECK(e.line() == 4);
  CHECK(e.column() == 11);
  CHECK(std::string(e.what()).find("list of strings") != std::string::npos);

  e = error_of(one_spec("    tags: [primary, [x]]\n" + kArgs));
  CHECK(e.line() == 4);
  CHECK(e.column() == 21);

  e = error_of(one_spec("    project: [x]\n" + kArgs));
  CHECK(e.line() == 4);
  CHECK(e.column() == 14);

  e = error_of(one_spec("    args: [1, 2]\n"));
  CHECK(e.line() == 4);
  CHECK(e.column() == 11);

  e = error_of("op: ragged_dot\nspecs:\n  - name: [s]\n" + kArgs);
  CHECK(e.line() == 3);
  CHECK(e.column() == 11);

  e = error_of("op: ragged_dot\nspecs:\n  - name: has space\n" + kArgs);
  CHECK(e.line() == 3);
  CHECK(e.column() == 11);

  e = error_of("op: ragged_dot\nspecs: {a: 1}\n");
  CHECK(e.line() == 2);
  CHECK(e.column() == 8);

  e = error_of("- just\n- a list\n");
  CHECK(e.line() == 1);
  CHECK(std::string(e.what()).find("'op' and 'specs'") != std::string::npos);

  e = error_of("# nothing but a comment\n");
  CHECK(std::string(e.what()).find("empty catalog") != std::string::npos);
}

TEST_CASE("an unknown op points at the op value and lists the known ops", "[arg_spec]") {
  const InputError e = error_of("op: ragged_dott\nspecs: []\n");
  CHECK(e.line() == 1);
  CHECK(e.column() == 5);
  CHECK(std::string(e.what()).find("known: ragged_dot") != std::string::npos);
}

TEST_CASE("duplicate spec names name the first occurrence", "[arg_spec]") {
  const InputError e = error_of(one_spec(kArgs) + "  - name: s\n" + kArgs);
  CHECK(e.line() == 8);
  CHECK(e.column() == 11);
  CHECK(std::string(e.what()).find("first defined at line 3") != std::string::npos);
}

TEST_CASE("bind errors point at the argument's key", "[arg_spec]") {
  const std::string head = "op: ragged_dot\nspecs:\n  - name: s\n    args:\n";
  // Line 5 is the first argument, line 6 the second, line 7 the third.
  InputError e = error_of(head + "      lhs: q7[4,4]\n      rhs: f32[1,4,4]\n");
  CHECK(e.line() == 5);
  CHECK(e.column() == 7);
  CHECK(std::string(e.what()).find("lhs") != std::string::npos);

  e = error_of(head + "      rhs: f32[1,4,4]\n      lhs: f32[4,x]\n");
  CHECK(e.line() == 6);
  CHECK(e.column() == 7);

  e = error_of(head + "      lhs: f32[4,4]\n      rhs: f32[1,5,4]\n");
  CHECK(e.line() == 6);
  CHECK(std::string(e.what()).find("K=") != std::string::npos);

  e = error_of(head + "      lhs: f32[4,4]\n      rhs: f32[2,4,4]\n      group_sizes: [3, 2]\n");
  CHECK(e.line() == 7);
  CHECK(e.column() == 7);
  CHECK(std::string(e.what()).find("sum to 5") != std::string::npos);

  e = error_of(head +
               "      lhs: f32[4,4]\n      rhs: f32[1,4,4]\n      preferred_element_type: i32\n");
  CHECK(e.line() == 7);

  e = error_of(head + "      lhs: f32[4,4]\n      rhs: f32[1,4,4]\n      bias: f32[4]\n");
  CHECK(e.line() == 7);
  CHECK(std::string(e.what()).find("unknown argument 'bias'") != std::string::npos);

  // A missing argument has no key of its own: the error points at the args mapping.
  e = error_of(head + "      lhs: f32[4,4]\n");
  CHECK(e.line() == 5);
  CHECK(std::string(e.what()).find("missing argument 'rhs'") != std::string::npos);
}

TEST_CASE("catalog files: unreadable paths and duplicates across files", "[arg_spec]") {
  try {
    load_catalog_file("/nonexistent/catalog.yaml");
    FAIL("expected an InputError");
  } catch (const InputError& e) {
    CHECK(e.file() == "/nonexistent/catalog.yaml");
    CHECK(e.line() == 0);
    CHECK(std::string(e.what()).find("cannot read") != std::string::npos);
  }

  const auto mine = write_temp("mine.yaml", kValid);
  const std::vector<ArgSpec> all = load_specs({mine.string()});
  CHECK(all.size() == builtin_specs().size() + 2);
  CHECK(all.back().source == mine.string());

  const auto clash =
      write_temp("clash.yaml", one_spec(kArgs) + "  - name: compute_bound\n" + kArgs);
  try {
    load_specs({clash.string()});
    FAIL("expected an InputError");
  } catch (const InputError& e) {
    CHECK(e.file() == clash.string());
    CHECK(e.line() == 8);
    CHECK(std::string(e.what()).find("specs/ragged_dot.yaml (embedded):") != std::string::npos);
  }
  std::filesystem::remove(mine);
  std::filesystem::remove(clash);
}
