// `tokamax verify`: every selected implementation against the float64 oracle.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/interrupt.h"
#include "cli/progress.h"
#include "cli/report/other_device.h"
#include "cli/report/table.h"
#include "cli/toolkit/harness/verifier.h"
#include "ops/framework/errors.h"
#include "ops/framework/metadata.h"
#include "ops/registry.h"

namespace tokamax::cli {
namespace {

// err/bound with two significant digits ("0.31", "1.2e+03"; "inf" for a non-finite output).
std::string format_ratio(double ratio) {
  if (!std::isfinite(ratio)) return "inf";
  if (ratio >= 0.01 && ratio < 100) {
    char text[16];
    std::snprintf(text, sizeof(text), "%.2f", ratio);
    return text;
  }
  return format_scientific(ratio, 1);
}

// The result column: the disposition, or for a crash or timeout that word.
std::string result_word(const VerifyRecord& record) {
  if (record.failure == "crash" || record.failure == "timeout") return record.failure;
  return std::string(disposition_name(record.disposition));
}

struct VerifyCommand {
  Selection selection;
  std::string device_name;
  ConfigOptions config;
  uint64_t seed = 0;
  double oracle_budget = kDefaultOracleBudget;
  double max_memory_gb = 8.0;
  std::string dump_dir;
  std::string json_path;
  IsolationOptions isolation;
  bool quiet = false;

  // The summary line: counts by disposition, failures by kind.
  static void print_summary(const std::vector<VerifyRecord>& records) {
    std::map<std::string, int> counts, failures;
    for (const VerifyRecord& r : records) {
      ++counts[std::string(disposition_name(r.disposition))];
      if (!r.failure.empty()) ++failures[r.failure];
    }
    std::cout << "\n" << records.size() << " results:";
    for (const char* d : {"passed", "failed", "mistrusted", "unsupported", "skipped"}) {
      std::cout << " " << counts[d] << " " << d;
      if (std::string(d) == "failed" && !failures.empty()) {
        std::string by_kind;
        for (const auto& [kind, n] : failures) {
          by_kind += (by_kind.empty() ? "" : ", ") + std::to_string(n) + " " + kind;
        }
        std::cout << " (" << by_kind << ")";
      }
      std::cout << (std::string(d) == "skipped" ? "" : ",");
    }
    std::cout << "\n";
  }

  // --json: every record so far (rewritten after each one, so a stopped run keeps them).
  void write_json(const Device& device, const std::vector<VerifyRecord>& records,
                  bool complete) const {
    nlohmann::json cases = nlohmann::json::array();
    std::map<std::string, int> counts;
    for (const VerifyRecord& r : records) {
      cases.push_back(r.to_json());
      ++counts[std::string(disposition_name(r.disposition))];
    }
    nlohmann::json summary = nlohmann::json::object();
    for (const auto& [name, count] : counts) summary[name] = count;
    const nlohmann::json document = {{"schema_version", 1},
                                     {"kind", "tokamax-verify"},
                                     {"context", run_metadata(device)},
                                     {"seed", seed},
                                     {"oracle_budget", oracle_budget},
                                     {"complete", complete},
                                     {"summary", summary},
                                     {"cases", cases}};
    write_text_file(json_path, document.dump(2) + "\n");
  }

  int run() const {
    const std::vector<ArgSpec> specs = select_specs(selection);
    const std::string note = default_selection_note(selection, specs);
    if (!note.empty()) std::cerr << "verify: " << note << "\n";
    const ConfigSources sources(config, selection.impls);
    const Device& device = resolve_device(device_name);
    // A first SIGINT / SIGTERM abandons the implementation running and keeps what is done.
    const InterruptScope interrupt;
    VerifyOptions options;
    options.device = &device;
    options.seed = seed;
    options.oracle_budget = oracle_budget;
    options.max_case_bytes = max_memory_gb * 1e9;
    options.dump_dir = dump_dir;
    options.configs = sources.context();
    // One worker for the whole command, restarted after a crash or timeout.
    const std::unique_ptr<CaseRunner> runner = make_runner(isolation, interrupt.flag());
    options.runner = runner.get();
    // The portable reference is skipped where it would outlast the run timeout, unless named.
    ReferenceEstimator reference_estimator;
    options.reference_estimator = &reference_estimator;
    options.reference_limit_s = names_impl(selection.impls, "reference") ? 0 : isolation.timeout_s;

    // err/bound: the worst ratio of an output's error to its own bound (passed means <= 1);
    // err/max|y|: the largest error relative to the largest oracle value (the output's scale).
    Table table({"op", "spec", "impl", "dtype", "result", "err/bound", "max abs err", "err/max|y|",
                 "checked", "note"});
    table.set_right_aligned({5, 6, 7, 8});
    // Rows print as each implementation finishes: the identity columns are as wide as the
    // selection needs, the others as their usual values.
    std::vector<std::pair<const ArgSpec*, std::vector<const Implementation*>>> cases;
    std::vector<size_t> widths = {0, 0, 0, 0, 11, 9, 11, 10, 11};
    for (const ArgSpec& spec : specs) {
      const Op& op = find_op(spec.op);
      std::vector<const Implementation*> impls = select_impls(op, selection.impls, specs);
      if (impls.empty()) continue;
      widths[0] = std::max(widths[0], spec.op.size());
      widths[1] = std::max(widths[1], spec.name.size());
      widths[3] = std::max(widths[3], case_dtype(op, spec.args).size());
      for (const Implementation* impl : impls) {
        if (impl->supported_on(device).ok) widths[2] = std::max(widths[2], impl->name().size());
      }
      cases.emplace_back(&spec, std::move(impls));
    }
    table.stream_to(std::cout, widths);
    ProgressLine progress(!quiet && stderr_is_terminal());
    int case_index = 0;
    const int num_cases = static_cast<int>(cases.size());
    std::string current;  // op/spec
    options.on_step = [&](const std::string& step) {
      progress.show(case_index, num_cases, current + ": " + step);
    };
    std::vector<VerifyRecord> records;
    std::vector<OtherDeviceRun> elsewhere;  // listed once under the table, not a row per case
    options.on_record = [&](const VerifyRecord& record) {
      progress.clear();
      records.push_back(record);
      if (!json_path.empty()) write_json(device, records, false);
      const Support support = find_op(record.op).implementation(record.impl).supported_on(device);
      if (!support.ok) {
        elsewhere.push_back({record.op, record.impl, support.reason});
        return;
      }
      const bool compared = record.comparison.sampled > 0;
      table.add_row({record.op, record.spec, record.impl, record.dtype, result_word(record),
                     compared ? format_ratio(record.comparison.worst_ratio) : "-",
                     compared ? format_scientific(record.comparison.max_abs_error) : "-",
                     compared ? format_scientific(normwise_rel_error(record.comparison)) : "-",
                     compared ? std::to_string(record.comparison.sampled) + "/" +
                                    std::to_string(record.comparison.total)
                              : "-",
                     record.reason});
    };
    bool stopped = false;
    try {
      for (const auto& [spec, impls] : cases) {
        ++case_index;
        current = spec->op + "/" + spec->name;
        verify_case(*spec, impls, options);
        progress.clear();
        print_retries(spec->op + "/" + spec->name, runner->take_retries());
        if (interrupt.interrupted()) throw Interrupted();
      }
    } catch (const Interrupted&) {
      stopped = true;
    }
    progress.clear();
    const std::vector<std::string> notes = other_device_notes(elsewhere, device.id());
    if (!notes.empty()) std::cout << "\n";
    for (const std::string& line : notes) std::cout << line << "\n";
    print_summary(records);
    if (!json_path.empty()) write_json(device, records, !stopped);
    if (stopped) {
      std::cerr << "verify: interrupted; the " << records.size() << " finished results are above"
                << (json_path.empty() ? "" : " and in " + json_path) << "\n";
      return kExitInterrupted;
    }
    const bool failed = std::any_of(records.begin(), records.end(), [](const VerifyRecord& r) {
      return r.disposition == Disposition::kFailed;
    });
    return failed ? kExitFailure : kExitOk;
  }
};

}  // namespace

Runner add_verify_command(CLI::App& app) {
  auto command = std::make_shared<VerifyCommand>();
  CLI::App* sub =
      app.add_subcommand("verify",
                         "Check every implementation against the float64 oracle (default: the "
                         "smoke set of every op)");
  add_selection_options(*sub, command->selection);
  add_device_option(*sub, command->device_name);
  add_config_options(*sub, command->config, /*allow_explicit=*/true);
  sub->add_option("--seed", command->seed, "Seed of the generated inputs")->capture_default_str();
  sub->add_option("--oracle-budget", command->oracle_budget,
                  "float64 multiply-adds per case before the oracle samples outputs")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--max-memory", command->max_memory_gb,
                  "Skip cases needing more than this many GB of tensors")
      ->capture_default_str();
  sub->add_option("--dump-dir", command->dump_dir,
                  "Write inputs, outputs and oracle as .npy (DIR/<op>/<spec>/<impl>/<name>.npy)");
  sub->add_option("--json", command->json_path, "Write the results as JSON");
  sub->add_flag("-q,--quiet", command->quiet, "No progress line");
  add_isolation_options(*sub, command->isolation, "--run-timeout", 300.0,
                        "one implementation's run");
  return [command] { return command->run(); };
}

}  // namespace tokamax::cli
