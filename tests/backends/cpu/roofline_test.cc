// Tests for the roofline: bound math, the ceilings' JSON form, and the per-device store.
#include "backends/cpu/roofline.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>

#include "ops/framework/errors.h"
#include "tests/test_util.h"

using namespace tokamax;
using tokamax::testing::ScratchDir;

namespace {

cpu::Ceilings sample_ceilings() {
  cpu::Ceilings ceilings;
  ceilings.f32_fma_gflops = 100;
  ceilings.f64_fma_gflops = 40;
  ceilings.bf16_dot_gflops = 200;
  ceilings.bandwidth_gbps = 10;
  ceilings.device_id = "cpu-test-4c";
  ceilings.measured_at = "2025-01-31T12:00:00Z";
  return ceilings;
}

// Sets an environment variable for the scope and restores the previous value (or its absence).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// A stand-in for measure_peaks(): instant, and counts its calls.
struct FakeMeasure {
  int calls = 0;
  cpu::Peaks operator()() {
    ++calls;
    return {.f32_fma_gflops = 100.0 + calls,
            .f64_fma_gflops = 50,
            .bf16_dot_gflops = 0,
            .bandwidth_gbps = 20};
  }
};

}  // namespace

TEST_CASE("roofline_gflops is the lower of the compute and the memory ceiling", "[roofline]") {
  const cpu::Ceilings ceilings = sample_ceilings();
  // 1 flop/byte x 10 GB/s = 10 GFLOP/s < 100: memory-bound.
  CHECK(cpu::roofline_gflops(ceilings, 1e9, 1e9, DType::kF32) == Approx(10));
  // 50 flop/byte x 10 GB/s = 500 GFLOP/s > 100: compute-bound.
  CHECK(cpu::roofline_gflops(ceilings, 50e9, 1e9, DType::kF32) == Approx(100));
  // Exactly at the ridge point (10 flop/byte) both ceilings agree.
  CHECK(cpu::roofline_gflops(ceilings, 10e9, 1e9, DType::kF32) == Approx(100));
  // No memory traffic: compute-bound.
  CHECK(cpu::roofline_gflops(ceilings, 1e9, 0, DType::kF32) == Approx(100));
}

TEST_CASE("peak_gflops picks the ceiling of the compute dtype", "[roofline]") {
  cpu::Ceilings ceilings = sample_ceilings();
  CHECK(ceilings.peak_gflops(DType::kF32) == 100);
  CHECK(ceilings.peak_gflops(DType::kF16) == 100);
  CHECK(ceilings.peak_gflops(DType::kF64) == 40);
  // bf16: the native dot when it is faster than converting to f32 and using FMAs ...
  CHECK(ceilings.peak_gflops(DType::kBF16) == 200);
  CHECK(cpu::roofline_gflops(ceilings, 100e9, 1e9, DType::kBF16) == Approx(200));
  // ... and the f32 FMA path when there is no native dot (or it is slower).
  ceilings.bf16_dot_gflops = 0;
  CHECK(ceilings.peak_gflops(DType::kBF16) == 100);
  ceilings.bf16_dot_gflops = 60;
  CHECK(ceilings.peak_gflops(DType::kBF16) == 100);
  // An unmeasured f64 peak falls back to half the f32 one (half the lanes per vector).
  ceilings.f64_fma_gflops = 0;
  CHECK(ceilings.peak_gflops(DType::kF64) == 50);
  CHECK_THROWS_AS(ceilings.peak_gflops(DType::kI32), InvalidArgument);
}

TEST_CASE("Ceilings round-trip through JSON and reject bad fields", "[roofline]") {
  const cpu::Ceilings ceilings = sample_ceilings();
  const nlohmann::json json = ceilings.to_json();
  const cpu::Ceilings back = cpu::Ceilings::from_json(nlohmann::json::parse(json.dump()));
  CHECK(back.f32_fma_gflops == ceilings.f32_fma_gflops);
  CHECK(back.f64_fma_gflops == ceilings.f64_fma_gflops);
  CHECK(back.bf16_dot_gflops == ceilings.bf16_dot_gflops);
  CHECK(back.bandwidth_gbps == ceilings.bandwidth_gbps);
  CHECK(back.device_id == ceilings.device_id);
  CHECK(back.measured_at == ceilings.measured_at);
  CHECK(back.to_json() == json);

  auto rejects = [&](const char* field, const nlohmann::json& value) {
    nlohmann::json bad = json;
    if (value.is_discarded()) {
      bad.erase(field);
    } else {
      bad[field] = value;
    }
    INFO(bad.dump());
    CHECK_THROWS_WITH(cpu::Ceilings::from_json(bad), Catch::Contains(field));
  };
  rejects("f32_fma_gflops", nlohmann::json::value_t::discarded);
  rejects("f32_fma_gflops", "fast");
  rejects("f64_fma_gflops", 0);
  rejects("bandwidth_gbps", -1);
  rejects("device_id", "");
  rejects("format_version", 99);
  rejects("surprise", 1);
  {  // bf16 0 means "no native dot", not a bad value.
    nlohmann::json no_native = json;
    no_native["bf16_dot_gflops"] = 0;
    CHECK(cpu::Ceilings::from_json(no_native).bf16_dot_gflops == 0);
  }
  CHECK_THROWS_AS(cpu::Ceilings::from_json(nlohmann::json::array()), InvalidArgument);
}

TEST_CASE("ceilings are stored once per device under XDG_CACHE_HOME", "[roofline]") {
  ScratchDir home;
  ScopedEnv env("XDG_CACHE_HOME", home.path().string());
  const std::string id = "cpu-test-2c";
  const std::string path = cpu::ceilings_path(id);
  CHECK(path == (home.path() / "tokamax" / "device-cpu-test-2c.json").string());
  FakeMeasure measure;
  std::ostringstream log;
  auto lookup = [&](bool remeasure = false) {
    return cpu::load_or_measure_ceilings(path, id, std::ref(measure), remeasure, log);
  };

  SECTION("the first call measures and stores, the second loads") {
    const cpu::CeilingsLookup first = lookup();
    CHECK(first.measured);
    CHECK(measure.calls == 1);
    CHECK(first.ceilings.device_id == id);
    CHECK_FALSE(first.ceilings.measured_at.empty());
    const cpu::CeilingsLookup second = lookup();
    CHECK_FALSE(second.measured);
    CHECK(measure.calls == 1);
    CHECK(second.ceilings.to_json() == first.ceilings.to_json());
    CHECK(log.str().empty());

    // --remeasure: measured again and the stored file replaced.
    const cpu::CeilingsLookup again = lookup(true);
    CHECK(again.measured);
    CHECK(measure.calls == 2);
    CHECK(lookup().ceilings.f32_fma_gflops == again.ceilings.f32_fma_gflops);
    CHECK(measure.calls == 2);
    // The atomic write leaves no temporary files behind.
    int entries = 0;
    for (const auto& entry : std::filesystem::directory_iterator(home.path() / "tokamax")) {
      const std::string name = entry.path().filename().string();
      CHECK(name.find(".tmp.") == std::string::npos);
      ++entries;
    }
    CHECK(entries == 2);  // the ceilings and their lock file
  }

  SECTION("a corrupt file is measured again and replaced, with a warning") {
    std::filesystem::create_directories(home.path() / "tokamax");
    testing::write_file(path, "{\"f32_fma_gflops\": 12");
    const cpu::CeilingsLookup result = lookup();
    CHECK(result.measured);
    CHECK(measure.calls == 1);
    CHECK_THAT(log.str(), Catch::Contains("corrupt") && Catch::Contains(path));
    const cpu::Ceilings stored =
        cpu::Ceilings::from_json(nlohmann::json::parse(testing::read_file(path)));
    CHECK(stored.device_id == id);
    CHECK_FALSE(lookup().measured);
  }

  SECTION("a file for another device is ignored") {
    std::filesystem::create_directories(home.path() / "tokamax");
    cpu::Ceilings other = sample_ceilings();
    other.device_id = "cpu-other-64c";
    testing::write_file(path, other.to_json().dump());
    const cpu::CeilingsLookup result = lookup();
    CHECK(result.measured);
    CHECK(result.ceilings.device_id == id);
    CHECK(result.ceilings.f32_fma_gflops != other.f32_fma_gflops);
    CHECK_THAT(log.str(), Catch::Contains("cpu-other-64c"));
    CHECK_FALSE(lookup().measured);
  }
}

TEST_CASE("ceilings are measured even where they cannot be stored", "[roofline]") {
  ScratchDir home;
  // A regular file where the cache directory should be: the store fails, the lookup does not.
  testing::write_file(home.file("tokamax"), "not a directory");
  const std::string path = (home.path() / "tokamax" / "device-cpu-test-2c.json").string();
  FakeMeasure measure;
  std::ostringstream log;
  const cpu::CeilingsLookup result =
      cpu::load_or_measure_ceilings(path, "cpu-test-2c", std::ref(measure), false, log);
  CHECK(result.measured);
  CHECK(result.ceilings.f32_fma_gflops == 101);
  CHECK_THAT(log.str(), Catch::Contains("cannot store"));
}
