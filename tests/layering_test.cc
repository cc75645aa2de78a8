// The layering check: every project include points down the layers (docs/architecture.md).
//
//   cli/                    the commands -> anything below
//   cli/toolkit/            catalogs, measurement, autotuning, the harness: -> cli/toolkit, the
//                           op registry, the op model, backends (never an op's own files)
//   ops/registry.*          the registry of ops -> each op's api.h and vjp/api.h, the op model,
//   backends ops/<op>/               -> its own folder, ops/common, the op model, backends
//   ops/common/             -> ops/common, the op model, backends
//   ops/framework/          the op model (op, tensor, dtype, config, errors, dispatch, the
//                           autotuning cache configs are resolved from): -> ops/framework,
//                           backends
//   backends/               -> backends only
//
// No include runs up: no op includes another op's files or the registry, ops/common includes no
// op, the op model includes neither the ops nor the toolkit, and backends/ includes nothing from
// ops/. Tests may include anything.
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

// A header of the op model: a file in ops/framework/ (the folder has no subfolders).
bool op_model(const std::string& include) { return starts_with(include, "ops/framework/"); }

// A file directly in ops/ (the registry of ops), not in an op's folder.
bool registry(const std::string& path) {
  return starts_with(path, "ops/") && path.find('/', 4) == std::string::npos;
}

// Whether `file` (relative to the source root) may include the project header `include`.
bool allowed(const std::string& file, const std::string& include) {
  const bool to_backends = starts_with(include, "backends/");
  if (starts_with(file, "backends/")) return to_backends;
  if (starts_with(file, "cli/toolkit/")) {
    return to_backends || starts_with(include, "cli/toolkit/") || op_model(include) ||
           registry(include);
  }
  if (starts_with(file, "cli/")) return true;
  if (registry(file)) {
    // The registry is where the ops are listed: it names each op's entry point (a VJP op's is
    // vjp/api.h beside its forward's).
    return to_backends || op_model(include) || registry(include) ||
           std::regex_match(include, std::regex("ops/[a-z_]+/(vjp/)?api\\.h"));
  }
  if (starts_with(file, "ops/framework/")) return to_backends || op_model(include);
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
        "#include \"cli/toolkit/harness/verifier.h\"\n#include \"ops/registry.h\"\n");
  write("ops/registry.cc",
        "#include \"ops/layer_norm/api.h\"\n#include \"ops/layer_norm/base.h\"\n");
  write("ops/framework/dispatch.cc",
        "#include \"ops/layer_norm/api.h\"\n#include \"ops/registry.h\"\n");
  write("cli/toolkit/t.cc",
        "#include \"ops/registry.h\"\n#include \"ops/layer_norm/cpu_kernel.h\"\n"
        "#include \"cli/common.h\"\n");
  write("cli/c.cc",
        "#include \"ops/layer_norm/api.h\"\n#include \"cli/toolkit/harness/verifier.h\"\n");
  const std::vector<std::string> violations = layering_violations(dir.path());
  CHECK_THAT(violations, Catch::Matchers::UnorderedEquals(std::vector<std::string>{
                             "backends/cpu/x.cc:2: includes ops/framework/op.h",
                             "ops/common/y.cc:2: includes ops/ragged_dot/base.h",
                             "ops/layer_norm/z.cc:3: includes ops/ragged_dot/cpu_tiling.h",
                             "ops/layer_norm/z.cc:4: includes cli/toolkit/harness/verifier.h",
                             "ops/layer_norm/z.cc:5: includes ops/registry.h",
                             "ops/registry.cc:2: includes ops/layer_norm/base.h",
                             "ops/framework/dispatch.cc:1: includes ops/layer_norm/api.h",
                             "ops/framework/dispatch.cc:2: includes ops/registry.h",
                             "cli/toolkit/t.cc:2: includes ops/layer_norm/cpu_kernel.h",
                             "cli/toolkit/t.cc:3: includes cli/common.h"}));
}
