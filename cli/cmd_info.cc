// `tokamax info`: the device as the heuristics and the cache see it.
#include <iostream>

#include "backends/cpu/cpu_info.h"
#include "cli/commands.h"
#include "cli/table.h"
#include "ops/metadata.h"

namespace tokamax::cli {
namespace {

std::string kib(int64_t bytes) {
  return bytes > 0 ? std::to_string(bytes / 1024) + " KiB" : "unknown";
}

int run_info(bool json) {
  const DeviceInfo& device = cpu::host_device();
  if (json) {
    std::cout << nlohmann::json{{"device", device.to_json()}, {"build", run_metadata()}}.dump(2)
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
  table.add_row({"simd width", std::to_string(device.simd_bytes * 8) + " bit"});
  table.add_row({"cores", std::to_string(device.cores)});
  table.add_row({"L1d per core", kib(device.l1d_bytes)});
  table.add_row({"L2 per core", kib(device.l2_bytes)});
  table.add_row({"L3 total", kib(device.l3_bytes)});
  const BuildInfo& build = build_info();
  table.add_row({"tokamax", build.version + " (" + build.git_sha + ")"});
  table.add_row({"compiler", build.compiler + " " + build.flags});
  table.print(std::cout);
  return kExitOk;
}

}  // namespace

Runner add_info_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* sub = app.add_subcommand("info", "Describe this device (ISA, cores, caches, id)");
  sub->add_flag("--json", *json, "Print as JSON");
  return [json] { return run_info(*json); };
}

}  // namespace tokamax::cli
