// `tokamax tune`: search each case's config space, verify the winner, record it in the cache.
#include <iostream>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/interrupt.h"
#include "cli/report/table.h"
#include "cli/tune_items.h"
#include "cli/tune_sources.h"
#include "cli/toolkit/autotuning/tuner.h"
#include "ops/framework/errors.h"
#include "ops/framework/metadata.h"
#include "ops/registry.h"

namespace tokamax::cli {
namespace {

struct TuneCommand {
  Selection selection;
  std::string device_name;
  std::vector<std::string> from_files;
  std::string shard_text;
  std::string cache_path;
  std::string json_path;
  uint64_t seed = 0;
  double min_time_s = 0.05;
  double oracle_budget = kDefaultOracleBudget;
  std::string strategy = "exhaustive";
  int max_evals = 0;
  double time_budget_s = 0.0;
  bool force = false;
  bool quiet = false;
  IsolationOptions isolation;

  std::vector<ArgSpec> select_cases() const {
    if (from_files.empty()) {
      std::vector<ArgSpec> specs = select_specs(selection);
      const std::string note = default_selection_note(selection, specs);
      if (!note.empty() && !quiet) std::cerr << "tune: " << note << "\n";
      return specs;
    }
    if (!selection.is_default()) {
      throw InvalidArgument(
          "--from replaces the catalog selection: drop --op/--tag/--name/--spec/--all "
          "(--impl still applies)");
    }
    std::vector<ArgSpec> specs = load_tune_sources(from_files);
    if (!quiet) {
      std::string files;
      for (const std::string& file : from_files) files += (files.empty() ? "" : ", ") + file;
      std::cerr << "tune: " << specs.size() << " distinct cases (op, args) from " << files << "\n";
    }
    return specs;
  }

  int run() {
    const Shard shard = shard_text.empty() ? Shard{} : parse_shard(shard_text);
    const Strategy search_strategy = parse_strategy(strategy);
    const std::vector<ArgSpec> specs = select_cases();
    std::vector<TuneItem> items;
    const std::vector<TuneItem> all_items = sorted_items(specs, selection.impls);
    for (size_t i = shard.index; i < all_items.size(); i += shard.count) {
      items.push_back(all_items[i]);
    }
    const std::string path = cache_path.empty() ? default_user_cache_path() : cache_path;
    // A corrupt cache is an error before any work (and is kept); its entries are what resume
    // skips.
    const AutotuneCache existing = AutotuneCache::load(path);
    const Device& device = resolve_device(device_name);
    const bool show_progress = !quiet && stderr_is_terminal();

    // First Ctrl-C or SIGTERM: finish or abandon the current candidate and stop cleanly
    // (completed cases are already in the cache). A second one: the default action.
    const InterruptScope interrupt;

    // Candidates run in one worker for the whole command (restarted after a crash or timeout).
    const std::unique_ptr<CaseRunner> runner = make_runner(isolation, interrupt.flag());
    Table table(
        {"op", "spec", "impl", "candidates", "failed", "best", "heuristics", "gain", "config"});
    table.set_right_aligned({3, 5, 6, 7});
    nlohmann::json records = nlohmann::json::array();
    int tuned = 0, cached = 0, failed = 0;
    const int num_cases = static_cast<int>(items.size());
    int case_index = 0;
    try {
      for (const TuneItem& item : items) {
        ++case_index;
        const ArgSpec& spec = *item.spec;
        const Implementation* impl = item.impl;
        const Op& op = find_op(spec.op);
        const CacheKey key{device.id(), spec.op, spec.args.key(), std::string(impl->name())};
        const CacheEntry* done = force ? nullptr : existing.find(key);
        if (done != nullptr) {
          ++cached;
          table.add_row({spec.op, spec.name, std::string(impl->name()), "cached", "-",
                         format_duration(done->time_s), "-", "-", done->config.dump()});
          continue;
        }
        std::string skip;
        const Support support = impl->supported_on(device);
        if (!support.ok) skip = "unsupported: " + support.reason;
        if (skip.empty()) {
          try {
            const std::unique_ptr<Implementation::Prepared> prepared =
                impl->prepare(spec.args, device);
            prepared->check();
            if (prepared->autotuning_configs().size() <= 1) skip = "nothing to tune";
          } catch (const NotImplemented& e) {
            skip = std::string("unsupported: ") + e.what();
          }
        }
        if (!skip.empty()) {
          if (!quiet)
            std::cerr << spec.op << "/" << spec.name << "/" << impl->name() << ": " << skip << "\n";
          continue;
        }
        TuneOptions options;
        options.seed = seed;
        options.oracle_budget = oracle_budget;
        options.timing.min_time_s = min_time_s;
        options.strategy = search_strategy;
        options.max_evals = max_evals;
        options.time_budget_s = time_budget_s;
        options.interrupt = interrupt.flag();
        options.runner = runner.get();
        if (show_progress) {
          options.progress = [&](const TuneProgress& p) {
            std::cerr << "\r\033[K[case " << case_index << "/" << num_cases << "] " << spec.name
                      << " " << impl->name() << ": candidate " << p.candidate << "/"
                      << p.num_candidates << ", best "
                      << (p.best_time_s > 0 ? format_duration(p.best_time_s) : "-") << std::flush;
          };
        }
        const TuneResult result = tune_case(op, spec.args, *impl, device, options);
        if (show_progress) std::cerr << "\r\033[K" << std::flush;
        print_retries(spec.op + "/" + spec.name + "/" + std::string(impl->name()), result.retries);
        int valid = 0;
        for (const CandidateResult& c : result.candidates) valid += c.status == "ok";
        const std::string counts =
            std::to_string(valid) + "/" + std::to_string(result.candidates.size());
        const std::string failures = failure_counts(result.candidates);
        if (!result.has_winner) {
          ++failed;
          table.add_row({spec.op, spec.name, std::string(impl->name()), counts, failures, "-", "-",
                         "-", "no winner: " + result.reason});
          nlohmann::json record = {
              {"key", {{"device", key.device}, {"op", key.op}, {"impl", key.impl}}},
              {"spec", spec.name},
              {"winner", false},
              {"reason", result.reason},
              {"retries", result.retries},
              {"phases", result.phases.to_json()},
              {"candidates", nlohmann::json::array()}};
          for (const CandidateResult& c : result.candidates) {
            record["candidates"].push_back(c.to_json());
          }
          records.push_back(record);
          continue;
        }
        CacheEntry entry = result.entry;
        entry.metadata["spec"] = spec.name;
        AutotuneCache::update_file(path, [&](AutotuneCache& cache) { cache.put(key, entry); });
        ++tuned;
        const double gain =
            result.heuristics_time_s > 0 ? result.heuristics_time_s / entry.time_s : NAN;
        table.add_row({spec.op, spec.name, std::string(impl->name()), counts, failures,
                       format_duration(entry.time_s), format_duration(result.heuristics_time_s),
                       format_number(gain, 2) + "x", entry.config.dump()});
        nlohmann::json record = entry.to_json();
        record["key"] = {{"device", key.device}, {"op", key.op}, {"impl", key.impl}};
        record["spec"] = spec.name;
        record["phases"] = result.phases.to_json();
        record["retries"] = result.retries;
        records.push_back(record);
      }
    } catch (const Interrupted&) {
      if (show_progress) std::cerr << "\r\033[K";
      table.print(std::cout);
      std::cerr << "interrupted: " << tuned << " completed entries kept in " << path
                << "; the same command resumes (cached entries are skipped)\n";
      throw;
    }
    table.print(std::cout);
    std::cout << "\n"
              << tuned << " tuned, " << cached << " cached (skipped; --force re-tunes), " << failed
              << " without a verified winner; cache: " << path << "\n";
    if (!json_path.empty()) {
      const nlohmann::json document = {{"schema_version", 1},
                                       {"kind", "tokamax-tune"},
                                       {"context", run_metadata(device)},
                                       {"cache", path},
                                       {"results", records}};
      write_text_file(json_path, document.dump(2) + "\n");
    }
    return failed > 0 ? kExitFailure : kExitOk;
  }
};

}  // namespace

Runner add_tune_command(CLI::App& app) {
  auto command = std::make_shared<TuneCommand>();
  CLI::App* sub = app.add_subcommand(
      "tune",
      "Search each implementation's configs, verify the fastest, record it in the cache "
      "(default: the smoke set of every op)");
  add_selection_options(*sub, command->selection);
  add_device_option(*sub, command->device_name);
  sub->add_option("--cache", command->cache_path,
                  "Cache file to update (default: " + default_user_cache_path() + ")");
  sub->add_option("--seed", command->seed, "Seed of the generated inputs")->capture_default_str();
  sub->add_option("--min-time", command->min_time_s, "Seconds of timing per candidate")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--strategy", command->strategy,
                  "exhaustive (time every config), random (seeded subset, with --max-evals) or "
                  "halving (successive halving with early abort and racing)")
      ->capture_default_str()
      ->check(CLI::IsMember({"exhaustive", "random", "halving"}));
  sub->add_option("--max-evals", command->max_evals,
                  "Candidates timed at most per case, the heuristics config first (0 = all)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--time-budget", command->time_budget_s,
                  "Seconds of candidate timing per case (0 = unlimited); the best verified "
                  "candidate timed so far wins")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--oracle-budget", command->oracle_budget,
                  "float64 multiply-adds per case before the oracle samples outputs")
      ->capture_default_str();
  sub->add_option("--from", command->from_files,
                  "Tune exactly the cases of this file instead of the catalogs (repeatable): "
                  "TOKAMAX_RECORD calls, or verify/bench --json output");
  sub->add_option("--shard", command->shard_text,
                  "Tune only shard I of N (0-based, \"I/N\"): every N-th (op, spec, impl) item "
                  "in sorted order");
  sub->add_flag("--force", command->force,
                "Re-tune items that already have an entry in the cache (default: skip them)");
  sub->add_option("--json", command->json_path, "Write every candidate's timing as JSON");
  sub->add_flag("-q,--quiet", command->quiet, "No progress line");
  add_isolation_options(*sub, command->isolation, "--candidate-timeout", 60.0,
                        "one candidate's timing or verification");
  return [command] { return command->run(); };
}

}  // namespace tokamax::cli
