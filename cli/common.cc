// Shared subcommand options: case selection, implementation lists, config sources.
#include "cli/common.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "backends/registry.h"
#include "cli/toolkit/harness/local_runner.h"
#include "cli/toolkit/harness/worker_runner.h"
#include "ops/framework/errors.h"
#include "ops/registry.h"

namespace tokamax::cli {

void add_selection_options(CLI::App& command, Selection& selection) {
  command.add_option("--op", selection.ops, "Only this op (repeatable)");
  command.add_option("--tag", selection.tags, "Only specs with this tag (repeatable, any-of)");
  command.add_option("--name", selection.names,
                     "Only specs whose name matches this glob (repeatable)");
  command.add_option("--impl", selection.impls, "Comma list of implementations (default: all)");
  command.add_option("--spec", selection.spec_files,
                     "Extra ArgSpec catalog YAML (repeatable); alone, selects its specs");
  command.add_flag("--all", selection.all,
                   "Every spec of the catalogs, production shapes included (default without "
                   "--op/--tag/--name/--spec: the smoke set)");
}

std::vector<ArgSpec> select_specs(const Selection& selection) {
  const std::vector<ArgSpec> all = load_specs(selection.spec_files);
  if (selection.is_default()) return filter_specs(all, SpecFilter{{}, {"smoke"}, {}});
  if (!selection.has_case_filter() && !selection.all) {
    // Only --spec: the user's own files, not the builtin catalog beside them.
    const std::set<std::string> files(selection.spec_files.begin(), selection.spec_files.end());
    std::vector<ArgSpec> own;
    for (const ArgSpec& spec : all) {
      if (files.count(spec.source)) own.push_back(spec);
    }
    if (own.empty()) throw InvalidArgument("the --spec files hold no specs", "spec");
    return own;
  }
  return filter_specs(all, SpecFilter{selection.ops, selection.tags, selection.names});
}

std::string default_selection_note(const Selection& selection, const std::vector<ArgSpec>& specs) {
  if (!selection.is_default()) return "";
  std::set<std::string> ops;
  for (const ArgSpec& spec : specs) ops.insert(spec.op);
  return "the smoke set: " + std::to_string(specs.size()) + " specs of " +
         std::to_string(ops.size()) +
         " ops (the default); widen it with --tag ci_tests, --tag primary, --op OP or --all";
}

namespace {

// The names of an --impl comma list.
std::set<std::string> impl_names(const std::string& impls) {
  std::set<std::string> names;
  std::stringstream list(impls);
  std::string name;
  while (std::getline(list, name, ',')) {
    if (!name.empty()) names.insert(name);
  }
  return names;
}

}  // namespace

bool names_impl(const std::string& impls, const std::string& impl) {
  return impl_names(impls).count(impl) > 0;
}

std::vector<const Implementation*> select_impls(const Op& op, const std::string& impls,
                                                const std::vector<ArgSpec>& selected) {
  if (impls.empty()) return op.implementations();
  const std::set<std::string> wanted = impl_names(impls);
  // Every name must exist for at least one selected op.
  std::set<std::string> selected_ops;
  for (const ArgSpec& spec : selected) selected_ops.insert(spec.op);
  for (const std::string& w : wanted) {
    bool found = false;
    std::string known;
    for (const std::string& op_name : selected_ops) {
      for (const Implementation* impl : find_op(op_name).implementations()) {
        if (impl->name() == w) found = true;
        known += (known.empty() ? "" : ", ") + op_name + ":" + std::string(impl->name());
      }
    }
    if (!found) {
      throw InvalidArgument("unknown implementation '" + w + "' (known: " + known + ")", "impl");
    }
  }
  std::vector<const Implementation*> out;
  for (const Implementation* impl : op.implementations()) {
    if (wanted.count(std::string(impl->name()))) out.push_back(impl);
  }
  return out;
}

void add_device_option(CLI::App& command, std::string& device) {
  command.add_option("--device", device,
                     "Target device: cpu, cpu:0 or a device id (default: " + default_device().id() +
                         "; `tokamax list` shows them)");
}

void add_config_options(CLI::App& command, ConfigOptions& options, bool allow_explicit) {
  command.add_option("--cache", options.cache_path,
                     "Autotuning cache to read configs from (default: the user cache, " +
                         default_user_cache_path() + ")");
  command.add_flag("--no-cache", options.no_cache,
                   "Ignore the user cache (the shipped cache and heuristics still apply)");
  if (allow_explicit) {
    command.add_option("--config", options.config_json,
                       "Explicit config as JSON for the one implementation given with --impl");
  }
}

ConfigSources::ConfigSources(const ConfigOptions& options, const std::string& impls) {
  if (!options.config_json.empty() && (impls.empty() || impls.find(',') != std::string::npos)) {
    throw InvalidArgument("--config applies to one implementation: give a single --impl", "config");
  }
  if (!options.no_cache) {
    path_ = options.cache_path.empty() ? default_user_cache_path() : options.cache_path;
    user_cache_ = AutotuneCache::load(path_);
    context_.user_cache = &user_cache_;
  }
  context_.shipped_cache = &shipped_cache();
  if (!options.config_json.empty()) {
    try {
      context_.explicit_config = nlohmann::json::parse(options.config_json);
    } catch (const nlohmann::json::parse_error& e) {
      throw InvalidArgument(std::string("--config is not valid JSON: ") + e.what(), "config");
    }
  }
}

void add_isolation_options(CLI::App& command, IsolationOptions& options,
                           const std::string& timeout_flag, double default_timeout_s,
                           const std::string& timeout_what) {
  command
      .add_option("--isolation", options.mode,
                  "worker: run implementations in a worker process, so that one that crashes or "
                  "hangs is reported (crash, timeout) and the rest still run; none: in this "
                  "process (for debuggers)")
      ->capture_default_str()
      ->check(CLI::IsMember({"worker", "none"}));
  options.timeout_s = default_timeout_s;
  command
      .add_option(timeout_flag, options.timeout_s,
                  "Seconds " + timeout_what +
                      " may run in the worker before it is killed and "
                      "reported as timeout (0 = no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
}

std::unique_ptr<CaseRunner> make_runner(const IsolationOptions& options,
                                        const std::atomic<bool>* interrupt) {
  if (options.mode == "none") return std::make_unique<LocalRunner>(interrupt);
  WorkerOptions worker;
  worker.timeout_s = options.timeout_s;
  worker.interrupt = interrupt;
  return std::make_unique<WorkerRunner>(worker);
}

void print_retries(const std::string& item, const std::vector<std::string>& retries) {
  for (const std::string& retry : retries) std::cerr << item << ": " << retry << "\n";
}

void write_text_file(const std::string& path, const std::string& text) {
  const std::filesystem::path file(path);
  std::error_code error;
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path(), error);
  std::ofstream out(path);
  out << text;
  if (!out) throw InvalidArgument("cannot write " + path);
}

bool stderr_is_terminal() { return isatty(STDERR_FILENO) != 0; }

}  // namespace tokamax::cli
