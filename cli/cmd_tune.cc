// `tokamax tune`: search each case's config space, verify the winner, record it in the cache.
#include <csignal>
#include <iostream>

#include "backends/cpu/cpu_info.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/table.h"
#include "ops/errors.h"
#include "ops/metadata.h"
#include "ops/registry.h"
#include "ops/tuner.h"

namespace tokamax::cli {
namespace {

std::atomic<bool> g_interrupt{false};

// First Ctrl-C: finish or abandon the current candidate and stop cleanly (completed cases are
// already in the cache). Second Ctrl-C: the default action, immediately.
extern "C" void on_sigint(int) {
  g_interrupt.store(true);
  std::signal(SIGINT, SIG_DFL);
}

struct TuneCommand {
  Selection selection;
  std::string cache_path;
  std::string json_path;
  uint64_t seed = 0;
  double min_time_s = 0.05;
  double oracle_budget = 5e8;
  bool quiet = false;

  int run() {
    const std::vector<ArgSpec> specs = select_specs(selection);
    const std::string path = cache_path.empty() ? default_user_cache_path() : cache_path;
    AutotuneCache::load(path);  // a corrupt cache is an error before any work (and is kept)
    const DeviceInfo& device = cpu::host_device();
    const bool show_progress = !quiet && stderr_is_terminal();

    g_interrupt.store(false);
    auto previous = std::signal(SIGINT, on_sigint);
    struct RestoreSignal {
      void (*handler)(int);
      ~RestoreSignal() { std::signal(SIGINT, handler); }
    } restore{previous};

    Table table({"op", "spec", "impl", "candidates", "best", "heuristics", "gain", "config"});
    table.set_right_aligned({3, 4, 5, 6});
    nlohmann::json records = nlohmann::json::array();
    int tuned = 0, failed = 0;
    const int num_cases = static_cast<int>(specs.size());
    int case_index = 0;
    try {
      for (const ArgSpec& spec : specs) {
        ++case_index;
        const Op& op = find_op(spec.op);
        for (const Implementation* impl : select_impls(op, selection.impls, specs)) {
          std::string skip;
          const Support support = impl->supported_on(device);
          if (!support.ok) skip = "unsupported: " + support.reason;
          if (skip.empty()) {
            try {
              impl->check_args(spec.args);
            } catch (const NotImplemented& e) {
              skip = std::string("unsupported: ") + e.what();
            }
          }
          if (skip.empty() && impl->autotuning_configs_json(spec.args, device).size() <= 1) {
            skip = "nothing to tune";
          }
          if (!skip.empty()) {
            if (!quiet)
              std::cerr << spec.op << "/" << spec.name << "/" << impl->name() << ": " << skip
                        << "\n";
            continue;
          }
          TuneOptions options;
          options.seed = seed;
          options.oracle_budget = oracle_budget;
          options.timing.min_time_s = min_time_s;
          options.interrupt = &g_interrupt;
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
          int valid = 0;
          for (const CandidateResult& c : result.candidates) valid += c.status == "ok";
          const std::string counts =
              std::to_string(valid) + "/" + std::to_string(result.candidates.size());
          if (!result.has_winner) {
            ++failed;
            table.add_row({spec.op, spec.name, std::string(impl->name()), counts, "-", "-", "-",
                           "no winner: " + result.reason});
            continue;
          }
          CacheEntry entry = result.entry;
          entry.metadata["spec"] = spec.name;
          const CacheKey key{device.id, spec.op, spec.args.key(), std::string(impl->name())};
          AutotuneCache::update_file(path, [&](AutotuneCache& cache) { cache.put(key, entry); });
          ++tuned;
          const double gain =
              result.heuristics_time_s > 0 ? result.heuristics_time_s / entry.time_s : NAN;
          table.add_row({spec.op, spec.name, std::string(impl->name()), counts,
                         format_duration(entry.time_s), format_duration(result.heuristics_time_s),
                         format_number(gain, 2) + "x", entry.config.dump()});
          nlohmann::json record = entry.to_json();
          record["key"] = {{"device", key.device}, {"op", key.op}, {"impl", key.impl}};
          record["spec"] = spec.name;
          records.push_back(record);
        }
      }
    } catch (const Interrupted&) {
      if (show_progress) std::cerr << "\r\033[K";
      table.print(std::cout);
      std::cerr << "interrupted: " << tuned << " completed entries kept in " << path << "\n";
      throw;
    }
    table.print(std::cout);
    std::cout << "\n"
              << tuned << " tuned, " << failed << " without a verified winner; cache: " << path
              << "\n";
    if (!json_path.empty()) {
      const nlohmann::json document = {{"schema_version", 1},
                                       {"kind", "tokamax-tune"},
                                       {"context", run_metadata()},
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
      "tune", "Search each implementation's configs, verify the fastest, record it in the cache");
  add_selection_options(*sub, command->selection);
  sub->add_option("--cache", command->cache_path,
                  "Cache file to update (default: " + default_user_cache_path() + ")");
  sub->add_option("--seed", command->seed, "Seed of the generated inputs")->capture_default_str();
  sub->add_option("--min-time", command->min_time_s, "Seconds of timing per candidate")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--oracle-budget", command->oracle_budget,
                  "float64 multiply-adds per case before the oracle samples outputs")
      ->capture_default_str();
  sub->add_option("--json", command->json_path, "Write every candidate's timing as JSON");
  sub->add_flag("-q,--quiet", command->quiet, "No progress line");
  return [command] { return command->run(); };
}

}  // namespace tokamax::cli
