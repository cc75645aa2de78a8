// Eight `tokamax tune` processes writing one cache at once, three of them killed with SIGKILL
// mid-run: the cache stays valid JSON at every moment, keeps every entry a tune finished and the
// other devices' entries, the killed runs resume, and no worker outlives its tune.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <exception>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backends/clock.h"
#include "ops/framework/autotune_cache.h"
#include "ops/framework/devices.h"
#include "ops/ragged_dot/api.h"
#include "tests/test_util.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

extern char** environ;

namespace {

constexpr int kFinishers = 5;       // tune their shard of the finishers' cases to the end
constexpr int kVictims = 3;         // tune cases of their own; killed after 1, 4 and 9 entries
constexpr int kFinisherCases = 40;  // M = 8 ... 47
constexpr int kVictimCases = 40;    // M = 60 + 40 k ...
constexpr int kVictimFirst = 60;

json call_args(int m) {
  return {{"lhs", "f32[" + std::to_string(m) + ",16]"},
          {"rhs", "f32[2,16,8]"},
          {"group_sizes", {m / 2, m - m / 2}}};
}

// tune --from input: one recorded call per line, `count` distinct cases from M = `first` on.
std::string calls(int first, int count) {
  std::string text;
  for (int m = first; m < first + count; ++m) {
    text += json{{"op", "ragged_dot"}, {"args", call_args(m)}}.dump() + "\n";
  }
  return text;
}

// The cache's args keys of those cases.
std::set<std::string> keys(int first, int count) {
  std::set<std::string> result;
  for (int m = first; m < first + count; ++m) {
    result.insert(ragged_dot_op().bind(call_args(m)).key());
  }
  return result;
}

// The args keys of the ragged_dot/cpu entries for `device` in a cache document.
std::set<std::string> entries_of(const json& cache, const std::string& device) {
  std::set<std::string> result;
  const json& entries = cache["entries"];
  if (!entries.contains(device) || !entries[device].contains("ragged_dot")) return result;
  for (const auto& [args, by_impl] : entries[device]["ragged_dot"].items()) {
    if (by_impl.contains("cpu")) result.insert(args);
  }
  return result;
}

size_t count_in(const std::set<std::string>& entries, const std::set<std::string>& wanted) {
  size_t n = 0;
  for (const std::string& key : wanted) n += entries.count(key);
  return n;
}

// Starts argv with stdout and stderr into `log`.
pid_t spawn(const std::vector<std::string>& argv, const std::string& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<std::string> args = argv;
  std::vector<char*> raw;
  for (std::string& arg : args) raw.push_back(arg.data());
  raw.push_back(nullptr);
  pid_t pid = -1;
  const int error = posix_spawn(&pid, raw[0], &actions, nullptr, raw.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  REQUIRE(error == 0);
  return pid;
}

// On a failed REQUIRE: no tune keeps running into the removed scratch folder.
struct KillOnFailure {
  const std::vector<pid_t>& pids;
  ~KillOnFailure() {
    if (std::uncaught_exceptions() == 0) return;
    for (const pid_t pid : pids) kill(pid, SIGKILL);
    while (waitpid(-1, nullptr, 0) > 0) {
    }
    prctl(PR_SET_CHILD_SUBREAPER, 0);
  }
};

int wait_for(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

}  // namespace

TEST_CASE("concurrent tunes, some killed with SIGKILL, leave a valid and complete cache",
          "[tune_workflow][stress]") {
  const double begin = wall_seconds();
  ScratchDir dir;
  const std::string cache_path = dir.file("shared.json");
  const std::string device = resolve_device("").id();

  // Entries the tunes never write: another device's, and another op's on this device.
  AutotuneCache seeded;
  CacheEntry other;
  other.config = {{"block_m", 128}};
  other.time_s = 1e-4;
  other.verified = true;
  other.metadata = {{"timestamp", "2026-01-01T00:00:00Z"}};
  const CacheKey elsewhere{"cuda-elsewhere-sm90", "ragged_dot", *keys(8, 1).begin(), "cuda"};
  const CacheKey other_op{device, "layer_norm", R"({"args":{"x":"f32[4,8]"},"op":"layer_norm"})",
                          "cpu"};
  seeded.put(elsewhere, other);
  seeded.put(other_op, other);
  seeded.save(cache_path);

  write_file(dir.file("finish.jsonl"), calls(8, kFinisherCases));
  const std::vector<std::string> common = {
      "--impl", "cpu", "--max-evals", "2", "--min-time", "0.002", "--quiet", "--cache", cache_path};
  std::vector<std::vector<std::string>> commands;
  for (int i = 0; i < kFinishers; ++i) {
    commands.push_back({TOKAMAX_BIN, "tune", "--from", dir.file("finish.jsonl"), "--shard",
                        std::to_string(i) + "/" + std::to_string(kFinishers)});
  }
  std::vector<std::set<std::string>> victim_keys;
  for (int k = 0; k < kVictims; ++k) {
    const std::string file = dir.file("victim" + std::to_string(k) + ".jsonl");
    write_file(file, calls(kVictimFirst + kVictimCases * k, kVictimCases));
    victim_keys.push_back(keys(kVictimFirst + kVictimCases * k, kVictimCases));
    commands.push_back({TOKAMAX_BIN, "tune", "--from", file});
  }
  for (auto& command : commands) command.insert(command.end(), common.begin(), common.end());

  // Workers of a killed tune are reparented to this process, so that the test sees them end.
  REQUIRE(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  std::vector<pid_t> pids;
  const KillOnFailure guard{pids};
  for (size_t i = 0; i < commands.size(); ++i) {
    pids.push_back(spawn(commands[i], dir.file("log" + std::to_string(i))));
  }

  // Read the cache as often as possible while they write: always a whole document. Victim k is
  // killed once it has written (k + 1)^2 entries; what it wrote by then must survive.
  std::vector<std::set<std::string>> seen_before_kill(kVictims);
  std::vector<bool> killed(kVictims, false);
  int reads = 0;
  while (std::count(killed.begin(), killed.end(), true) < kVictims) {
    REQUIRE(wall_seconds() - begin < 60);
    const std::string text = read_file(cache_path);
    ++reads;
    REQUIRE(json::accept(text));
    const std::set<std::string> present = entries_of(json::parse(text), device);
    for (int k = 0; k < kVictims; ++k) {
      if (killed[k] || count_in(present, victim_keys[k]) < size_t((k + 1) * (k + 1))) continue;
      for (const std::string& key : victim_keys[k]) {
        if (present.count(key) != 0) seen_before_kill[k].insert(key);
      }
      REQUIRE(kill(pids[kFinishers + k], SIGKILL) == 0);
      killed[k] = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (int i = 0; i < kFinishers; ++i) {
    const int status = wait_for(pids[i]);
    INFO("finisher " << i << ": " << read_file(dir.file("log" + std::to_string(i))));
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  for (int k = 0; k < kVictims; ++k) {
    const int status = wait_for(pids[kFinishers + k]);
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGKILL);
  }
  // No worker outlives its tune (PR_SET_PDEATHSIG); the orphans are reaped here.
  while (!child_processes().empty() && wall_seconds() - begin < 60) {
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(child_processes().empty());
  prctl(PR_SET_CHILD_SUBREAPER, 0);

  // Valid by the cache's own schema; every finished tune's entries; the seeded ones unchanged.
  const AutotuneCache after = AutotuneCache::load(cache_path);
  const std::set<std::string> present = entries_of(after.to_json(), device);
  CHECK(count_in(present, keys(8, kFinisherCases)) == kFinisherCases);
  for (int k = 0; k < kVictims; ++k) {
    INFO("victim " << k);
    CHECK(!seen_before_kill[k].empty());
    CHECK(count_in(present, seen_before_kill[k]) == seen_before_kill[k].size());
    CHECK(count_in(present, victim_keys[k]) < kVictimCases);  // killed mid-run
  }
  REQUIRE(after.find(elsewhere) != nullptr);
  CHECK(after.find(elsewhere)->to_json() == other.to_json());
  REQUIRE(after.find(other_op) != nullptr);
  CHECK(after.find(other_op)->to_json() == other.to_json());

  // The killed runs resume together: their finished cases are cached, the rest tuned.
  std::vector<pid_t> resumed;
  for (int k = 0; k < kVictims; ++k) {
    resumed.push_back(spawn(commands[kFinishers + k], dir.file("resume" + std::to_string(k))));
  }
  for (int k = 0; k < kVictims; ++k) {
    const int status = wait_for(resumed[k]);
    const std::string log = read_file(dir.file("resume" + std::to_string(k)));
    INFO("resumed victim " << k << ": " << log);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    const size_t cached = count_in(present, victim_keys[k]);
    CHECK_THAT(log, Catch::Contains(std::to_string(kVictimCases - cached) + " tuned, " +
                                    std::to_string(cached) + " cached"));
  }
  const AutotuneCache final_cache = AutotuneCache::load(cache_path);
  CHECK(final_cache.size() == kFinisherCases + kVictims * kVictimCases + 2);
  // A writer killed between writing its temporary file and the rename leaves one behind; the
  // next writer removes it under the lock.
  for (const auto& file : std::filesystem::directory_iterator(dir.path())) {
    CHECK(file.path().filename().string().find(".tmp.") == std::string::npos);
  }
  WARN("8 tunes, 3 killed, 3 resumed: " << wall_seconds() - begin << " s, " << reads
                                        << " reads of the cache while they wrote");
}
