// `tokamax export-cache`: merge autotuning caches, filter by device/op, write canonical JSON.
#include <filesystem>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "backends/files.h"
#include "cli/report/table.h"
#include "ops/framework/autotune_cache.h"
#include "ops/framework/errors.h"

namespace tokamax::cli {
namespace {

struct ExportCacheOptions {
  std::vector<std::string> caches;   // merged in order; empty = the user cache
  std::vector<std::string> devices;  // filters; empty = all
  std::vector<std::string> ops;
  std::string output;   // empty or "-" = stdout
  std::string out_dir;  // one file per device/op instead
};

template <typename Strings>
std::string join(const Strings& items) {
  std::string joined;
  for (const std::string& item : items) joined += (joined.empty() ? "" : ", ") + item;
  return joined.empty() ? "(none)" : joined;
}

std::set<std::string> devices_of(const AutotuneCache& cache) {
  std::set<std::string> devices;
  for (const auto& [key, entry] : cache.entries()) devices.insert(key.device);
  return devices;
}

std::set<std::string> ops_of(const AutotuneCache& cache) {
  std::set<std::string> ops;
  for (const auto& [key, entry] : cache.entries()) ops.insert(key.op);
  return ops;
}

void print_conflict(const MergeConflict& conflict) {
  const CacheKey& key = conflict.key;
  std::cerr << "conflict: " << key.device << ' ' << key.op << ' ' << key.impl << ' ' << key.args
            << ": kept config " << conflict.kept_config.dump() << " ("
            << format_duration(conflict.kept_time_s) << "), dropped "
            << conflict.dropped_config.dump() << " (" << format_duration(conflict.dropped_time_s)
            << ")\n";
}

// Device ids and op names become folder and file names under --out-dir; refuse any that would
// land outside it.
void check_file_name(const std::string& name, const std::string& what) {
  if (!is_safe_file_name(name)) {
    throw InvalidArgument(
        "export-cache: " + what + " '" + name + "' cannot be used as a file name under --out-dir",
        "--out-dir");
  }
}

// The shipped layout: DIR/<device>/<op>.json, each file a complete cache of its own.
void write_out_dir(const AutotuneCache& cache, const std::string& dir) {
  std::set<std::pair<std::string, std::string>> device_ops;
  for (const auto& [key, entry] : cache.entries()) device_ops.emplace(key.device, key.op);
  for (const auto& [device, op] : device_ops) {
    check_file_name(device, "device id");
    check_file_name(op, "op name");
    const std::filesystem::path path = std::filesystem::path(dir) / device / (op + ".json");
    cache.filtered({device}, {op}).save(path.string());
  }
}

std::string describe_filter(const ExportCacheOptions& options) {
  std::string filter;
  for (const std::string& device : options.devices) filter += " --device " + device;
  for (const std::string& op : options.ops) filter += " --op " + op;
  return filter;
}

int run_export_cache(const ExportCacheOptions& options) {
  const bool named = !options.caches.empty();
  const std::vector<std::string> paths =
      named ? options.caches : std::vector<std::string>{default_user_cache_path()};

  AutotuneCache merged;
  size_t conflicts = 0;
  for (const std::string& path : paths) {
    // load() reads a missing file as an empty cache (right for the user cache); a file the user
    // named must exist.
    std::error_code error;
    if (named &&
        std::filesystem::status(path, error).type() == std::filesystem::file_type::not_found) {
      throw InvalidArgument("export-cache: --cache " + path + ": no such file", "--cache");
    }
    for (const MergeConflict& conflict : merged.merge(AutotuneCache::load(path))) {
      print_conflict(conflict);
      ++conflicts;
    }
  }
  if (merged.empty()) {
    throw InvalidArgument("export-cache: no entries in " + join(paths) +
                              (named ? ""
                                     : " (the user cache: run `tokamax tune` first, or pass "
                                       "--cache FILE)"),
                          "--cache");
  }

  const AutotuneCache selected = merged.filtered(options.devices, options.ops);
  if (selected.empty()) {
    throw InvalidArgument("export-cache: no entries match" + describe_filter(options) +
                              "; the caches hold devices: " + join(devices_of(merged)) +
                              "; ops: " + join(ops_of(merged)),
                          options.devices.empty() ? "--op" : "--device");
  }

  if (!options.out_dir.empty()) {
    write_out_dir(selected, options.out_dir);
  } else if (!options.output.empty() && options.output != "-") {
    selected.save(options.output);
  } else {
    std::cout << selected.dump() << std::flush;
  }
  std::cerr << "exported " << selected.size() << " entries (" << devices_of(selected).size()
            << " devices, " << ops_of(selected).size() << " ops) from " << paths.size()
            << " files, " << conflicts << " conflicts\n";
  return kExitOk;
}

}  // namespace

Runner add_export_cache_command(CLI::App& app) {
  auto options = std::make_shared<ExportCacheOptions>();
  CLI::App* command = app.add_subcommand(
      "export-cache", "Merge autotuning caches, filter them by device/op, write canonical JSON");
  command
      ->add_option("--cache", options->caches,
                   "Cache file to read; repeatable, merged in order (default: the user cache)")
      ->type_name("FILE");
  command->add_option("--device", options->devices, "Keep only this device id (repeatable)")
      ->type_name("ID");
  command->add_option("--op", options->ops, "Keep only this op (repeatable)")->type_name("NAME");
  CLI::Option* output =
      command->add_option("-o,--output", options->output, "Write to FILE (default: stdout)")
          ->type_name("FILE");
  command
      ->add_option("--out-dir", options->out_dir,
                   "Write DIR/<device>/<op>.json, the shipped layout (e.g. results/autotuning)")
      ->type_name("DIR")
      ->excludes(output);
  return [options] { return run_export_cache(*options); };
}

}  // namespace tokamax::cli
