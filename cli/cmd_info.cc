// `tokamax info`: the device as the heuristics and the cache see it, and its measured roofline.
#include <iostream>

#include "backends/cpu/cpu_info.h"
#include "backends/cpu/host_memory.h"
#include "backends/cpu/peaks.h"
#include "backends/cpu/roofline.h"
#include "cli/commands.h"
#include "cli/table.h"
#include "ops/framework/metadata.h"

namespace tokamax::cli {
namespace {

std::string kib(int64_t bytes) {
  return bytes > 0 ? std::to_string(bytes / 1024) + " KiB" : "unknown";
}

// The vector extensions kernels can use, in the vendors' spelling.
std::string isa_summary(const DeviceInfo& device) {
  std::vector<std::string> parts;
  if (device.has("avx512f")) {
    std::string avx512 = "AVX-512 (F";
    if (device.has("avx512bw")) avx512 += " BW";
    if (device.has("avx512vl")) avx512 += " VL";
    parts.push_back(avx512 + ")");
  }
  const std::pair<const char*, const char*> named[] = {{"avx512_bf16", "AVX512-BF16"},
                                                       {"avx512_fp16", "AVX512-FP16"},
                                                       {"amx_bf16", "AMX-BF16"},
                                                       {"avx2", "AVX2"},
                                                       {"fma", "FMA"},
                                                       {"f16c", "F16C"},
                                                       {"neon", "NEON"},
                                                       {"sve", "SVE"}};
  for (const auto& [flag, name] : named) {
    if (device.has(flag)) parts.push_back(name);
  }
  std::string text;
  for (const std::string& part : parts) text += (text.empty() ? "" : ", ") + part;
  return text.empty() ? "no vector extensions detected" : text;
}

std::string gflops(double value) { return format_number(value, 1) + " GFLOP/s"; }

int run_info(bool json, bool remeasure) {
  const DeviceInfo& device = cpu::host_device();
  const cpu::Ceilings& ceilings = cpu::host_ceilings(remeasure);
  const std::string stored_at = cpu::host_ceilings_path();
  const double bf16_peak = ceilings.peak_gflops(DType::kBF16);
  if (json) {
    nlohmann::json ceilings_json = ceilings.to_json();
    ceilings_json["bf16_roofline_gflops"] = bf16_peak;
    ceilings_json["path"] = stored_at;
    ceilings_json["simd_target"] = cpu::simd_target_name();
    std::cout << nlohmann::json{{"device", device.to_json()},
                                {"ceilings", ceilings_json},
                                {"huge_pages", cpu::huge_pages_mode()},
                                {"build", run_metadata()}}
                     .dump(2)
              << "\n";
    return kExitOk;
  }
  std::string isa;
  for (const std::string& f : device.isa) isa += (isa.empty() ? "" : " ") + f;
  Table table({"property", "value"});
  table.add_row({"device id", device.id});
  table.add_row({"model", device.model});
  table.add_row({"vendor", device.vendor});
  table.add_row({"arch", device.arch});
  table.add_row({"isa", isa});
  table.add_row({"vector isa", isa_summary(device)});
  table.add_row({"simd width", std::to_string(device.simd_bytes * 8) + " bit"});
  table.add_row({"simd kernels", "Highway " + cpu::simd_target_name()});
  table.add_row({"cores", std::to_string(device.cores)});
  table.add_row({"L1d per core", kib(device.l1d_bytes)});
  table.add_row({"L2 per core", kib(device.l2_bytes)});
  table.add_row({"L3 total", kib(device.l3_bytes)});
  // Ceilings are for all cores together; "roofline" is the compute ceiling bench compares with.
  table.add_row({"f32 FMA peak", gflops(ceilings.f32_fma_gflops)});
  table.add_row({"f64 FMA peak", gflops(ceilings.f64_fma_gflops)});
  table.add_row({"bf16 dot peak (native)", ceilings.bf16_dot_gflops > 0
                                               ? gflops(ceilings.bf16_dot_gflops) + " (vdpbf16ps)"
                                               : "not available (no avx512_bf16)"});
  table.add_row({"bf16 roofline peak", gflops(bf16_peak) + " (max of bf16 dot, f32 FMA)"});
  table.add_row({"memory bandwidth", format_number(ceilings.bandwidth_gbps, 1) +
                                         " GB/s (STREAM triad f64, 24 B/elem, write-allocate "
                                         "not counted)"});
  if (ceilings.bandwidth_gbps > 0) {
    table.add_row(
        {"ridge point (f32)",
         format_number(ceilings.f32_fma_gflops / ceilings.bandwidth_gbps, 1) + " flop/byte"});
  }
  const std::string& huge = cpu::huge_pages_mode();
  table.add_row({"large buffers", huge == "madvise" ? "2 MiB pages advised from 4 MiB (madvise; "
                                                      "TOKAMAX_HUGE_PAGES=0 turns off)"
                                  : huge == "off"   ? "4 KiB pages (TOKAMAX_HUGE_PAGES=0)"
                                                    : "4 KiB pages (no transparent huge pages)"});
  table.add_row({"ceilings measured", ceilings.measured_at});
  table.add_row({"ceilings stored in", stored_at.empty() ? "not stored" : stored_at});
  const BuildInfo& build = build_info();
  table.add_row({"tokamax", build.version + " (" + build.git_sha + ")"});
  table.add_row({"compiler", build.compiler + " " + build.flags});
  table.print(std::cout);
  return kExitOk;
}

}  // namespace

Runner add_info_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  auto remeasure = std::make_shared<bool>(false);
  CLI::App* sub = app.add_subcommand(
      "info", "Describe this device (ISA, cores, caches, id) and its measured roofline ceilings");
  sub->add_flag("--json", *json, "Print as JSON");
  sub->add_flag("--remeasure", *remeasure,
                "Measure the roofline ceilings again and replace the stored ones");
  return [json, remeasure] { return run_info(*json, *remeasure); };
}

}  // namespace tokamax::cli
