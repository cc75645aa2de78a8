// Tests of the benchmark runner: stats, failures, warm-up, Google Benchmark JSON layout, repeated
// calls, cold copies, drift fields and the adaptive stop.
#include "cli/toolkit/measurement/bench_sampler.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "backends/cpu/cpu_device.h"
#include "ops/framework/errors.h"
#include "tests/support/fake_device.h"

namespace tokamax {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Tiny and fast: these tests check structure, never timings.
BenchOptions tiny_options() {
  BenchOptions options;
  options.warmup_runs = 2;
  options.stop.min_samples = 3;  // exactly 3 samples: the counts below are exact
  options.stop.max_samples = 3;
  options.stop.min_time_s = 0;
  options.stop.max_noise = std::numeric_limits<double>::infinity();
  options.sample_time_s = 1e-3;
  options.drift_probe = false;
  return options;
}

// A small loop the compiler cannot drop; counts its calls.
BenchCase loop_case(const std::string& name, int* calls) {
  BenchCase bench_case;
  bench_case.name = name;
  bench_case.run = [calls] {
    ++*calls;
    volatile double acc = 0;
    for (int i = 0; i < 200; ++i) acc = acc + i * 0.5;
  };
  bench_case.flops = 400;
  bench_case.bytes = 1600;
  bench_case.label = R"({"config":{"tile_m":64},"source":"heuristics"})";
  return bench_case;
}

BenchCase throwing_case(const std::string& name, int* calls, int throw_at_call) {
  BenchCase bench_case;
  bench_case.name = name;
  bench_case.run = [calls, throw_at_call] {
    if (++*calls >= throw_at_call)
      throw std::runtime_error("kaboom at call " + std::to_string(*calls));
  };
  return bench_case;
}

fs::path temp_json(const std::string& stem) {
  return fs::temp_directory_path() /
         (stem + "_" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) +
          ".json");
}

json read_json(const fs::path& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  return json::parse(in);
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

double seconds_per_unit(const std::string& unit) {
  const std::map<std::string, double> units = {{"s", 1}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}};
  REQUIRE(units.count(unit) == 1);
  return units.at(unit);
}

void check_ok_stats(const BenchStats& stats, const BenchCase& bench_case, int repetitions) {
  INFO(stats.name << ": " << stats.error);
  CHECK(stats.ok);
  CHECK(stats.error.empty());
  REQUIRE(stats.samples_s.size() == static_cast<size_t>(repetitions));
  for (double sample : stats.samples_s) CHECK((std::isfinite(sample) && sample > 0));
  CHECK(stats.iterations >= 1);
  CHECK(stats.min_s <= stats.median_s);
  CHECK(stats.median_s <= stats.max_s);
  CHECK(stats.min_s <= stats.mean_s);
  CHECK(stats.mean_s <= stats.max_s);
  CHECK((std::isfinite(stats.cv) && stats.cv >= 0));
  CHECK(
      (std::isfinite(stats.iqr_s) && stats.iqr_s >= 0 && stats.iqr_s <= stats.max_s - stats.min_s));
  CHECK(stats.gflops == Approx(bench_case.flops / stats.median_s * 1e-9));
  CHECK(stats.gbps == Approx(bench_case.bytes / stats.median_s * 1e-9));
}

TEST_CASE("run_benchmarks times cases, isolates failures and warms up once per case",
          "[benchmark_runner]") {
  int calls_a = 0, calls_b = 0, calls_sleepy = 0, calls_early = 0, calls_late = 0;
  std::vector<BenchCase> cases = {loop_case("test/loop_a/cpu", &calls_a),
                                  throwing_case("test/throws_in_warmup/cpu", &calls_early, 1),
                                  loop_case("test/loop_b/cpu", &calls_b),
                                  throwing_case("test/throws_when_timed/cpu", &calls_late, 4)};
  // Each call outlasts sample_time, so every sample is exactly one call and the call count is
  // exact: warm-up + samples (warm-up per sample would give 2 * 3 + 3).
  BenchCase sleepy = loop_case("test/sleepy/cpu", &calls_sleepy);
  sleepy.run = [&calls_sleepy] {
    ++calls_sleepy;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  };
  cases.push_back(sleepy);

  const BenchOptions options = tiny_options();
  const int repetitions = options.stop.min_samples;
  const std::vector<BenchStats> results = run_benchmarks(cases, options, cpu::host_device());
  REQUIRE(results.size() == cases.size());
  for (size_t i = 0; i < cases.size(); ++i) CHECK(results[i].name == cases[i].name);

  check_ok_stats(results[0], cases[0], repetitions);
  check_ok_stats(results[2], cases[2], repetitions);
  check_ok_stats(results[4], cases[4], repetitions);
  CHECK(calls_a == options.warmup_runs + repetitions * results[0].iterations);
  CHECK(calls_b == options.warmup_runs + repetitions * results[2].iterations);
  CHECK(results[4].iterations == 1);
  CHECK(calls_sleepy == options.warmup_runs + repetitions);
  // Exactly min = max samples: settled (the noise bound is infinite), never noisy.
  for (size_t i : {0, 2, 4}) {
    CHECK(results[i].stop_reason == StopReason::kSettled);
    CHECK_FALSE(results[i].noisy);
    CHECK(results[i].cache_copies == 1);
    CHECK(results[i].drift.before_s == 0);  // probe off
  }

  // A failure in warm-up: no further call, not even in later repetitions.
  CHECK_FALSE(results[1].ok);
  CHECK(results[1].error == "kaboom at call 1");
  CHECK(results[1].samples_s.empty());
  CHECK(calls_early == 1);
  // A failure in the timed loop (the 2nd timed call): reported, and the case stops there.
  CHECK_FALSE(results[3].ok);
  CHECK(results[3].error == "kaboom at call 4");
  CHECK(calls_late == 4);
}

TEST_CASE("run_benchmarks writes Google Benchmark JSON with context, repetitions and aggregates",
          "[benchmark_runner]") {
  int calls_a = 0, calls_b = 0, calls_bad = 0;
  const std::vector<BenchCase> cases = {loop_case("ragged_dot/spec_a/cpu", &calls_a),
                                        loop_case("ragged_dot/spec_b/cpu", &calls_b),
                                        throwing_case("ragged_dot/spec_c/cpu", &calls_bad, 1)};
  BenchOptions options = tiny_options();
  const int repetitions = options.stop.min_samples;
  const fs::path path = temp_json("tokamax_benchmark_runner");
  options.json_path = path.string();
  options.context = {{"tokamax_device", "test-cpu"}, {"tokamax_command", "tokamax bench"}};
  const std::vector<BenchStats> results = run_benchmarks(cases, options, cpu::host_device());
  REQUIRE(results.size() == 3);

  const json report = read_json(path);
  fs::remove(path);
  REQUIRE(report.contains("context"));
  CHECK(report["context"]["tokamax_device"] == "test-cpu");
  CHECK(report["context"]["tokamax_command"] == "tokamax bench");
  REQUIRE(report["benchmarks"].is_array());

  // Entries by name; repetitions and the error runs share the case's name.
  std::map<std::string, std::vector<json>> by_name;
  for (const json& entry : report["benchmarks"]) by_name[entry["name"]].push_back(entry);

  for (size_t c = 0; c < 2; ++c) {
    const BenchCase& bench_case = cases[c];
    const BenchStats& stats = results[c];
    INFO(bench_case.name);
    const std::vector<json>& samples = by_name[bench_case.name];
    REQUIRE(samples.size() == static_cast<size_t>(repetitions));
    std::set<int> indices;
    for (size_t r = 0; r < samples.size(); ++r) {
      const json& entry = samples[r];
      CHECK(entry["run_type"] == "iteration");
      CHECK(entry["label"] == bench_case.label);
      indices.insert(entry["repetition_index"].get<int>());
      CHECK(entry["iterations"].get<int64_t>() == stats.iterations);
      const double seconds =
          entry["real_time"].get<double>() * seconds_per_unit(entry["time_unit"]);
      CHECK(seconds == Approx(stats.samples_s[r]).epsilon(1e-9));
      CHECK(entry["flops"].get<double>() == bench_case.flops);
      CHECK(entry["bytes"].get<double>() == bench_case.bytes);
      CHECK(entry["gflops"].get<double>() == Approx(bench_case.flops / seconds * 1e-9));
      CHECK(entry["gbps"].get<double>() == Approx(bench_case.bytes / seconds * 1e-9));
    }
    CHECK(indices == std::set<int>{0, 1, 2});

    const std::map<std::string, double> expected_seconds = {{"median", stats.median_s},
                                                            {"min", stats.min_s},
                                                            {"max", stats.max_s},
                                                            {"mean", stats.mean_s},
                                                            {"iqr", stats.iqr_s},
                                                            {"stddev", -1},
                                                            {"cv", -1}};
    for (const auto& [aggregate, expected] : expected_seconds) {
      INFO(aggregate);
      const std::vector<json>& entries = by_name[bench_case.name + "_" + aggregate];
      REQUIRE(entries.size() == 1);
      const json& entry = entries[0];
      CHECK(entry["run_type"] == "aggregate");
      CHECK(entry["aggregate_name"] == aggregate);
      for (const char* counter : {"flops", "bytes", "gflops", "gbps"})
        CHECK(entry.contains(counter));
      if (expected < 0) continue;  // stddev and cv: present, compared through stats.cv below
      const double seconds =
          entry["real_time"].get<double>() * seconds_per_unit(entry["time_unit"]);
      CHECK(seconds == Approx(expected).epsilon(1e-9).margin(1e-15));
      // Counters are aggregated too: a spread (iqr) of a constant is 0.
      CHECK(entry["flops"].get<double>() == (aggregate == "iqr" ? 0 : bench_case.flops));
    }
    // With an odd repetition count the median rate is the rate of the median time.
    CHECK(by_name[bench_case.name + "_median"][0]["gflops"].get<double>() == Approx(stats.gflops));
    CHECK(by_name[bench_case.name + "_median"][0]["gbps"].get<double>() == Approx(stats.gbps));
    CHECK(by_name[bench_case.name + "_min"][0]["gflops"].get<double>() ==
          Approx(bench_case.flops / stats.max_s * 1e-9));
    CHECK(by_name[bench_case.name + "_cv"][0]["aggregate_unit"] == "percentage");
    CHECK(by_name[bench_case.name + "_cv"][0]["real_time"].get<double>() ==
          Approx(stats.cv).margin(1e-12));
  }

  // The failing case: one error entry, no aggregates.
  const std::vector<json>& failed = by_name[cases[2].name];
  REQUIRE(failed.size() == 1);
  for (const json& entry : failed) {
    CHECK(entry["error_occurred"] == true);
    CHECK(entry["error_message"] == "kaboom at call 1");
  }
  CHECK(by_name.count(cases[2].name + "_median") == 0);
  CHECK_FALSE(results[2].ok);
}

TEST_CASE("run_benchmarks can be called repeatedly in one process", "[benchmark_runner]") {
  int calls = 0;
  const fs::path first_path = temp_json("tokamax_benchmark_runner_first");
  BenchOptions options = tiny_options();
  options.json_path = first_path.string();
  options.context = {{"tokamax_run", "first"}, {"tokamax_only_first", "yes"}};
  REQUIRE(run_benchmarks({loop_case("first/case/cpu", &calls)}, options, cpu::host_device())[0].ok);
  const std::string first_text = read_text(first_path);

  // No json_path: the earlier file must not be written again.
  options.json_path.clear();
  options.context = {{"tokamax_run", "second"}};
  const std::vector<BenchStats> second =
      run_benchmarks({loop_case("second/case/cpu", &calls)}, options, cpu::host_device());
  REQUIRE(second.size() == 1);
  CHECK(second[0].ok);
  CHECK(read_text(first_path) == first_text);

  // A third run sees only its own cases and context; one repetition works too.
  const fs::path third_path = temp_json("tokamax_benchmark_runner_third");
  options.json_path = third_path.string();
  options.context = {{"tokamax_run", "first"}, {"tokamax_run", "third"}};  // last one wins
  options.stop.min_samples = options.stop.max_samples = 1;
  const std::vector<BenchStats> third =
      run_benchmarks({loop_case("third/case/cpu", &calls)}, options, cpu::host_device());
  REQUIRE(third.size() == 1);
  CHECK(third[0].ok);
  CHECK(third[0].samples_s.size() == 1);
  CHECK(third[0].median_s == third[0].samples_s[0]);
  const json report = read_json(third_path);
  CHECK(report["context"]["tokamax_run"] == "third");
  CHECK_FALSE(report["context"].contains("tokamax_only_first"));
  for (const json& entry : report["benchmarks"]) CHECK(entry["run_name"] == "third/case/cpu");
  fs::remove(first_path);
  fs::remove(third_path);
}

TEST_CASE("run_benchmarks with rounds interleaves the cases and pools their samples",
          "[benchmark_runner]") {
  // Each case logs its calls; a round is warm-up + 3 samples of one call (2 ms > sample_time).
  std::vector<char> order;
  auto logging_case = [&order](const std::string& name, char tag, int* calls) {
    BenchCase bench_case = loop_case(name, calls);
    bench_case.run = [&order, tag, calls] {
      ++*calls;
      order.push_back(tag);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    };
    return bench_case;
  };
  int calls_a = 0, calls_b = 0, calls_bad = 0;
  std::vector<BenchCase> cases = {logging_case("r/a/cpu", 'a', &calls_a),
                                  logging_case("r/b/cpu", 'b', &calls_b),
                                  logging_case("r/fails_in_round_two/cpu", 'c', &calls_bad)};
  cases[2].run = [&calls_bad] {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (++calls_bad >= 9) throw std::runtime_error("kaboom at call " + std::to_string(calls_bad));
  };
  BenchOptions options = tiny_options();
  options.rounds = 3;
  const fs::path path = temp_json("tokamax_benchmark_runner_rounds");
  options.json_path = path.string();
  const std::vector<BenchStats> results = run_benchmarks(cases, options, cpu::host_device());
  REQUIRE(results.size() == 3);
  const int per_round = options.warmup_runs + 3;
  // a's round, b's round, a's round, ...: never two rounds of one case back to back.
  std::string expected;
  for (int round = 0; round < options.rounds; ++round) {
    expected += std::string(static_cast<size_t>(per_round), 'a');
    expected += std::string(static_cast<size_t>(per_round), 'b');
  }
  CHECK(std::string(order.begin(), order.end()) == expected);
  for (size_t i : {0, 1}) {
    INFO(results[i].name);
    check_ok_stats(results[i], cases[i], 3 * options.rounds);
    REQUIRE(results[i].round_medians_s.size() == 3);
    for (size_t round = 0; round < 3; ++round) {
      // The median of that round's 3 samples: their sum less the smallest and the largest.
      const auto first = results[i].samples_s.begin() + static_cast<std::ptrdiff_t>(3 * round);
      const double sum = std::accumulate(first, first + 3, 0.0);
      const double middle = sum - *std::min_element(first, first + 3) -
                            *std::max_element(first, first + 3);
      CHECK(results[i].round_medians_s[round] == Approx(middle));
    }
  }
  // Round one: warm-up 2 + 3 samples; round two fails at its second sample (call 9): its first
  // sample is pooled, the error kept, the round has no median, and round three never runs.
  CHECK_FALSE(results[2].ok);
  CHECK(results[2].error == "kaboom at call 9");
  CHECK(calls_bad == 9);
  CHECK(results[2].samples_s.size() == 3 + 1);
  CHECK(results[2].round_medians_s.size() == 1);
  // The JSON has every pooled sample as a repetition of one batch size.
  const json report = read_json(path);
  int repetitions_a = 0;
  for (const json& entry : report["benchmarks"]) {
    if (entry["run_name"] == "r/a/cpu" && entry["run_type"] == "iteration") {
      ++repetitions_a;
      CHECK(entry["iterations"] == 1);
    }
  }
  CHECK(repetitions_a == 9);
  fs::remove(path);

  // The bandwidth probes around each round: the case keeps the mean before and the mean after.
  testing::FakeDevice probed("cpu");
  probed.probes = {10, 20, 30, 40, 50, 60};  // (before, after) of rounds 1, 2, 3
  options = tiny_options();
  options.rounds = 3;
  options.bandwidth_probe = true;
  const std::vector<BenchStats> with_probe = run_benchmarks({cases[0]}, options, probed);
  REQUIRE(with_probe.size() == 1);
  CHECK(with_probe[0].bandwidth.before_gbps == Approx(30));
  CHECK(with_probe[0].bandwidth.after_gbps == Approx(40));

  options = tiny_options();
  options.rounds = 0;
  CHECK_THROWS_AS(run_benchmarks({cases[0]}, options, cpu::host_device()), InvalidArgument);
}

TEST_CASE("run_benchmarks rejects bad options and cases before running", "[benchmark_runner]") {
  int calls = 0;
  const std::vector<BenchCase> one = {loop_case("x/y/cpu", &calls)};
  BenchOptions options = tiny_options();
  CHECK(run_benchmarks({}, options, cpu::host_device()).empty());

  options.stop.min_samples = 0;
  CHECK_THROWS_AS(run_benchmarks(one, options, cpu::host_device()), InvalidArgument);
  options = tiny_options();
  options.stop.max_samples = 2;  // below min_samples
  CHECK_THROWS_AS(run_benchmarks(one, options, cpu::host_device()), InvalidArgument);
  options = tiny_options();
  options.stop.min_time_s = -1;
  CHECK_THROWS_AS(run_benchmarks(one, options, cpu::host_device()), InvalidArgument);
  options = tiny_options();
  options.warmup_runs = -1;
  CHECK_THROWS_AS(run_benchmarks(one, options, cpu::host_device()), InvalidArgument);
  options = tiny_options();
  options.stop.max_noise = -0.01;
  CHECK_THROWS_AS(run_benchmarks(one, options, cpu::host_device()), InvalidArgument);
  options = tiny_options();
  options.sample_time_s = 0;
  CHECK_THROWS_AS(run_benchmarks(one, options, cpu::host_device()), InvalidArgument);
  options = tiny_options();
  options.json_path = "/nonexistent-tokamax-dir/out.json";
  CHECK_THROWS_AS(run_benchmarks(one, options, cpu::host_device()), InvalidArgument);
  CHECK_THROWS_AS(run_benchmarks({one[0], one[0]}, tiny_options(), cpu::host_device()),
                  InvalidArgument);
  BenchCase no_run = one[0];
  no_run.run = nullptr;
  CHECK_THROWS_AS(run_benchmarks({no_run}, tiny_options(), cpu::host_device()), InvalidArgument);
  CHECK(calls == 0);
}

TEST_CASE("run_benchmarks in cold mode cycles through copies of the inputs",
          "[benchmark_runner][measure]") {
  // A 1 MiB footprint against a 4 MiB "cache": 1 + 2 x 4 = 9 copies.
  int calls = 0;
  std::vector<int> uses;
  int made = 0;
  BenchCase bench_case = loop_case("cold/case/cpu", &calls);
  bench_case.footprint_bytes = 1 << 20;
  bench_case.make_copies = [&](int copies) -> std::function<void(int)> {
    made = copies;
    uses.assign(static_cast<size_t>(copies), 0);
    return [&uses](int i) { ++uses.at(static_cast<size_t>(i)); };
  };
  BenchOptions options = tiny_options();
  options.cache_mode = CacheMode::kCold;
  options.llc_bytes = 4 << 20;
  const std::vector<BenchStats> results = run_benchmarks({bench_case}, options, cpu::host_device());
  REQUIRE(results[0].ok);
  CHECK(made == cold_copies(1 << 20, 4 << 20));
  CHECK(made == 9);
  CHECK(results[0].cache_copies == 9);
  CHECK(calls == 0);  // cold mode never calls run()
  // Warm-up touches every copy once; sampling keeps cycling in order.
  int total = 0;
  for (int count : uses) {
    CHECK(count >= 1);
    total += count;
  }
  const int timed = static_cast<int>(3 * results[0].iterations);
  CHECK(total == 9 + timed);
  // Round robin: no copy is used twice before every other copy was used once more.
  const auto [low, high] = std::minmax_element(uses.begin(), uses.end());
  CHECK(*high - *low <= 1);

  // Hot mode ignores the copies.
  made = 0;
  options.cache_mode = CacheMode::kHot;
  REQUIRE(run_benchmarks({bench_case}, options, cpu::host_device())[0].ok);
  CHECK(made == 0);
  CHECK(calls > 0);

  // A failure while making the copies fails the case, not the run.
  BenchCase failing = bench_case;
  failing.name = "cold/failing/cpu";
  failing.make_copies = [](int) -> std::function<void(int)> {
    throw std::runtime_error("no memory for copies");
  };
  options.cache_mode = CacheMode::kCold;
  const std::vector<BenchStats> both =
      run_benchmarks({failing, bench_case}, options, cpu::host_device());
  CHECK_FALSE(both[0].ok);
  CHECK(both[0].error == "no memory for copies");
  CHECK(both[1].ok);
}

TEST_CASE("run_benchmarks reports the drift probe and an unsettled case as noisy",
          "[benchmark_runner][measure]") {
  int calls = 0;
  BenchOptions options = tiny_options();
  options.drift_probe = true;
  options.max_drift = 1e9;  // never flagged: the flag logic is tested on synthetic times
  // One sample cannot show its noise (infinite), so a zero noise bound never settles, and a
  // timeout that has passed after the first sample stops it there: noisy, by timeout.
  options.stop.min_samples = 1;
  options.stop.max_samples = 1000;
  options.stop.max_noise = 0;
  options.stop.timeout_s = 1e-12;
  const fs::path path = temp_json("tokamax_benchmark_runner_noisy");
  options.json_path = path.string();
  const std::vector<BenchStats> results =
      run_benchmarks({loop_case("noisy/case/cpu", &calls)}, options, cpu::host_device());
  const BenchStats& s = results[0];
  REQUIRE(s.ok);
  CHECK(s.samples_s.size() == 1);
  CHECK(s.stop_reason == StopReason::kTimeout);
  CHECK(s.noisy);
  CHECK(std::isinf(s.noise));
  CHECK((s.drift.before_s > 0 && std::isfinite(s.drift.before_s)));
  CHECK((s.drift.after_s > 0 && std::isfinite(s.drift.after_s)));
  CHECK(s.drift.change == Approx(s.drift.after_s / s.drift.before_s - 1));
  CHECK_FALSE(s.drift.drifted);
  // The single sample is still written as a repetition.
  const json report = read_json(path);
  fs::remove(path);
  int iterations = 0;
  for (const json& entry : report["benchmarks"]) {
    if (entry["run_type"] == "iteration") ++iterations;
  }
  CHECK(iterations == 1);
}

TEST_CASE("run_benchmarks batches at least the device's fewest calls per sample",
          "[benchmark_runner]") {
  // A 2 ms call against a 0.5 ms sample time: one call per sample, unless the device (an
  // accelerator hiding its launch latency) asks for more.
  BenchCase slow;
  slow.name = "slow/case/fake";
  slow.run = [] { std::this_thread::sleep_for(std::chrono::milliseconds(2)); };
  BenchOptions options;
  options.stop.min_samples = 3;
  options.stop.max_samples = 3;
  options.stop.min_time_s = 0;
  options.drift_probe = false;
  testing::FakeDevice device("cuda");
  CHECK(run_benchmarks({slow}, options, device)[0].iterations == 1);
  device.min_calls = 4;
  const BenchStats batched = run_benchmarks({slow}, options, device)[0];
  REQUIRE(batched.ok);
  CHECK(batched.iterations == 4);
  CHECK(batched.median_s > 1.5e-3);  // still per call
}

}  // namespace
}  // namespace tokamax
