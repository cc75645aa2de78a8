// Options and helpers shared by the subcommands: case selection, implementations, caches.
#pragma once

#include <CLI/CLI.hpp>
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ops/framework/autotune_cache.h"
#include "cli/toolkit/catalog/arg_spec.h"
#include "ops/framework/config_resolution.h"
#include "ops/framework/devices.h"
#include "cli/toolkit/harness/case_runner.h"
#include "ops/framework/op.h"

namespace tokamax::cli {

// --op, --tag, --name, --impl, --spec, --all: which cases and implementations to run.
struct Selection {
  std::vector<std::string> ops;
  std::vector<std::string> tags;
  std::vector<std::string> names;
  std::vector<std::string> spec_files;
  std::string impls;  // comma list; empty = all
  bool all = false;   // every spec of the catalogs, production shapes included

  bool has_case_filter() const { return !ops.empty() || !tags.empty() || !names.empty(); }
  // Nothing chosen: verify, bench and tune then run the quick `smoke` set of every op.
  bool is_default() const { return !has_case_filter() && spec_files.empty() && !all; }
};
void add_selection_options(CLI::App& command, Selection& selection);

// Loads the builtin and user catalogs and applies the filters (InvalidArgument when nothing
// matches, listing what exists). The default selection is the `smoke` set of every op; with
// only --spec, the specs of those files.
std::vector<ArgSpec> select_specs(const Selection& selection);
// For a default selection, the line that says what ran and how to widen it (printed to stderr
// by the commands); "" otherwise.
std::string default_selection_note(const Selection& selection, const std::vector<ArgSpec>& specs);
// Whether the --impl comma list names `impl`.
bool names_impl(const std::string& impls, const std::string& impl);
// The implementations of `op` named in the comma list (all when empty), in dispatch order. An
// unknown name is an InvalidArgument listing the known ones; a name that exists for some
// selected op but not this one is simply not run for this op.
std::vector<const Implementation*> select_impls(const Op& op, const std::string& impls,
                                                const std::vector<ArgSpec>& selected);

// --device NAME: the device the command targets ("cpu", "cpu:0" or a device id; default: the
// first available device, the host CPU).
void add_device_option(CLI::App& command, std::string& device);

// --cache FILE (user cache to read; default: the user cache) and --config JSON.
struct ConfigOptions {
  std::string cache_path;
  bool no_cache = false;
  std::string config_json;
};
void add_config_options(CLI::App& command, ConfigOptions& options, bool allow_explicit);

// Loads the user cache (corrupt -> InputError, exit 2) and builds the resolution context.
class ConfigSources {
 public:
  // `impls` is the --impl list: an explicit --config needs exactly one implementation.
  ConfigSources(const ConfigOptions& options, const std::string& impls);
  const ConfigContext& context() const { return context_; }
  const std::string& user_cache_path() const { return path_; }

 private:
  std::string path_;
  AutotuneCache user_cache_;
  ConfigContext context_;
};

// --isolation worker|none and the timeout of one run (docs/isolation.md).
struct IsolationOptions {
  std::string mode = "worker";  // worker: implementations run in a `tokamax worker` process
  double timeout_s = 0.0;       // per candidate (tune) or implementation (bench, verify)
};
// `timeout_flag` is "--candidate-timeout" for tune, "--run-timeout" for bench and verify (bench's
// --timeout is the adaptive sampling limit).
void add_isolation_options(CLI::App& command, IsolationOptions& options,
                           const std::string& timeout_flag, double default_timeout_s,
                           const std::string& timeout_what);
// A WorkerRunner (worker) or a LocalRunner (none). `interrupt` may be null.
std::unique_ptr<CaseRunner> make_runner(const IsolationOptions& options,
                                        const std::atomic<bool>* interrupt);

// Prints each retried step of `item` ("op/spec/impl") to stderr, --quiet or not: a worker killed
// from outside says something about the machine (CaseRunner::take_retries).
void print_retries(const std::string& item, const std::vector<std::string>& retries);

// Writes text to a file, creating parent directories; throws InvalidArgument when it cannot.
void write_text_file(const std::string& path, const std::string& text);

// stderr is a terminal (for progress lines).
bool stderr_is_terminal();

}  // namespace tokamax::cli
