// The CPU device: description, ceilings (measured once per machine, then stored), probes, rows
// of `tokamax info`.
#include "backends/cpu/cpu_device.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <stdexcept>

#include "backends/clock.h"
#include "backends/cpu/amx.h"
#include "backends/cpu/host_memory.h"
#include "backends/cpu/peaks.h"
#include "backends/cpu/simd_target.h"

namespace tokamax::cpu {
namespace {

std::string kib(int64_t bytes) {
  return bytes > 0 ? std::to_string(bytes / 1024) + " KiB" : "unknown";
}

std::string gflops(double value) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.1f GFLOP/s", value);
  return text;
}

std::string fixed1(double value) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.1f", value);
  return text;
}

// The vector extensions kernels can use, in the vendors' spelling.
std::string isa_summary(const CpuInfo& cpu) {
  std::vector<std::string> parts;
  if (cpu.has("avx512f")) {
    std::string avx512 = "AVX-512 (F";
    if (cpu.has("avx512bw")) avx512 += " BW";
    if (cpu.has("avx512vl")) avx512 += " VL";
    parts.push_back(avx512 + ")");
  }
  const std::pair<const char*, const char*> named[] = {{"avx512_bf16", "AVX512-BF16"},
                                                       {"avx512_fp16", "AVX512-FP16"},
                                                       {"avx512_vnni", "AVX512-VNNI"},
                                                       {"amx_bf16", "AMX-BF16"},
                                                       {"amx_int8", "AMX-INT8"},
                                                       {"amx_fp16", "AMX-FP16"},
                                                       {"avx2", "AVX2"},
                                                       {"fma", "FMA"},
                                                       {"f16c", "F16C"},
                                                       {"neon", "NEON"},
                                                       {"sve", "SVE"}};
  for (const auto& [flag, name] : named) {
    if (cpu.has(flag)) parts.push_back(name);
  }
  std::string text;
  for (const std::string& part : parts) text += (text.empty() ? "" : ", ") + part;
  return text.empty() ? "no vector extensions detected" : text;
}

// The matrix units and whether this process runs its tile kernels on them: "usable: bf16 int8",
// or why not (the emulation, TOKAMAX_AMX=emulate, is named when it is on).
std::string amx_summary(const CpuInfo& cpu, bool is_host) {
  if (!is_host) {
    return cpu.has("amx_tile") ? "present (another machine's CPU: not probed)" : "none";
  }
  const AmxSupport& amx = host_amx();
  std::string text;
  if (amx.any()) {
    text = "usable:";
    if (amx.bf16) text += " bf16";
    if (amx.int8) text += " int8";
    if (amx.fp16) text += " fp16";
  } else {
    text = "not usable: " + amx.reason;
  }
  if (tile_mode() == TileMode::kEmulated) text += "; tile kernels emulated (TOKAMAX_AMX=emulate)";
  return text;
}

DeviceInfo device_info(const CpuInfo& cpu) {
  DeviceInfo info;
  info.kind = "cpu";
  info.id = cpu.id;
  info.vendor = cpu.vendor;
  info.model = cpu.model;
  info.arch = cpu.arch;
  info.description = cpu.description();
  info.properties = {
      {"isa", cpu.isa},           {"cores", cpu.cores},       {"l1d_bytes", cpu.l1d_bytes},
      {"l2_bytes", cpu.l2_bytes}, {"l3_bytes", cpu.l3_bytes}, {"simd_bytes", cpu.simd_bytes}};
  return info;
}

}  // namespace

CpuDevice::CpuDevice(CpuInfo cpu, bool is_host)
    : cpu_(std::move(cpu)), info_(device_info(cpu_)), is_host_(is_host) {}

void CpuDevice::require_host(const char* what) const {
  if (!is_host_) {
    throw std::logic_error(std::string("cannot measure ") + what + " of " + info_.id +
                           ": it describes another machine");
  }
}

const Ceilings& CpuDevice::ceilings(bool remeasure) const {
  std::lock_guard<std::mutex> guard(mutex_);
  if (!ceilings_.empty() && !remeasure) return *ceilings_.back();
  require_host("the ceilings");
  auto measure = [&] {
    std::cerr << "tokamax: measuring the roofline ceilings of " << info_.id
              << " (about 2 s, stored for later runs)\n";
    const Peaks peaks = measure_peaks();
    Ceilings measured;
    measured.f32_fma_gflops = peaks.f32_fma_gflops;
    measured.f64_fma_gflops = peaks.f64_fma_gflops;
    measured.bf16_dot_gflops = peaks.bf16_dot_gflops;
    measured.int8_dot_gflops = peaks.int8_dot_gflops;
    measured.amx_bf16_gflops = peaks.amx_bf16_gflops;
    measured.amx_int8_gflops = peaks.amx_int8_gflops;
    measured.bandwidth_gbps = peaks.bandwidth_gbps;
    return measured;
  };
  const std::string path = ceilings_path();
  Ceilings result;
  if (path.empty()) {
    std::cerr << "tokamax: warning: no user cache directory; ceilings are not stored\n";
    result = measure();
    result.device_id = info_.id;
    result.measured_at = utc_now();
  } else {
    result = load_or_measure_ceilings(path, info_.id, measure, remeasure, std::cerr).ceilings;
    // Ceilings stored before the AMX peaks existed (or by a process Linux refused the tiles)
    // would put every bf16 and int8 roofline at the vector units' peak on a machine whose tiles
    // run several times faster: measured again once.
    const AmxSupport& amx = host_amx();
    if ((amx.bf16 && result.amx_bf16_gflops == 0) || (amx.int8 && result.amx_int8_gflops == 0)) {
      result = load_or_measure_ceilings(path, info_.id, measure, true, std::cerr).ceilings;
    }
  }
  ceilings_.push_back(std::make_unique<Ceilings>(std::move(result)));
  return *ceilings_.back();
}

std::string CpuDevice::ceilings_path() const {
  try {
    return tokamax::ceilings_path(info_.id);
  } catch (const std::exception&) {
    return "";  // no XDG_CACHE_HOME and no HOME
  }
}

double CpuDevice::probe_bandwidth_gbps() const {
  require_host("the memory bandwidth");
  PeakOptions options;
  options.bandwidth_bytes = bandwidth_probe_bytes(last_level_cache().bytes);
  options.repetitions = 3;
  return measure_triad_gbps(options);
}

const Memory& CpuDevice::memory() const { return host_memory(); }

std::unique_ptr<Timer> CpuDevice::timer() const { return std::make_unique<WallTimer>(); }

CacheSize CpuDevice::last_level_cache() const {
  const LastLevelCache llc = is_host_ ? cpu::last_level_cache()
                                      : pick_last_level_cache(cpu_.l3_bytes, cpu_.l2_bytes, 0, 0);
  return {llc.bytes, llc.source};
}

std::vector<InfoRow> CpuDevice::info_rows() const {
  const Ceilings& c = ceilings();
  std::string isa;
  for (const std::string& f : cpu_.isa) isa += (isa.empty() ? "" : " ") + f;
  std::vector<InfoRow> rows = {
      {"isa", isa},
      {"vector isa", isa_summary(cpu_)},
      {"simd width", std::to_string(cpu_.simd_bytes * 8) + " bit"},
      {"simd kernels", std::string("Highway ") + simd_target_name()},
      {"cores", std::to_string(cpu_.cores)},
      {"L1d per core", kib(cpu_.l1d_bytes)},
      {"L2 per core", kib(cpu_.l2_bytes)},
      {"L3 total", kib(cpu_.l3_bytes)},
      // Ceilings are for all cores together; "roofline" is the compute ceiling bench compares
      // with.
      {"f32 FMA peak", gflops(c.f32_fma_gflops)},
      {"f64 FMA peak", gflops(c.f64_fma_gflops)},
      {"bf16 dot peak (native)", c.bf16_dot_gflops > 0 ? gflops(c.bf16_dot_gflops) + " (vdpbf16ps)"
                                                       : "not available (no avx512_bf16)"},
      {"matrix units (AMX)", amx_summary(cpu_, is_host_)},
      {"AMX bf16 peak",
       c.amx_bf16_gflops > 0 ? gflops(c.amx_bf16_gflops) + " (TDPBF16PS)" : "not available"},
      {"bf16 roofline peak",
       gflops(std::max({c.bf16_dot_gflops, c.amx_bf16_gflops, c.f32_fma_gflops})) +
           " (max of bf16 dot, AMX bf16, f32 FMA)"},
      {"int8 dot peak (native)",
       c.int8_dot_gflops > 0 ? fixed1(c.int8_dot_gflops) + " GOP/s (vpdpbusd)"
       : cpu_.has("avx512_vnni")
           ? std::string("not measured (ceilings stored before it existed: info --remeasure)")
           : std::string("not available (no avx512_vnni)")},
      {"AMX int8 peak",
       c.amx_int8_gflops > 0 ? fixed1(c.amx_int8_gflops) + " GOP/s (TDPBUSD)" : "not available"},
      {"memory bandwidth", fixed1(c.bandwidth_gbps) +
                               " GB/s (STREAM triad f64, 24 B/elem, write-allocate not counted)"}};
  if (c.bandwidth_gbps > 0) {
    rows.push_back(
        {"ridge point (f32)", fixed1(c.f32_fma_gflops / c.bandwidth_gbps) + " flop/byte"});
  }
  const std::string& huge = huge_pages_mode();
  rows.push_back({"large buffers", huge == "madvise" ? "2 MiB pages advised from 4 MiB (madvise; "
                                                       "TOKAMAX_HUGE_PAGES=0 turns off)"
                                   : huge == "off"   ? "4 KiB pages (TOKAMAX_HUGE_PAGES=0)"
                                                     : "4 KiB pages (no transparent huge pages)"});
  return rows;
}

nlohmann::json CpuDevice::info_json() const {
  nlohmann::json json = {{"ceilings", {{"simd_target", simd_target_name()}}},
                         {"huge_pages", huge_pages_mode()}};
  if (is_host_) {
    const AmxSupport& amx = host_amx();
    json["amx"] = {{"bf16", amx.bf16},
                   {"int8", amx.int8},
                   {"fp16", amx.fp16},
                   {"reason", amx.reason},
                   {"tile_mode", tile_mode_name(tile_mode())}};
  }
  return json;
}

nlohmann::json CpuDevice::measurement_context() const {
  // The tile mode says whether an amx config's timings are the hardware's or the emulation's.
  return {{"huge_pages", huge_pages_mode()},
          {"bandwidth_probe_bytes", bandwidth_probe_bytes(last_level_cache().bytes)},
          {"amx_tile_mode", tile_mode_name(tile_mode())}};
}

const CpuDevice& host_device() {
  static const CpuDevice device(host_cpu(), /*is_host=*/true);
  return device;
}

const CpuInfo& cpu_info(const Device& device) {
  if (const auto* cpu = dynamic_cast<const CpuDevice*>(&device)) return cpu->cpu();
  throw std::invalid_argument("a CPU implementation was given the '" + device.kind() + "' device " +
                              device.id());
}

}  // namespace tokamax::cpu
