// Tests for a device's ceilings: their JSON form and the per-device store.
#include "backends/ceilings.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>

#include "tests/test_util.h"

using namespace tokamax;
using tokamax::testing::ScratchDir;

namespace {

Ceilings sample_ceilings() {
  Ceilings ceilings;
  ceilings.f32_fma_gflops = 100;
  ceilings.f64_fma_gflops = 40;
  ceilings.bf16_dot_gflops = 200;
  ceilings.int8_dot_gflops = 400;
  ceilings.amx_bf16_gflops = 3000;
  ceilings.amx_int8_gflops = 6000;
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

// A stand-in for a device's measurement: instant, and counts its calls.
struct FakeMeasure {
  int calls = 0;
  Ceilings operator()() {
    ++calls;
    Ceilings measured;
    measured.f32_fma_gflops = 100.0 + calls;
    measured.f64_fma_gflops = 50;
    measured.bandwidth_gbps = 20;
    return measured;
  }
};

}  // namespace

TEST_CASE("Ceilings round-trip through JSON and reject bad fields", "[ceilings]") {
  const Ceilings ceilings = sample_ceilings();
  const nlohmann::json json = ceilings.to_json();
  const Ceilings back = Ceilings::from_json(nlohmann::json::parse(json.dump()));
  CHECK(back.f32_fma_gflops == ceilings.f32_fma_gflops);
  CHECK(back.f64_fma_gflops == ceilings.f64_fma_gflops);
  CHECK(back.bf16_dot_gflops == ceilings.bf16_dot_gflops);
  CHECK(back.int8_dot_gflops == ceilings.int8_dot_gflops);
  CHECK(back.bandwidth_gbps == ceilings.bandwidth_gbps);
  CHECK(back.amx_bf16_gflops == ceilings.amx_bf16_gflops);
  CHECK(back.amx_int8_gflops == ceilings.amx_int8_gflops);
  // Files stored before the int8 and AMX peaks existed still load (as unmeasured).
  nlohmann::json older = json;
  older.erase("int8_dot_gflops");
  older.erase("amx_bf16_gflops");
  older.erase("amx_int8_gflops");
  const Ceilings old_ceilings = Ceilings::from_json(older);
  CHECK(old_ceilings.int8_dot_gflops == 0);
  CHECK(old_ceilings.amx_bf16_gflops == 0);
  CHECK(old_ceilings.amx_int8_gflops == 0);
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
    CHECK_THROWS_WITH(Ceilings::from_json(bad), Catch::Contains(field));
  };
  rejects("f32_fma_gflops", nlohmann::json::value_t::discarded);
  rejects("f32_fma_gflops", "fast");
  rejects("f64_fma_gflops", 0);
  rejects("bandwidth_gbps", -1);
  rejects("amx_bf16_gflops", -5);
  rejects("amx_int8_gflops", "many");
  rejects("device_id", "");
  rejects("format_version", 99);
  rejects("surprise", 1);
  {  // Files stored before f16_dot_gflops existed stay valid (0: no native f16 dot).
    nlohmann::json old = json;
    old.erase("f16_dot_gflops");
    CHECK(Ceilings::from_json(old).f16_dot_gflops == 0);
  }
  {  // bf16 0 means "no native dot", not a bad value.
    nlohmann::json no_native = json;
    no_native["bf16_dot_gflops"] = 0;
    CHECK(Ceilings::from_json(no_native).bf16_dot_gflops == 0);
  }
  CHECK_THROWS_AS(Ceilings::from_json(nlohmann::json::array()), std::invalid_argument);
}

TEST_CASE("ceilings are stored once per device under XDG_CACHE_HOME", "[ceilings]") {
  ScratchDir home;
  ScopedEnv env("XDG_CACHE_HOME", home.path().string());
  const std::string id = "cpu-test-2c";
  const std::string path = ceilings_path(id);
  CHECK(path == (home.path() / "tokamax" / "device-cpu-test-2c.json").string());
  FakeMeasure measure;
  std::ostringstream log;
  auto lookup = [&](bool remeasure = false) {
    return load_or_measure_ceilings(path, id, std::ref(measure), remeasure, log);
  };

  SECTION("the first call measures and stores, the second loads") {
    const CeilingsLookup first = lookup();
    CHECK(first.measured);
    CHECK(measure.calls == 1);
    CHECK(first.ceilings.device_id == id);
    CHECK_FALSE(first.ceilings.measured_at.empty());
    const CeilingsLookup second = lookup();
    CHECK_FALSE(second.measured);
    CHECK(measure.calls == 1);
    CHECK(second.ceilings.to_json() == first.ceilings.to_json());
    CHECK(log.str().empty());

    // --remeasure: measured again and the stored file replaced.
    const CeilingsLookup again = lookup(true);
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
    const CeilingsLookup result = lookup();
    CHECK(result.measured);
    CHECK(measure.calls == 1);
    CHECK_THAT(log.str(), Catch::Contains("corrupt") && Catch::Contains(path));
    const Ceilings stored = Ceilings::from_json(nlohmann::json::parse(testing::read_file(path)));
    CHECK(stored.device_id == id);
    CHECK_FALSE(lookup().measured);
  }

  SECTION("a file for another device is ignored") {
    std::filesystem::create_directories(home.path() / "tokamax");
    Ceilings other = sample_ceilings();
    other.device_id = "cpu-other-64c";
    testing::write_file(path, other.to_json().dump());
    const CeilingsLookup result = lookup();
    CHECK(result.measured);
    CHECK(result.ceilings.device_id == id);
    CHECK(result.ceilings.f32_fma_gflops != other.f32_fma_gflops);
    CHECK_THAT(log.str(), Catch::Contains("cpu-other-64c"));
    CHECK_FALSE(lookup().measured);
  }
}

TEST_CASE("ceilings are measured even where they cannot be stored", "[ceilings]") {
  ScratchDir home;
  // A regular file where the cache directory should be: the store fails, the lookup does not.
  testing::write_file(home.file("tokamax"), "not a directory");
  const std::string path = (home.path() / "tokamax" / "device-cpu-test-2c.json").string();
  FakeMeasure measure;
  std::ostringstream log;
  const CeilingsLookup result =
      load_or_measure_ceilings(path, "cpu-test-2c", std::ref(measure), false, log);
  CHECK(result.measured);
  CHECK(result.ceilings.f32_fma_gflops == 101);
  CHECK_THAT(log.str(), Catch::Contains("cannot store"));
}
