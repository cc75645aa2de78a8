// `tokamax list`: ops, their implementations (supported here or why not), catalogs and tags.
#include <algorithm>
#include <iostream>
#include <map>
#include <set>

#include "backends/registry.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/report/table.h"
#include "ops/registry.h"

namespace tokamax::cli {
namespace {

struct ListCommand {
  Selection selection;
  std::string device_name;

  int run() const {
    const Device& device = resolve_device(device_name);
    std::cout << "device: " << device.id() << "  " << device.info().description << "\n";
    for (const Device* other : available_devices()) {
      if (other != &device)
        std::cout << "also:   " << other->id() << "  " << other->info().description << "\n";
    }
    for (const UnavailableBackend& backend : unavailable_backends()) {
      std::cout << backend.kind << ":   " << backend.reason << "\n";
    }
    std::cout << "\n";

    Table impls({"op", "implementation", "kind", "on this device", "summary"});
    for (const Op* op : all_ops()) {
      if (!selection.ops.empty() && std::find(selection.ops.begin(), selection.ops.end(),
                                              op->name()) == selection.ops.end()) {
        continue;
      }
      bool first = true;
      for (const Implementation* impl : op->implementations()) {
        const Support support = impl->supported_on(device);
        impls.add_row({first ? std::string(op->name()) : "", std::string(impl->name()),
                       impl->is_vendor() ? "vendor" : "tokamax",
                       support.ok ? "supported" : "unsupported: " + support.reason,
                       first ? std::string(op->summary()) : ""});
        first = false;
      }
    }
    impls.print(std::cout);
    // Other spellings of arguments (upstream's public API), for the ops asked for by name.
    for (const std::string& name : selection.ops) {
      const std::vector<ArgAlias> aliases = find_op(name).arg_aliases();
      if (aliases.empty()) continue;
      std::string text;
      for (const ArgAlias& a : aliases) {
        text += (text.empty() ? "" : ", ") + std::string(a.alias) + " = " + a.name;
      }
      std::cout << "\n" << name << " also accepts: " << text << "\n";
    }

    const bool table_of_specs = selection.has_case_filter() || selection.all;
    const std::vector<ArgSpec> specs =
        table_of_specs ? select_specs(selection) : load_specs(selection.spec_files);
    std::cout << "\n";
    if (table_of_specs) {
      // A filtered list shows the specs themselves.
      Table table({"op", "spec", "tags", "args"});
      for (const ArgSpec& spec : specs) {
        std::string tags;
        for (const std::string& t : spec.tags) tags += (tags.empty() ? "" : ",") + t;
        std::string args = spec.args.args.dump();
        if (args.size() > 120) args = args.substr(0, 117) + "...";
        table.add_row({spec.op, spec.name, tags, args});
      }
      table.print(std::cout);
      return kExitOk;
    }
    // Catalog summary: spec counts per op and per tag, and where they came from.
    std::map<std::string, std::map<std::string, int>> tag_counts;
    std::map<std::string, int> spec_counts;
    std::map<std::string, std::set<std::string>> sources;
    for (const ArgSpec& spec : specs) {
      ++spec_counts[spec.op];
      sources[spec.op].insert(spec.source);
      for (const std::string& tag : spec.tags) ++tag_counts[spec.op][tag];
    }
    Table catalogs({"catalog op", "specs", "tags (specs)", "source"});
    catalogs.set_right_aligned({1});
    for (const auto& [op, count] : spec_counts) {
      std::string tags;
      for (const auto& [tag, n] : tag_counts[op]) {
        tags += (tags.empty() ? "" : " ") + tag + "(" + std::to_string(n) + ")";
      }
      std::string from;
      for (const std::string& s : sources[op]) from += (from.empty() ? "" : ", ") + s;
      catalogs.add_row({op, std::to_string(count), tags, from});
    }
    catalogs.print(std::cout);
    return kExitOk;
  }
};

}  // namespace

Runner add_list_command(CLI::App& app) {
  auto command = std::make_shared<ListCommand>();
  CLI::App* sub = app.add_subcommand(
      "list", "Ops, implementations (supported here or why not), catalogs and tags");
  add_selection_options(*sub, command->selection);
  add_device_option(*sub, command->device_name);
  return [command] { return command->run(); };
}

}  // namespace tokamax::cli
