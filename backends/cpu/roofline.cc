// Roofline ceilings: JSON form, the per-device store next to the user cache, and the bound math.
#include "backends/cpu/roofline.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <system_error>
#include <vector>

#include "backends/cpu/cpu_info.h"
#include "ops/framework/autotuning/autotune_cache.h"
#include "ops/framework/errors.h"

namespace tokamax::cpu {
namespace {

constexpr int kFormatVersion = 1;

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm parts{};
  gmtime_r(&now, &parts);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &parts);
  return text;
}

double rate_field(const nlohmann::json& json, const char* key, bool zero_allowed) {
  if (!json.contains(key))
    throw InvalidArgument(std::string("ceilings: missing field ") + key, key);
  const nlohmann::json& value = json.at(key);
  if (!value.is_number()) {
    throw InvalidArgument(
        std::string("ceilings: ") + key + " must be a number, got " + value.dump(), key);
  }
  const double number = value.get<double>();
  if (!std::isfinite(number) || number < 0 || (number == 0 && !zero_allowed)) {
    throw InvalidArgument(std::string("ceilings: ") + key + " must be " +
                              (zero_allowed ? ">= 0" : "> 0") + ", got " + value.dump(),
                          key);
  }
  return number;
}

std::string nonempty_string(const nlohmann::json& json, const char* key) {
  if (!json.contains(key) || !json.at(key).is_string() || json.at(key).get<std::string>().empty()) {
    throw InvalidArgument(std::string("ceilings: ") + key + " must be a non-empty string", key);
  }
  return json.at(key).get<std::string>();
}

// Temporary file + fsync + rename, the same pattern as the autotuning cache: a reader sees the
// old file or the new one, never a half-written one, even if this process dies midway.
void write_atomically(const std::string& path, const std::string& text) {
  static std::atomic<unsigned> counter{0};
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  const std::string temp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "cannot create " + temp);
  bool ok = true;
  for (std::string_view rest = text; ok && !rest.empty();) {
    const ssize_t written = ::write(fd, rest.data(), rest.size());
    if (written < 0 && errno == EINTR) continue;
    ok = written > 0;
    if (ok) rest.remove_prefix(static_cast<size_t>(written));
  }
  // fsync before rename: otherwise a crash can leave the new name pointing at an empty file.
  ok = ok && ::fsync(fd) == 0;
  ok = (::close(fd) == 0) && ok;
  ok = ok && ::rename(temp.c_str(), path.c_str()) == 0;
  if (!ok) {
    const int error = errno;
    ::unlink(temp.c_str());
    throw std::system_error(error, std::generic_category(), "cannot write " + path);
  }
}

// An exclusive flock on <path>.lock for the scope: two processes that both find no stored
// ceilings would otherwise measure at the same time and slow each other's measurement down.
// Best effort: without a lock we still measure, only perhaps concurrently.
class MeasureLock {
 public:
  explicit MeasureLock(const std::string& path) {
    std::error_code ignored;
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ignored);
    fd_ = ::open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    while (fd_ >= 0 && ::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  ~MeasureLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  MeasureLock(const MeasureLock&) = delete;
  MeasureLock& operator=(const MeasureLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

Ceilings Ceilings::from_peaks(const Peaks& peaks, std::string device_id, std::string measured_at) {
  Ceilings ceilings;
  ceilings.f32_fma_gflops = peaks.f32_fma_gflops;
  ceilings.f64_fma_gflops = peaks.f64_fma_gflops;
  ceilings.bf16_dot_gflops = peaks.bf16_dot_gflops;
  ceilings.bandwidth_gbps = peaks.bandwidth_gbps;
  ceilings.device_id = std::move(device_id);
  ceilings.measured_at = std::move(measured_at);
  return ceilings;
}

nlohmann::json Ceilings::to_json() const {
  return {{"format_version", kFormatVersion}, {"device_id", device_id},
          {"measured_at", measured_at},       {"f32_fma_gflops", f32_fma_gflops},
          {"f64_fma_gflops", f64_fma_gflops}, {"bf16_dot_gflops", bf16_dot_gflops},
          {"bandwidth_gbps", bandwidth_gbps}};
}

Ceilings Ceilings::from_json(const nlohmann::json& json) {
  if (!json.is_object()) throw InvalidArgument("ceilings: expected a JSON object");
  for (const auto& item : json.items()) {
    const std::string& key = item.key();
    static const char* const kKnown[] = {"format_version", "device_id",      "measured_at",
                                         "f32_fma_gflops", "f64_fma_gflops", "bf16_dot_gflops",
                                         "bandwidth_gbps"};
    if (std::none_of(std::begin(kKnown), std::end(kKnown),
                     [&](const char* k) { return key == k; })) {
      throw InvalidArgument("ceilings: unknown field " + key, key);
    }
  }
  if (!json.contains("format_version") || json.at("format_version") != kFormatVersion) {
    throw InvalidArgument("ceilings: format_version must be " + std::to_string(kFormatVersion),
                          "format_version");
  }
  Ceilings ceilings;
  ceilings.device_id = nonempty_string(json, "device_id");
  ceilings.measured_at = nonempty_string(json, "measured_at");
  ceilings.f32_fma_gflops = rate_field(json, "f32_fma_gflops", false);
  ceilings.f64_fma_gflops = rate_field(json, "f64_fma_gflops", false);
  ceilings.bf16_dot_gflops = rate_field(json, "bf16_dot_gflops", true);
  ceilings.bandwidth_gbps = rate_field(json, "bandwidth_gbps", false);
  return ceilings;
}

double Ceilings::peak_gflops(DType compute) const {
  switch (compute) {
    case DType::kBF16:
      return std::max(bf16_dot_gflops, f32_fma_gflops);
    case DType::kF16:
    case DType::kF32:
      return f32_fma_gflops;
    case DType::kF64:
      // f64 vectors hold half the lanes at the same FMA rate.
      return f64_fma_gflops > 0 ? f64_fma_gflops : f32_fma_gflops / 2;
    default:
      throw InvalidArgument("roofline: no compute peak for dtype " +
                            std::string(dtype_name(compute)) + "; expected f64, f32, bf16 or f16");
  }
}

double roofline_gflops(const Ceilings& ceilings, double flops, double bytes, DType compute) {
  const double peak = ceilings.peak_gflops(compute);
  if (bytes <= 0) return peak;
  return std::min(peak, ceilings.bandwidth_gbps * flops / bytes);
}

std::string ceilings_path(const std::string& device_id) {
  const std::filesystem::path dir = std::filesystem::path(default_user_cache_path()).parent_path();
  return (dir / ("device-" + sanitize_id(device_id) + ".json")).string();
}

CeilingsLookup load_or_measure_ceilings(const std::string& path, const std::string& device_id,
                                        const std::function<Peaks()>& measure, bool remeasure,
                                        std::ostream& log) {
  MeasureLock lock(path);
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
  CeilingsLookup result{Ceilings::from_peaks(measure(), device_id, utc_now()), true};
  try {
    write_atomically(path, result.ceilings.to_json().dump(2) + "\n");
  } catch (const std::exception& error) {
    log << "tokamax: warning: cannot store ceilings (" << error.what() << ")\n";
  }
  return result;
}

std::string host_ceilings_path() {
  try {
    return ceilings_path(host_device().id);
  } catch (const std::exception&) {
    return "";  // no XDG_CACHE_HOME and no HOME
  }
}

const Ceilings& host_ceilings(bool remeasure) {
  static std::mutex mutex;
  // Every version ever returned stays alive, so a remeasure cannot leave a caller holding a
  // dangling reference (a handful of small objects per process at most).
  static std::vector<std::unique_ptr<Ceilings>> versions;
  std::lock_guard<std::mutex> guard(mutex);
  if (!versions.empty() && !remeasure) return *versions.back();
  const DeviceInfo& device = host_device();
  const std::string path = host_ceilings_path();
  auto measure = [&] {
    std::cerr << "tokamax: measuring the roofline ceilings of " << device.id
              << " (about 2 s, stored for later runs)\n";
    return measure_peaks();
  };
  Ceilings ceilings;
  if (path.empty()) {
    std::cerr << "tokamax: warning: no user cache directory; ceilings are not stored\n";
    ceilings = Ceilings::from_peaks(measure(), device.id, utc_now());
  } else {
    ceilings = load_or_measure_ceilings(path, device.id, measure, remeasure, std::cerr).ceilings;
  }
  versions.push_back(std::make_unique<Ceilings>(std::move(ceilings)));
  return *versions.back();
}

}  // namespace tokamax::cpu
