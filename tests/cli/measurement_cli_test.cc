// End-to-end tests of bench's adaptive measurement options: JSON fields and bad values.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tests/test_util.h"

using namespace tokamax::testing;
using nlohmann::json;

TEST_CASE("bench --cache-mode cold writes every sample, the estimator, cache mode, noisy and drift",
          "[measure][cli]") {
  ScratchDir dir;
  const std::string out = dir.file("out.json");
  const CommandResult r = run_tokamax(
      "bench --op ragged_dot --tag smoke --max-noise 0.5 --min-samples 3 --timeout 2 "
      "--cache-mode cold --json " +
      out);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("noise (iqr/median)") && Catch::Contains("flags") &&
                           Catch::Contains("samples") && Catch::Contains("cache cold"));
  const json doc = json::parse(read_file(out));

  // How the run was measured.
  const json& m = doc["tokamax"]["measurement"];
  CHECK(m["noise_estimator"] == "iqr/median");
  CHECK(m["cache_mode"] == "cold");
  CHECK(m["max_noise"].get<double>() == Approx(0.5));
  CHECK(m["min_samples"] == 3);
  CHECK(m["timeout_s"].get<double>() == Approx(2));
  CHECK(m["llc_bytes"].get<int64_t>() > 0);
  const std::set<std::string> huge_pages_modes = {"madvise", "off", "unavailable"};
  CHECK(huge_pages_modes.count(m["huge_pages"].get<std::string>()) == 1);
  CHECK(doc["context"]["tokamax_noise_estimator"] == "iqr/median");
  CHECK(doc["context"]["tokamax_cache_mode"] == "cold");

  // Google Benchmark repetition entries: one per sample of every case.
  std::map<std::string, int> iteration_entries;
  for (const json& b : doc["benchmarks"]) {
    if (b["run_type"] == "iteration" && !b.value("error_occurred", false))
      ++iteration_entries[b["run_name"].get<std::string>()];
  }
  REQUIRE_FALSE(doc["tokamax"]["cases"].empty());
  for (const json& c : doc["tokamax"]["cases"]) {
    INFO(c["name"]);
    if (!c["ok"].get<bool>()) continue;
    for (const char* key :
         {"noise", "noise_estimator", "median_uncertainty", "noisy", "stop_reason", "num_samples",
          "cache_mode", "cache_copies", "drift", "drifted", "samples_s"}) {
      INFO(key);
      CHECK(c.contains(key));
    }
    const size_t n = c["samples_s"].size();
    CHECK(n >= 1);
    CHECK(c["num_samples"] == n);
    CHECK(iteration_entries[c["name"].get<std::string>()] == static_cast<int>(n));
    CHECK(c["noise_estimator"] == "iqr/median");
    CHECK(c["cache_mode"] == "cold");
    // Tiny smoke shapes: many copies are needed to overflow the cache.
    CHECK(c["cache_copies"].get<int>() > 1);
    // Settled cases have >= 3 samples and their noise, or their median's uncertainty, within
    // 50%; the others are marked noisy.
    const bool noisy = c["noisy"].get<bool>();
    CHECK(noisy == (c["stop_reason"] != "settled"));
    if (!noisy) {
      CHECK(n >= 3);
      const json& uncertainty = c["median_uncertainty"];
      CHECK((c["noise"].get<double>() <= 0.5 ||
             (uncertainty.is_number() && uncertainty.get<double>() <= 0.5)));
    }
    const json& drift = c["drift"];
    CHECK(drift["probe_before_s"].get<double>() > 0);
    CHECK(drift["probe_after_s"].get<double>() > 0);
    CHECK(drift["drifted"] == c["drifted"]);
    CHECK(drift["drifted"].get<bool>() == (std::abs(drift["change"].get<double>()) > 0.05));
  }

  // bench --compare reads the samples of such a run.
  const CommandResult compare = run_tokamax("bench --compare " + out + " " + out);
  INFO(compare.output);
  CHECK(compare.exit_code == 0);
  CHECK_THAT(compare.output, Catch::Contains("0 slower, 0 faster"));
}

TEST_CASE("bench --repetitions still gives exactly that many samples, hot by default",
          "[measure][cli]") {
  ScratchDir dir;
  const std::string out = dir.file("out.json");
  const CommandResult r = run_tokamax(
      "bench --op ragged_dot --name smoke_f32 --impl reference --repetitions 4 --min-time 0.001 "
      "--json " +
      out);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const json doc = json::parse(read_file(out));
  CHECK(doc["tokamax"]["measurement"]["cache_mode"] == "hot");
  REQUIRE(doc["tokamax"]["cases"].size() == 1);
  const json& c = doc["tokamax"]["cases"][0];
  CHECK(c["samples_s"].size() == 4);
  CHECK(c["cache_copies"] == 1);
}

TEST_CASE(
    "bench --bandwidth-probe measures the bandwidth around each case and uses it as the "
    "memory ceiling",
    "[measure][cli]") {
  ScratchDir dir;
  const std::string with = dir.file("with.json"), without = dir.file("without.json");
  const std::string base =
      "bench --op layer_norm --name smoke_ln_bf16 --impl cpu --repetitions 3 --min-time 0.001 ";
  const CommandResult r = run_tokamax(base + "--bandwidth-probe --json " + with);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("the bandwidth probed around it"));
  const json doc = json::parse(read_file(with));
  const json& m = doc["tokamax"]["measurement"];
  CHECK(m["bandwidth_probe"] == true);
  CHECK(m["bandwidth_probe_bytes"].get<int64_t>() >= (int64_t{64} << 20));
  REQUIRE(doc["tokamax"]["cases"].size() == 1);
  const json& c = doc["tokamax"]["cases"][0];
  REQUIRE(c["ok"] == true);
  const double before = c["bandwidth_probe"]["before_gbps"].get<double>();
  const double after = c["bandwidth_probe"]["after_gbps"].get<double>();
  CHECK(before > 0.1);
  CHECK(after > 0.1);
  // The case's memory ceiling is the probes' mean; a layer norm is memory-bound, so its roofline
  // is that bandwidth times its arithmetic intensity.
  CHECK(c["roofline_bandwidth_gbps"].get<double>() == Approx(0.5 * (before + after)));
  const double intensity = c["flops"].get<double>() / c["bytes"].get<double>();
  CHECK(c["roofline_gflops"].get<double>() == Approx(0.5 * (before + after) * intensity));
  CHECK(c["roofline_fraction"].get<double>() ==
        Approx(c["gflops"].get<double>() / c["roofline_gflops"].get<double>()));

  // Without the flag: no probe, and the ceiling is the stored one.
  const CommandResult plain = run_tokamax(base + "--json " + without);
  REQUIRE(plain.exit_code == 0);
  const json doc2 = json::parse(read_file(without));
  CHECK(doc2["tokamax"]["measurement"]["bandwidth_probe"] == false);
  const json& c2 = doc2["tokamax"]["cases"][0];
  CHECK(c2["bandwidth_probe"].is_null());
  CHECK(c2["roofline_bandwidth_gbps"].get<double>() ==
        Approx(doc2["tokamax"]["ceilings"]["bandwidth_gbps"].get<double>()));
}

TEST_CASE("bench --rounds interleaves the implementations and takes the median per-round ratio",
          "[measure][cli]") {
  ScratchDir dir;
  for (const std::string isolation : {"worker", "none"}) {
    INFO(isolation);
    const std::string out = dir.file(isolation + ".json");
    const CommandResult r = run_tokamax(
        "bench --op ragged_dot --name smoke_f32 --impl cpu,onednn --repetitions 3 --min-time "
        "0.001 --rounds 3 --isolation " +
        isolation + " --json " + out);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains("3 interleaved rounds"));
    const json doc = json::parse(read_file(out));
    CHECK(doc["tokamax"]["measurement"]["rounds"] == 3);
    std::map<std::string, json> by_impl;
    for (const json& c : doc["tokamax"]["cases"]) by_impl[c["impl"].get<std::string>()] = c;
    REQUIRE(by_impl.count("cpu") == 1);
    REQUIRE(by_impl.count("onednn") == 1);
    const json &cpu = by_impl["cpu"], &vendor = by_impl["onednn"];
    if (!vendor["ok"].get<bool>()) continue;  // a build without oneDNN: nothing to compare
    for (const json* c : {&cpu, &vendor}) {
      CHECK((*c)["samples_s"].size() == 9);  // 3 samples in each of 3 rounds, pooled
      CHECK((*c)["round_medians_s"].size() == 3);
    }
    // The vendor against itself: 1, no per-round list. cpu: the vendor's round median over its
    // own, round by round, and their median.
    CHECK(vendor["vs_best_vendor"].get<double>() == 1.0);
    CHECK(vendor["vs_best_vendor_rounds"].empty());
    const json& ratios = cpu["vs_best_vendor_rounds"];
    REQUIRE(ratios.size() == 3);
    std::vector<double> expected;
    for (size_t i = 0; i < 3; ++i) {
      expected.push_back(vendor["round_medians_s"][i].get<double>() /
                         cpu["round_medians_s"][i].get<double>());
      CHECK(ratios[i].get<double>() == Approx(expected.back()));
    }
    std::sort(expected.begin(), expected.end());
    CHECK(cpu["vs_best_vendor"].get<double>() == Approx(expected[1]));
  }
  const CommandResult zero = run_tokamax("bench --op ragged_dot --name smoke_f32 --rounds 0");
  CHECK(zero.exit_code == 2);
  CHECK_THAT(zero.output, Catch::Contains("--rounds"));
}

TEST_CASE("bench rejects bad measurement options with exit 2, naming the option",
          "[measure][cli]") {
  const std::string base = "bench --op ragged_dot --name smoke_f32 --impl reference ";
  for (const std::string& bad :
       {std::string("--max-noise -1"), std::string("--max-noise 5"), std::string("--max-noise x"),
        std::string("--cache-mode warm"), std::string("--estimator mad"),
        std::string("--max-drift -5%"), std::string("--min-samples 0"), std::string("--timeout 0"),
        std::string("--min-time -1"), std::string("--min-samples 20 --max-samples 10"),
        std::string("--repetitions 3 --min-samples 2")}) {
    INFO(bad);
    const CommandResult r = run_tokamax(base + bad);
    INFO(r.output);
    CHECK(r.exit_code == 2);
    const std::string option = bad.substr(0, bad.find(' '));
    CHECK_THAT(r.output, Catch::Contains(option.substr(2)));
  }
  const CommandResult warm = run_tokamax(base + "--cache-mode warm");
  CHECK_THAT(warm.output, Catch::Contains("--cache-mode") && Catch::Contains("warm"));
  const CommandResult negative = run_tokamax(base + "--max-noise -1");
  CHECK_THAT(negative.output, Catch::Contains("--max-noise"));
}

TEST_CASE("bench records the huge-page mode, off with TOKAMAX_HUGE_PAGES=0, a bad value warned",
          "[measure][cli]") {
  ScratchDir dir;
  const std::string out = dir.file("out.json");
  const std::string bench = std::string(TOKAMAX_BIN) +
                            " bench --op layer_norm --name smoke_ln_bf16 --impl cpu "
                            "--repetitions 2 --json " +
                            out;
  const CommandResult off = run_command("TOKAMAX_HUGE_PAGES=0 " + bench);
  INFO(off.output);
  REQUIRE(off.exit_code == 0);
  CHECK(json::parse(read_file(out))["tokamax"]["measurement"]["huge_pages"] == "off");

  const CommandResult bad = run_command("TOKAMAX_HUGE_PAGES=maybe " + bench);
  INFO(bad.output);
  REQUIRE(bad.exit_code == 0);
  CHECK_THAT(bad.output, Catch::Contains("TOKAMAX_HUGE_PAGES='maybe'"));
  CHECK(json::parse(read_file(out))["tokamax"]["measurement"]["huge_pages"] != "off");
}
