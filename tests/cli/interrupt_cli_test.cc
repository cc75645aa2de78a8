// End-to-end tests of verify and bench stopped by SIGTERM: the rows finished so far stay printed
// and in --json, and the exit code is 130.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "tests/test_util.h"

using namespace tokamax::testing;
using nlohmann::json;

namespace {

const std::string kBin = TOKAMAX_BIN;

// A quick case, then one the portable reference takes seconds on.
constexpr const char* kSpecs =
    "op: ragged_dot\n"
    "specs:\n"
    "  - name: quick\n"
    "    tags: [stop_test]\n"
    "    args: {lhs: \"f32[16,32]\", rhs: \"f32[1,32,16]\"}\n"
    "  - name: slow\n"
    "    tags: [stop_test]\n"
    "    args: {lhs: \"f32[1536,1536]\", rhs: \"f32[1,1536,1536]\"}\n";

// Runs `tokamax ARGS > out 2> err`, waits until `ready(json file text)` or 60 s, sends SIGTERM
// and returns the exit status.
template <typename Ready>
int run_until_then_stop(const std::string& args, const std::string& out, const std::string& err,
                        const std::string& json_path, Ready ready) {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const std::string command = "exec " + kBin + " " + args + " > " + out + " 2> " + err;
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  bool seen = false;
  for (int i = 0; i < 600 && !seen; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    seen = ready(read_file(json_path));
  }
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  REQUIRE(seen);
  REQUIRE(WIFEXITED(status));
  return WEXITSTATUS(status);
}

// The JSON file holds `key` with at least one element (it is rewritten whole after each case, so
// a parse of a complete write either fails or sees every finished case).
bool has_cases(const std::string& text, bool bench) {
  try {
    const json document = json::parse(text);
    return (bench ? document.at("tokamax").at("cases") : document.at("cases")).size() >= 1;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

TEST_CASE("SIGTERM during verify keeps the finished rows and --json, exit 130", "[cli]") {
  ScratchDir dir;
  write_file(dir.file("specs.yaml"), kSpecs);
  const std::string json_path = dir.file("verify.json");
  const int code =
      run_until_then_stop("verify --spec " + dir.file("specs.yaml") +
                              " --tag stop_test --impl reference --json " + json_path,
                          dir.file("out.txt"), dir.file("err.txt"), json_path,
                          [](const std::string& text) { return has_cases(text, false); });
  CHECK(code == 130);
  const std::string out = read_file(dir.file("out.txt"));
  INFO(out << read_file(dir.file("err.txt")));
  // The quick case's row was printed when it finished, and the summary counts it.
  CHECK_THAT(out, Catch::Contains("quick") && Catch::Contains("passed") &&
                      Catch::Contains("1 results: 1 passed"));
  CHECK_THAT(read_file(dir.file("err.txt")), Catch::Contains("interrupted"));
  const json document = json::parse(read_file(json_path));
  CHECK(document["complete"] == false);
  REQUIRE(document["cases"].size() == 1);
  CHECK(document["cases"][0]["spec"] == "quick");
}

TEST_CASE("SIGTERM during bench keeps the finished rows and --json, exit 130", "[cli]") {
  ScratchDir dir;
  write_file(dir.file("specs.yaml"), kSpecs);
  const std::string json_path = dir.file("bench.json");
  const int code = run_until_then_stop(
      "bench --spec " + dir.file("specs.yaml") +
          " --tag stop_test --impl reference --min-time 0.01 --json " + json_path,
      dir.file("out.txt"), dir.file("err.txt"), json_path,
      [](const std::string& text) { return has_cases(text, true); });
  CHECK(code == 130);
  const std::string out = read_file(dir.file("out.txt"));
  INFO(out << read_file(dir.file("err.txt")));
  CHECK_THAT(out, Catch::Contains("quick") && Catch::Contains("1 benchmarks, 0 failed"));
  const json document = json::parse(read_file(json_path));
  CHECK(document["tokamax"]["complete"] == false);
  REQUIRE(document["tokamax"]["cases"].size() == 1);
}
