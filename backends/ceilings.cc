// Ceilings: JSON form and the per-device store next to the user autotuning cache.
#include "backends/ceilings.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <utility>

#include "backends/device.h"
#include "backends/files.h"
#include "backends/user_dirs.h"

namespace tokamax {
namespace {

constexpr int kFormatVersion = 1;

double rate_field(const nlohmann::json& json, const char* key, bool zero_allowed) {
  if (!json.contains(key))
    throw std::invalid_argument(std::string("ceilings: missing field ") + key);
  const nlohmann::json& value = json.at(key);
  if (!value.is_number()) {
    throw std::invalid_argument(std::string("ceilings: ") + key + " must be a number, got " +
                                value.dump());
  }
  const double number = value.get<double>();
  if (!std::isfinite(number) || number < 0 || (number == 0 && !zero_allowed)) {
    throw std::invalid_argument(std::string("ceilings: ") + key + " must be " +
                                (zero_allowed ? ">= 0" : "> 0") + ", got " + value.dump());
  }
  return number;
}

std::string nonempty_string(const nlohmann::json& json, const char* key) {
  if (!json.contains(key) || !json.at(key).is_string() || json.at(key).get<std::string>().empty()) {
    throw std::invalid_argument(std::string("ceilings: ") + key + " must be a non-empty string");
  }
  return json.at(key).get<std::string>();
}

}  // namespace

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm parts{};
  gmtime_r(&now, &parts);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &parts);
  return text;
}

nlohmann::json Ceilings::to_json() const {
  return {{"format_version", kFormatVersion},   {"device_id", device_id},
          {"measured_at", measured_at},         {"f32_fma_gflops", f32_fma_gflops},
          {"f64_fma_gflops", f64_fma_gflops},   {"bf16_dot_gflops", bf16_dot_gflops},
          {"f16_dot_gflops", f16_dot_gflops},   {"int8_dot_gflops", int8_dot_gflops},
          {"amx_bf16_gflops", amx_bf16_gflops}, {"amx_int8_gflops", amx_int8_gflops},
          {"bandwidth_gbps", bandwidth_gbps}};
}

Ceilings Ceilings::from_json(const nlohmann::json& json) {
  if (!json.is_object()) throw std::invalid_argument("ceilings: expected a JSON object");
  static const char* const kKnown[] = {"format_version",  "device_id",       "measured_at",
                                       "f32_fma_gflops",  "f64_fma_gflops",  "bf16_dot_gflops",
                                       "f16_dot_gflops",  "int8_dot_gflops", "amx_bf16_gflops",
                                       "amx_int8_gflops", "bandwidth_gbps"};
  for (const auto& item : json.items()) {
    const std::string& key = item.key();
    if (std::none_of(std::begin(kKnown), std::end(kKnown),
                     [&](const char* k) { return key == k; })) {
      throw std::invalid_argument("ceilings: unknown field " + key);
    }
  }
  if (!json.contains("format_version") || json.at("format_version") != kFormatVersion) {
    throw std::invalid_argument("ceilings: format_version must be " +
                                std::to_string(kFormatVersion));
  }
  Ceilings ceilings;
  ceilings.device_id = nonempty_string(json, "device_id");
  ceilings.measured_at = nonempty_string(json, "measured_at");
  ceilings.f32_fma_gflops = rate_field(json, "f32_fma_gflops", false);
  ceilings.f64_fma_gflops = rate_field(json, "f64_fma_gflops", false);
  ceilings.bf16_dot_gflops = rate_field(json, "bf16_dot_gflops", true);
  if (json.contains("f16_dot_gflops")) {
    ceilings.f16_dot_gflops = rate_field(json, "f16_dot_gflops", true);
  }
  for (auto [name, field] : {std::pair{"int8_dot_gflops", &ceilings.int8_dot_gflops},
                             std::pair{"amx_bf16_gflops", &ceilings.amx_bf16_gflops},
                             std::pair{"amx_int8_gflops", &ceilings.amx_int8_gflops}}) {
    if (json.contains(name)) *field = rate_field(json, name, true);
  }
  ceilings.bandwidth_gbps = rate_field(json, "bandwidth_gbps", false);
  return ceilings;
}

std::string ceilings_path(const std::string& device_id) {
  return (std::filesystem::path(user_cache_dir()) / ("device-" + sanitize_id(device_id) + ".json"))
      .string();
}

CeilingsLookup load_or_measure_ceilings(const std::string& path, const std::string& device_id,
                                        const std::function<Ceilings()>& measure, bool remeasure,
                                        std::ostream& log) {
  // Best effort: without a lock we still measure, only perhaps concurrently.
  std::optional<FileLock> lock;
  try {
    lock.emplace(path);
  } catch (const std::exception&) {
  }
  std::ifstream in(path);
  if (!remeasure && in) {
    try {
      const Ceilings stored = Ceilings::from_json(nlohmann::json::parse(in));
      if (stored.device_id == device_id) return {stored, false};
      log << "tokamax: warning: " << path << " holds ceilings for device " << stored.device_id
          << ", not " << device_id << "; measuring again\n";
    } catch (const std::exception& error) {
      log << "tokamax: warning: corrupt ceilings file " << path << " (" << error.what()
          << "); measuring again\n";
    }
  }
  in.close();
  CeilingsLookup result{measure(), true};
  result.ceilings.device_id = device_id;
  result.ceilings.measured_at = utc_now();
  try {
    write_file_atomically(path, result.ceilings.to_json().dump(2) + "\n");
  } catch (const std::exception& error) {
    log << "tokamax: warning: cannot store ceilings (" << error.what() << ")\n";
  }
  return result;
}

}  // namespace tokamax
