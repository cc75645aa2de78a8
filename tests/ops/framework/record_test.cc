// TOKAMAX_RECORD lines (threads, processes, API calls) and the `tune --from` reader.
#include "ops/framework/record.h"

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "cli/tune_sources.h"
#include "ops/framework/errors.h"
#include "ops/ragged_dot/api.h"
#include "tests/test_util.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

std::vector<json> read_lines(const std::string& path) {
  std::vector<json> out;
  std::istringstream text(read_file(path));
  std::string line;
  while (std::getline(text, line)) out.push_back(json::parse(line));  // throws on a torn line
  return out;
}

Tensor filled(TensorSpec spec) {
  Tensor tensor(std::move(spec));
  for (int64_t i = 0; i < tensor.num_elements(); ++i) tensor.set(i, 0.25 * (i % 7));
  return tensor;
}

void call_ragged_dot(int64_t M, std::vector<int32_t> sizes) {
  const int64_t G = static_cast<int64_t>(sizes.size());
  Tensor group_sizes({DType::kI32, {G}});
  for (int64_t g = 0; g < G; ++g) group_sizes.data<int32_t>()[g] = sizes[g];
  ragged_dot(filled({DType::kF32, {M, 8}}), filled({DType::kF32, {G, 8, 16}}), group_sizes);
}

// Sets TOKAMAX_RECORD for one scope.
struct RecordEnv {
  explicit RecordEnv(const std::string& path) { setenv(kRecordEnv, path.c_str(), 1); }
  ~RecordEnv() { unsetenv(kRecordEnv); }
};

}  // namespace

TEST_CASE("appends from threads and processes never interleave", "[record]") {
  ScratchDir dir;
  const std::string path = dir.file("lines.jsonl");
  constexpr int kThreads = 4, kLines = 200;
  const pid_t child = fork();
  REQUIRE(child >= 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::string error;
      for (int i = 0; i < kLines; ++i) {
        const json line = {{"writer", child == 0 ? "child" : "parent"},
                           {"thread", t},
                           {"i", i},
                           {"padding", std::string(300, 'x')}};
        append_record_line(path, line.dump(), error);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  REQUIRE(WIFEXITED(status));
  const std::vector<json> lines = read_lines(path);
  CHECK(lines.size() == 2 * kThreads * kLines);
  std::set<std::string> distinct;
  for (const json& line : lines) distinct.insert(line.dump());
  CHECK(distinct.size() == lines.size());
}

TEST_CASE("API calls append one record each while TOKAMAX_RECORD is set", "[record]") {
  ScratchDir dir;
  const std::string path = dir.file("calls.jsonl");
  call_ragged_dot(12, {5, 7});  // not recorded: the variable is unset
  {
    RecordEnv env(path);
    call_ragged_dot(12, {5, 7});
    call_ragged_dot(12, {5, 7});
    call_ragged_dot(20, {4, 4, 12});
  }
  call_ragged_dot(12, {5, 7});
  const std::vector<json> lines = read_lines(path);
  REQUIRE(lines.size() == 3);
  for (const json& line : lines) {
    for (const char* key : {"op", "args", "key", "implementation", "config_source", "config",
                            "timestamp", "device_id"}) {
      INFO(key);
      CHECK(line.contains(key));
    }
    CHECK(line["op"] == "ragged_dot");
    CHECK(!line["implementation"].get<std::string>().empty());
    CHECK(line["key"] == json({{"op", "ragged_dot"}, {"args", line["args"]}}).dump());
  }
  CHECK(lines[0]["args"]["lhs"] == "f32[12,8]");
  CHECK(lines[2]["args"]["group_sizes"] == json({4, 4, 12}));
}

TEST_CASE("a record file that cannot be written never breaks the application", "[record]") {
  ScratchDir dir;
  RecordEnv env(dir.file("no/such/dir/calls.jsonl"));
  CHECK_NOTHROW(call_ragged_dot(12, {5, 7}));
  CHECK_NOTHROW(call_ragged_dot(12, {5, 7}));  // warned once, silent now
}

TEST_CASE("the --from reader deduplicates and accepts verify and bench documents", "[record]") {
  ScratchDir dir;
  const std::string line_a =
      R"({"op":"ragged_dot","args":{"lhs":"f32[6,4]","rhs":"f32[2,4,5]","group_sizes":[2,3]}})";
  const std::string line_b =
      R"({"op":"ragged_dot","args":{"lhs":"f32[6,4]","rhs":"f32[2,4,5]","group_sizes":[3,3]}})";
  // The same call spelled canonically (defaults filled in) is the same case.
  const std::string line_a2 = R"({"op":"ragged_dot","args":{"group_sizes":[2,3],"lhs":"f32[6,4]",)"
                              R"("preferred_element_type":"f32","rhs":"f32[2,4,5]"}})";
  write_file(dir.file("calls.jsonl"), line_a + "\n" + line_b + "\n\n" + line_a2 + "\n");
  const std::vector<ArgSpec> parsed =
      parse_tune_source(read_file(dir.file("calls.jsonl")), "calls.jsonl");
  CHECK(parsed.size() == 3);
  CHECK(parse_tune_source("\n" + line_a + "\n" + line_b + "\n", "x").size() == 2);
  CHECK(parsed[2].line == 4);
  CHECK(dedup_cases(parsed).size() == 2);

  const json verify = {
      {"kind", "tokamax-verify"},
      {"cases",
       {{{"op", "ragged_dot"}, {"spec", "mine"}, {"args", json::parse(line_b)["args"]}},
        {{"op", "ragged_dot"}, {"spec", "mine"}, {"args", json::parse(line_b)["args"]}}}}};
  write_file(dir.file("verify.json"), verify.dump(2));
  const json bench = {{"benchmarks", json::array()},
                      {"tokamax", {{"cases", {json::parse(line_a)}}}}};
  write_file(dir.file("bench.json"), bench.dump(2));
  const std::vector<ArgSpec> all =
      load_tune_sources({dir.file("calls.jsonl"), dir.file("verify.json"), dir.file("bench.json")});
  REQUIRE(all.size() == 2);
  CHECK(all[0].name.find("f32[6,4] f32[2,4,5] #") == 0);
  CHECK(all[1].source == dir.file("calls.jsonl"));
  CHECK(load_tune_sources({dir.file("verify.json")}).at(0).name == "mine");
}

TEST_CASE("a bad --from file is an error naming the file and line", "[record]") {
  auto error_of = [](const std::string& text) {
    try {
      parse_tune_source(text, "in.jsonl");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string good = R"({"op":"ragged_dot","args":{"lhs":"f32[6,4]","rhs":"f32[2,4,5]"}})";
  CHECK_THAT(error_of(good + "\n{oops\n"), Catch::StartsWith("in.jsonl:2:"));
  CHECK_THAT(error_of(good + "\n" + R"({"op":"nope","args":{}})"),
             Catch::StartsWith("in.jsonl:2:") && Catch::Contains("nope"));
  CHECK_THAT(error_of(good + "\n" + R"({"op":"ragged_dot","args":{"lhs":"f32[6,4]"}})"),
             Catch::StartsWith("in.jsonl:2:") && Catch::Contains("rhs"));
  CHECK_THAT(error_of("{\n  \"cases\": [\n    {\"op\": 1}\n  ]\n}\n"),
             Catch::Contains("cases[0]") && Catch::Contains("op"));
  CHECK_THAT(error_of("{\n  \"cases\": [,]\n}\n"), Catch::StartsWith("in.jsonl:2:"));
  CHECK_THAT(error_of("\n\n"), Catch::Contains("no cases"));
  CHECK_THAT(error_of(R"({"something": "else"})"), Catch::Contains("verify"));
}
