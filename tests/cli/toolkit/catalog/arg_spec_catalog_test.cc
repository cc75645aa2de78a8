// Tests for the embedded ArgSpec catalogs and spec filtering (op, tags any-of, name globs).
#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cli/toolkit/catalog/arg_spec.h"
#include "ops/framework/embedded.h"
#include "ops/framework/errors.h"
#include "ops/registry.h"

using namespace tokamax;

namespace {

bool has_tag(const ArgSpec& spec, const std::string& tag) {
  return std::find(spec.tags.begin(), spec.tags.end(), tag) != spec.tags.end();
}

std::vector<std::string> names_of(const std::vector<ArgSpec>& specs) {
  std::vector<std::string> names;
  names.reserve(specs.size());
  for (const ArgSpec& spec : specs) names.push_back(spec.name);
  return names;
}

const char* const kCatalog = R"(op: ragged_dot
specs:
  - name: alpha_f32
    tags: [smoke, ci_tests]
    args: {lhs: "f32[8,4]", rhs: "f32[2,4,3]"}
  - name: beta_bf16
    tags: [ci_tests]
    args: {lhs: "bf16[8,4]", rhs: "bf16[2,4,3]"}
  - name: gamma_f32
    tags: [primary]
    args: {lhs: "f32[8,4]", rhs: "f32[2,4,3]"}
)";

// Built field by field: designated initializers that skip members warn under -Wextra.
SpecFilter make_filter(std::vector<std::string> ops, std::vector<std::string> tags,
                       std::vector<std::string> names) {
  SpecFilter filter;
  filter.ops = std::move(ops);
  filter.tags = std::move(tags);
  filter.names = std::move(names);
  return filter;
}

std::string message_of(const std::vector<ArgSpec>& specs, const SpecFilter& filter) {
  try {
    filter_specs(specs, filter);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  FAIL("expected InvalidArgument");
  return "";
}

}  // namespace

TEST_CASE("filter_specs: ops exact, tags any-of, names by glob, input order kept", "[arg_spec]") {
  const std::vector<ArgSpec> specs = parse_catalog(kCatalog, "filter.yaml");
  CHECK(names_of(filter_specs(specs, SpecFilter{})) ==
        std::vector<std::string>{"alpha_f32", "beta_bf16", "gamma_f32"});
  CHECK(names_of(filter_specs(specs, make_filter({}, {"primary", "smoke"}, {}))) ==
        std::vector<std::string>{"alpha_f32", "gamma_f32"});
  CHECK(names_of(filter_specs(specs, make_filter({}, {}, {"*_f32"}))) ==
        std::vector<std::string>{"alpha_f32", "gamma_f32"});
  CHECK(names_of(filter_specs(specs, make_filter({}, {}, {"b?ta_*", "gamma_f32"}))) ==
        std::vector<std::string>{"beta_bf16", "gamma_f32"});
  CHECK(names_of(filter_specs(specs, make_filter({"ragged_dot"}, {"ci_tests"}, {"*_bf16"}))) ==
        std::vector<std::string>{"beta_bf16"});
}

TEST_CASE("filter_specs: no match lists what exists", "[arg_spec]") {
  const std::vector<ArgSpec> specs = parse_catalog(kCatalog, "filter.yaml");
  std::string message = message_of(specs, make_filter({"attention"}, {}, {}));
  CHECK(message.find("'attention'") != std::string::npos);
  CHECK(message.find("ragged_dot") != std::string::npos);

  message = message_of(specs, make_filter({}, {"nightly"}, {}));
  CHECK(message.find("nightly") != std::string::npos);
  CHECK(message.find("ci_tests (2), primary (1), smoke (1)") != std::string::npos);
  CHECK(message.find("alpha_f32, beta_bf16, gamma_f32") != std::string::npos);

  message = message_of(specs, make_filter({}, {"primary"}, {"alpha*"}));
  CHECK(message.find("alpha*") != std::string::npos);

  // Long name lists are truncated.
  message = message_of(builtin_specs(), make_filter({"ragged_dot"}, {}, {"no_such_spec"}));
  CHECK(message.find("more") != std::string::npos);
  CHECK(message.find("compute_bound") != std::string::npos);
}

TEST_CASE("the embedded catalog loads with unique names and covers every dtype", "[arg_spec]") {
  // Other ops' catalogs are checked by their own tests.
  std::vector<ArgSpec> specs = builtin_specs();
  std::erase_if(specs, [](const ArgSpec& spec) { return spec.op != "ragged_dot"; });
  REQUIRE(!specs.empty());
  std::set<std::string> names;
  for (const ArgSpec& spec : specs) {
    CHECK(names.insert(spec.op + "/" + spec.name).second);
    CHECK(spec.source == "specs/" + spec.op + ".yaml (embedded)");
    CHECK(spec.line > 0);
  }
  for (const char* name : {"compute_bound", "memory_bound", "mixtral_8x7b",
                           "deepseek_v3_131072x1024x7168", "square_2048_f32"}) {
    CHECK(names.count(std::string("ragged_dot/") + name) == 1);
  }

  // Per input dtype: at least one smoke and one ci_tests case. Smoke stays tiny in total and
  // every ci_tests case small, so the suite verifies them in seconds on a 2-core CPU.
  const Op& op = find_op("ragged_dot");
  std::map<std::string, int> smoke, ci;
  double smoke_flops = 0.0;
  int primary = 0;
  for (const ArgSpec& spec : specs) {
    if (spec.op != "ragged_dot") continue;  // other ops check their catalogs in their own tests
    const std::string lhs = spec.args.args["lhs"].get<std::string>();
    const std::string key = lhs.substr(0, lhs.find('['));  // the input dtype
    if (has_tag(spec, "smoke")) {
      CHECK(has_tag(spec, "ci_tests"));
      ++smoke[key];
      smoke_flops += op.flops(spec.args);
    }
    if (has_tag(spec, "ci_tests")) {
      ++ci[key];
      INFO(spec.name);
      CHECK(op.flops(spec.args) < 50e6);
    }
    if (has_tag(spec, "primary")) ++primary;
  }
  CHECK(primary == 18);  // upstream's 12 plain shapes and 6 MoE inference gate/up layers
  CHECK(smoke_flops < 1e8);
  for (const char* dtype : {"f32", "bf16", "f16"}) {
    INFO(dtype);
    CHECK(smoke[dtype] >= 1);
    CHECK(ci[dtype] >= 1);
  }
}

TEST_CASE("{num_groups, total} group sizes are reproducible", "[arg_spec]") {
  const std::string text =
      "op: ragged_dot\nspecs:\n  - name: r\n    args:\n      lhs: f32[300,8]\n"
      "      rhs: f32[16,8,8]\n      group_sizes: {num_groups: 16, total: 280}\n";
  const ArgSpec first = parse_catalog(text, "a.yaml").at(0);
  const ArgSpec second = parse_catalog(text, "b.yaml").at(0);
  CHECK(first.args.key() == second.args.key());
  const std::vector<int64_t> sizes = first.args.args["group_sizes"].get<std::vector<int64_t>>();
  REQUIRE(sizes.size() == 16);
  int64_t sum = 0;
  for (int64_t size : sizes) sum += size;
  CHECK(sum == 280);
  // The embedded catalog's random splits are stable across parses too.
  for (const EmbeddedFile& file : embedded_files("specs/")) {
    const std::vector<ArgSpec> a = parse_catalog(file.content, "a");
    const std::vector<ArgSpec> b = parse_catalog(file.content, "b");
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) CHECK(a[i].args.key() == b[i].args.key());
  }
}
