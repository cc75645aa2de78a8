// CPU detection from /proc/cpuinfo, sysfs cache descriptions and the affinity mask (Linux).
#include "backends/cpu/cpu_info.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#include "backends/device.h"

namespace tokamax::cpu {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// "48K" / "2048K" / "32M" as sysfs writes cache sizes.
int64_t parse_size(std::string text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  if (text.empty()) return 0;
  int64_t scale = 1;
  const char unit = text.back();
  if (unit == 'K') scale = 1024;
  if (unit == 'M') scale = 1024 * 1024;
  if (scale != 1) text.pop_back();
  try {
    return std::stoll(text) * scale;
  } catch (...) {
    return 0;
  }
}

// Cache sizes of cpu0 from sysfs; L3 is shared so its size is the total.
void read_caches(int64_t& l1d, int64_t& l2, int64_t& l3) {
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index);
    const std::string level = read_file(dir + "/level");
    if (level.empty()) break;
    const std::string type = read_file(dir + "/type");
    const int64_t size = parse_size(read_file(dir + "/size"));
    if (level[0] == '1' && type.rfind("Data", 0) == 0) l1d = size;
    if (level[0] == '2') l2 = size;
    if (level[0] == '3') l3 = size;
  }
}

std::string field(const std::string& text, const std::string& name) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(name, 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, colon);
    if (key.find_last_not_of(" \t") + 1 != name.size()) continue;
    size_t start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? "" : line.substr(start);
  }
  return "";
}

}  // namespace

bool CpuInfo::has(const std::string& feature) const {
  return std::find(isa.begin(), isa.end(), feature) != isa.end();
}

std::string CpuInfo::description() const {
  std::string text = model.empty() ? vendor : model;
  text += " (" + arch + ", " + std::to_string(cores) + " cores";
  if (!isa.empty()) {
    text += ", ";
    for (size_t i = 0; i < isa.size(); ++i) text += (i ? " " : "") + isa[i];
  }
  return text + ")";
}

CpuInfo describe_cpu(const std::string& cpuinfo_text, int cores, int64_t l1d_bytes,
                     int64_t l2_bytes, int64_t l3_bytes) {
  CpuInfo device;
#if defined(__x86_64__)
  device.arch = "x86_64";
#elif defined(__aarch64__)
  device.arch = "aarch64";
#else
  device.arch = "unknown";
#endif
  device.vendor = field(cpuinfo_text, "vendor_id");
  device.model = field(cpuinfo_text, "model name");
  device.cores = cores;
  device.l1d_bytes = l1d_bytes;
  device.l2_bytes = l2_bytes;
  device.l3_bytes = l3_bytes;

  std::istringstream flags(field(cpuinfo_text, "flags") + " " + field(cpuinfo_text, "Features"));
  std::string flag;
  // The features kernels and heuristics care about, in a fixed order for stable output.
  const char* wanted[] = {"sse4_2",      "avx",      "avx2",     "fma",      "f16c",
                          "avx512f",     "avx512bw", "avx512vl", "avx512_bf16", "avx512_fp16",
                          "avx512_vnni", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16",
                          "asimd",       "sve"};
  std::vector<std::string> present;
  while (flags >> flag) present.push_back(flag);
  for (const char* name : wanted) {
    for (const std::string& p : present) {
      if (p == name) {
        device.isa.push_back(name == std::string("asimd") ? "neon" : name);
        break;
      }
    }
  }
  device.simd_bytes = device.has("avx512f") ? 64 : device.has("avx2") ? 32 : 16;

  std::string vendor_tag = device.vendor == "GenuineIntel"   ? "intel"
                           : device.vendor == "AuthenticAMD" ? "amd"
                           : device.vendor.empty()           ? device.arch
                                                             : device.vendor;
  std::string isa_tag = device.has("avx512_bf16") ? "avx512bf16"
                        : device.has("avx512f")   ? "avx512"
                        : device.has("avx2")      ? "avx2"
                        : device.has("neon")      ? "neon"
                                                  : "base";
  std::string family = field(cpuinfo_text, "cpu family");
  std::string model_number = field(cpuinfo_text, "model");
  std::string id = "cpu-" + vendor_tag;
  if (!family.empty()) id += "-fam" + family;
  if (!model_number.empty()) id += "-mod" + model_number;
  id += "-" + isa_tag + "-" + std::to_string(cores) + "c";
  device.id = sanitize_id(id);
  return device;
}

const CpuInfo& host_cpu() {
  static const CpuInfo device = [] {
    cpu_set_t mask;
    int cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
    if (sched_getaffinity(0, sizeof(mask), &mask) == 0) cores = CPU_COUNT(&mask);
    if (cores < 1) cores = 1;
    int64_t l1d = 0, l2 = 0, l3 = 0;
    read_caches(l1d, l2, l3);
    return describe_cpu(read_file("/proc/cpuinfo"), cores, l1d, l2, l3);
  }();
  return device;
}

LastLevelCache pick_last_level_cache(int64_t sysfs_l3, int64_t sysfs_l2, int64_t sysconf_l3,
                                     int64_t sysconf_l2) {
  LastLevelCache llc;
  if (sysfs_l3 > 0 || sysfs_l2 > 0) {
    llc.bytes = sysfs_l3 > 0 ? sysfs_l3 : sysfs_l2;
    llc.source = "sysfs";
  } else if (sysconf_l3 > 0 || sysconf_l2 > 0) {
    llc.bytes = sysconf_l3 > 0 ? sysconf_l3 : sysconf_l2;
    llc.source = "sysconf";
  } else {
    llc.bytes = kFallbackLlcBytes;
    llc.source = "fallback";
  }
  return llc;
}

const LastLevelCache& last_level_cache() {
  static const LastLevelCache llc = [] {
    const CpuInfo& device = host_cpu();
    int64_t sysconf_l3 = 0, sysconf_l2 = 0;
#if defined(_SC_LEVEL3_CACHE_SIZE) && defined(_SC_LEVEL2_CACHE_SIZE)
    sysconf_l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    sysconf_l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
    return pick_last_level_cache(device.l3_bytes, device.l2_bytes, sysconf_l3, sysconf_l2);
  }();
  return llc;
}

}  // namespace tokamax::cpu
