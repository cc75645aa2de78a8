// The layering check: every project include points down the layers (docs/architecture.md).
//
//   cli/                    -> anything below
//   ops/framework/<role>/   catalog, autotuning, measurement, harness: -> ops/framework, backends
//   ops/<op>/               -> its own folder, ops/common, the op model, backends
//   ops/common/             -> ops/common, the op model, backends
//   ops/framework/*         the op model (op, tensor, dtype, config, errors, dispatch, ...):
//                           -> ops/framework, backends; registry.cc alone names each op's (vjp_)api.h
//   backends/               -> backends only
//
// No op includes another op's files, ops/common includes no op, and backends/ includes nothing
// from ops/. Tests may include anything.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace fs = std::filesystem;

namespace {

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.rfind(prefix, 0) == 0;
}

// The first path component after `prefix` ("ops/ragged_dot/cpu.cc" -> "ragged_dot").
std::string component(const std::string& path, const std::string& prefix) {
  const std::string rest = path.substr(prefix.size());
  return rest.substr(0, rest.find('/'));
}

// A header of the op model: a file directly in ops/framework/, not in a role subfolder.
bool op_model(const std::string& include) {
  return starts_with(include, "ops/framework/") &&
         include.find('/', std::string("ops/framework/").size()) == std::string::npos;
}

// Whether `file` (relative to the source root) may include the project header `include`.
bool allowed(const std::string& file, const std::string& include) {
  const bool to_backends = starts_with(include, "backends/");
  if (starts_with(file, "backends/")) return to_backends;
  if (starts_with(file, "cli/")) return true;
  if (starts_with(file, "ops/framework/")) {
    if (to_backends || starts_with(include, "ops/framework/")) return true;
    // The registry is where the ops are listed: it names each op's entry point (a VJP op's is
    // vjp_api.h beside its forward's).
    return file == "ops/framework/registry.cc" &&
           std::regex_match(include, std::regex("ops/[a-z_]+/(vjp_)?api\\.h"));
  }
  if (starts_with(file, "ops/common/")) {
    return to_backends || starts_with(include, "ops/common/") || op_model(include);
  }
  if (starts_with(file, "ops/")) {
    const std::string op = component(file, "ops/");
    return to_backends || starts_with(include, "ops/common/") || op_model(include) ||
           starts_with(include, "ops/" + op + "/");
  }
  return true;  // tests, examples
}

// "file:line: includes X" for every project include that breaks the direction.
std::vector<std::string> layering_violations(const fs::path& root) {
  static const std::regex kInclude("^\\s*#\\s*include\\s+\"((cli|ops|backends)/[^\"]+)\"");
  std::vector<std::string> violations;
  for (const char* top : {"cli", "ops", "backends"}) {
    if (!fs::exists(root / top)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(root / top)) {
      const std::string ext = entry.path().extension().string();
      if (!entry.is_regular_file() ||
          (ext != ".h" && ext != ".cc" && ext != ".cu" && ext != ".cuh")) {
        continue;
      }
      const std::string file = fs::relative(entry.path(), root).generic_string();
      std::ifstream in(entry.path());
      std::string line;
      for (int number = 1; std::getline(in, line); ++number) {
        std::smatch match;
        if (std::regex_search(line, match, kInclude) && !allowed(file, match[1].str())) {
          violations.push_back(file + ":" + std::to_string(number) + ": includes " +
                               match[1].str());
        }
      }
    }
  }
  return violations;
}

}  // namespace

TEST_CASE("every include of the tree points down the layers", "[layering]") {
  const std::vector<std::string> violations = layering_violations(TOKAMAX_SOURCE_DIR);
  for (const std::string& violation : violations) UNSCOPED_INFO(violation);
  CHECK(violations.empty());
}

TEST_CASE("the layering check reports includes that point up or sideways", "[layering]") {
  tokamax::testing::ScratchDir dir;
  auto write = [&](const std::string& path, const std::string& text) {
    fs::create_directories((dir.path() / path).parent_path());
    std::ofstream(dir.path() / path) << text;
  };
  write("backends/cpu/x.cc", "#include \"backends/device.h\"\n#include \"ops/framework/op.h\"\n");
  write("ops/common/y.cc", "#include \"ops/framework/op.h\"\n#include \"ops/ragged_dot/base.h\"\n");
  write("ops/layer_norm/z.cc",
        "#include \"ops/layer_norm/base.h\"\n#include \"ops/common/cpu_checks.h\"\n"
        "#include \"ops/ragged_dot/cpu_tiling.h\"\n"
        "#include \"ops/framework/harness/verifier.h\"\n");
  write("ops/framework/registry.cc", "#include \"ops/layer_norm/api.h\"\n");
  write("ops/framework/dispatch.cc", "#include \"ops/layer_norm/api.h\"\n");
  write("cli/c.cc", "#include \"ops/layer_norm/api.h\"\n");
  const std::vector<std::string> violations = layering_violations(dir.path());
  CHECK_THAT(violations, Catch::Matchers::UnorderedEquals(std::vector<std::string>{
                             "backends/cpu/x.cc:2: includes ops/framework/op.h",
                             "ops/common/y.cc:2: includes ops/ragged_dot/base.h",
                             "ops/layer_norm/z.cc:3: includes ops/ragged_dot/cpu_tiling.h",
                             "ops/layer_norm/z.cc:4: includes ops/framework/harness/verifier.h",
                             "ops/framework/dispatch.cc:1: includes ops/layer_norm/api.h"}));
}
