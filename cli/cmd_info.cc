// `tokamax info`: the device as the heuristics and the cache see it, and its measured roofline.
#include <iostream>

#include "backends/registry.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/report/table.h"
#include "cli/toolkit/measurement/roofline.h"
#include "ops/framework/metadata.h"

namespace tokamax::cli {
namespace {

struct InfoCommand {
  std::string device_name;
  bool json = false;
  bool remeasure = false;

  int run() const {
    const Device& device = resolve_device(device_name);
    const DeviceInfo& info = device.info();
    const Ceilings& ceilings = device.ceilings(remeasure);
    const std::string stored_at = device.ceilings_path();
    if (json) {
      nlohmann::json ceilings_json = ceilings.to_json();
      ceilings_json["bf16_roofline_gflops"] = peak_gflops(ceilings, DType::kBF16);
      ceilings_json["path"] = stored_at;
      nlohmann::json out = {
          {"device", info.to_json()}, {"ceilings", ceilings_json}, {"build", run_metadata(device)}};
      out.merge_patch(device.info_json());
      std::cout << out.dump(2) << "\n";
      return kExitOk;
    }
    Table table({"property", "value"});
    table.add_row({"device id", info.id});
    table.add_row({"model", info.model});
    table.add_row({"vendor", info.vendor});
    table.add_row({"arch", info.arch});
    for (const auto& [property, value] : device.info_rows()) table.add_row({property, value});
    std::string others;
    for (const Device* other : available_devices()) {
      if (other != &device) others += (others.empty() ? "" : ", ") + other->id();
    }
    for (const UnavailableBackend& backend : unavailable_backends()) {
      others += (others.empty() ? "" : "; ") + backend.kind + ": " + backend.reason;
    }
    table.add_row({"other devices", others.empty() ? "none" : others});
    table.add_row({"ceilings measured", ceilings.measured_at});
    table.add_row({"ceilings stored in", stored_at.empty() ? "not stored" : stored_at});
    const BuildInfo& build = build_info();
    table.add_row({"tokamax", build.version + " (" + build.git_sha + ")"});
    table.add_row({"compiler", build.compiler + " " + build.flags});
    table.add_row({"cuda build", build.cuda});
    table.print(std::cout);
    return kExitOk;
  }
};

}  // namespace

Runner add_info_command(CLI::App& app) {
  auto command = std::make_shared<InfoCommand>();
  CLI::App* sub = app.add_subcommand(
      "info", "Describe a device (ISA, cores, caches, id) and its measured roofline ceilings");
  add_device_option(*sub, command->device_name);
  sub->add_flag("--json", command->json, "Print as JSON");
  sub->add_flag("--remeasure", command->remeasure,
                "Measure the roofline ceilings again and replace the stored ones");
  return [command] { return command->run(); };
}

}  // namespace tokamax::cli
