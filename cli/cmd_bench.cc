// `tokamax bench`: time implementations side by side (Google Benchmark), GFLOP/s, GB/s and the
// roofline; the report's rows and printers are in cli/report/bench_report.h.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/interrupt.h"
#include "cli/progress.h"
#include "cli/report/bench_compare.h"
#include "cli/report/bench_report.h"
#include "cli/toolkit/harness/verifier.h"
#include "cli/toolkit/measurement/bench_sampler.h"
#include "cli/toolkit/measurement/measurement.h"
#include "cli/toolkit/measurement/roofline.h"
#include "ops/framework/errors.h"
#include "ops/framework/metadata.h"
#include "ops/registry.h"

namespace tokamax::cli {
namespace {

namespace fs = std::filesystem;

struct BenchCommand {
  Selection selection;
  std::string device_name;
  ConfigOptions config;
  uint64_t seed = 0;
  // Adaptive measurement (docs/measurement.md).
  int min_samples = 10;
  int max_samples = 1000;
  int repetitions = 0;  // > 0: exactly this many samples (min = max), the old fixed count
  int warmup = 2;
  double min_time_s = 0.1;
  double timeout_s = 5.0;
  double sample_time_s = 5e-4;
  std::string max_noise = "1%";
  std::string estimator = "iqr";
  std::string cache_mode = "hot";
  std::string max_drift = "5%";
  bool bandwidth_probe = false;
  int rounds = 1;
  std::string json_path;
  std::vector<std::string> compare_paths;  // --compare OLD NEW: compare saved runs, run nothing
  std::string threshold = "5%";
  IsolationOptions isolation;

  int run_compare() const {
    CompareOptions options;
    options.threshold = parse_threshold(threshold);
    const CompareReport report = compare_runs(load_bench_samples(compare_paths[0]),
                                              load_bench_samples(compare_paths[1]), options);
    print_comparison(std::cout, report, compare_paths[0], compare_paths[1]);
    if (!json_path.empty()) write_text_file(json_path, to_json(report).dump(2) + "\n");
    return report.count(Verdict::kSlower) > 0 ? kExitFailure : kExitOk;
  }

  // The measurement options, checked before anything runs (bad values: InvalidArgument naming
  // the option, exit 2).
  BenchOptions measurement_options(const Device& device) const {
    BenchOptions options;
    options.warmup_runs = warmup;
    options.stop.min_samples = repetitions > 0 ? repetitions : min_samples;
    options.stop.max_samples = repetitions > 0 ? repetitions : max_samples;
    if (options.stop.max_samples < options.stop.min_samples) {
      throw InvalidArgument("--max-samples " + std::to_string(max_samples) +
                                " is below --min-samples " + std::to_string(min_samples),
                            "max-samples");
    }
    if (!(std::isfinite(min_time_s) && min_time_s >= 0)) {
      throw InvalidArgument("--min-time " + format_number(min_time_s, 6) + " must be >= 0 seconds",
                            "min-time");
    }
    if (!(timeout_s > 0)) {
      throw InvalidArgument("--timeout " + format_number(timeout_s, 6) + " must be > 0 seconds",
                            "timeout");
    }
    if (!(std::isfinite(sample_time_s) && sample_time_s > 0)) {
      throw InvalidArgument(
          "--sample-time " + format_number(sample_time_s, 6) + " must be > 0 seconds",
          "sample-time");
    }
    options.sample_time_s = sample_time_s;
    options.stop.min_time_s = min_time_s;
    options.stop.timeout_s = timeout_s;
    options.stop.max_noise = parse_fraction(max_noise, "--max-noise");
    options.stop.estimator = parse_estimator(estimator, "--estimator");
    options.cache_mode = parse_cache_mode(cache_mode, "--cache-mode");
    options.llc_bytes = device.last_level_cache().bytes;
    options.max_drift = parse_fraction(max_drift, "--max-drift");
    options.bandwidth_probe = bandwidth_probe;
    options.rounds = rounds;
    return options;
  }

  // tokamax.measurement in the JSON: how the cases were measured.
  static nlohmann::json measurement_json(const BenchOptions& o, const Device& device) {
    const CacheSize llc = device.last_level_cache();
    nlohmann::json out = device.measurement_context();
    if (!o.bandwidth_probe) out["bandwidth_probe_bytes"] = 0;
    out.update({{"noise_estimator", estimator_name(o.stop.estimator)},
                {"max_noise", o.stop.max_noise},
                {"min_samples", o.stop.min_samples},
                {"max_samples", o.stop.max_samples},
                {"min_time_s", o.stop.min_time_s},
                {"timeout_s", o.stop.timeout_s},
                {"sample_time_s", o.sample_time_s},
                {"warmup_runs", o.warmup_runs},
                {"cache_mode", cache_mode_name(o.cache_mode)},
                {"llc_bytes", llc.bytes},
                {"llc_source", llc.source},
                {"cold_cache_factor", kColdCacheFactor},
                {"max_cold_bytes", kMaxColdBytes},
                {"drift_probe", o.drift_probe},
                {"max_drift", o.max_drift},
                {"bandwidth_probe", o.bandwidth_probe},
                {"rounds", o.rounds}});
    return out;
  }

  // The benchmarks of one spec, in dispatch order: each implementation with its resolved config,
  // or why it cannot run.
  std::vector<BenchResult> plan(const ArgSpec& spec, const std::vector<ArgSpec>& specs,
                                const Device& device, const ConfigContext& configs,
                                const BenchOptions& options) const {
    const Op& op = find_op(spec.op);
    std::vector<BenchResult> results;
    for (const Implementation* impl : select_impls(op, selection.impls, specs)) {
      BenchResult r;
      r.op = spec.op;
      r.spec = spec.name;
      r.impl = std::string(impl->name());
      r.dtype = case_dtype(op, spec.args);
      r.args = spec.args.args;
      r.flops = op.flops(spec.args);
      r.bytes = op.bytes(spec.args);
      for (const auto& decls : {op.inputs(spec.args), op.outputs(spec.args)}) {
        for (const TensorDecl& decl : decls) {
          r.footprint_bytes += static_cast<int64_t>(decl.spec.size_bytes());
        }
      }
      r.vendor = impl->is_baseline();
      r.backend = impl->describe();
      r.estimator = options.stop.estimator;
      r.cache_mode = options.cache_mode;
      const Support support = impl->supported_on(device);
      if (!support.ok) {
        r.unsupported = support.reason;
        r.other_device = true;
      }
      if (r.unsupported.empty()) {
        try {
          const std::unique_ptr<Implementation::Prepared> prepared =
              impl->prepare(spec.args, device);
          prepared->check();
          const ResolvedConfig resolved =
              resolve_config(*impl, *prepared, spec.args, device, configs);
          r.config = resolved.kernel.config;
          r.config_source = std::string(config_source_name(resolved.source));
        } catch (const NotImplemented& e) {
          r.unsupported = e.what();
        }
      }
      results.push_back(std::move(r));
    }
    return results;
  }

  // What follows from the timings: the roofline (with --bandwidth-probe, at the bandwidth
  // measured around each case) and the ratio to the best vendor implementation of the spec.
  // With --rounds, the ratio is the median of the per-round ratios to that vendor (each round
  // times every implementation once, so a slow minute slows both sides of a ratio alike).
  static void derive(std::vector<BenchResult>& results, const Ceilings& ceilings, DType compute) {
    const BenchResult* best = nullptr;
    for (const BenchResult& r : results) {
      if (r.ran() && r.vendor && r.stats.ok && (!best || r.stats.gflops > best->stats.gflops)) {
        best = &r;
      }
    }
    const double best_vendor = best ? best->stats.gflops : 0.0;
    for (BenchResult& r : results) {
      if (!r.ran()) continue;
      Ceilings at = ceilings;
      if (r.stats.bandwidth.probed()) at.bandwidth_gbps = r.stats.bandwidth.mean_gbps();
      r.roofline_gflops = roofline_gflops(at, r.flops, r.bytes, compute);
      r.roofline_bandwidth_gbps = at.bandwidth_gbps;
      if (r.stats.ok) {
        r.roofline_fraction =
            roofline_fraction(at, r.flops, r.bytes, compute, r.stats.gflops, r.stats.gbps);
      }
      r.best_vendor_gflops = best_vendor;
      r.vs_best_vendor_rounds.clear();
      if (!r.stats.ok || best_vendor <= 0) continue;
      r.vs_best_vendor = r.stats.gflops / best_vendor;
      const std::vector<double>& own = r.stats.round_medians_s;
      const std::vector<double>& theirs = best->stats.round_medians_s;
      if (&r != best && own.size() > 1 && own.size() == theirs.size()) {
        for (size_t i = 0; i < own.size(); ++i) {
          r.vs_best_vendor_rounds.push_back(own[i] > 0 ? theirs[i] / own[i] : NAN);
        }
        r.vs_best_vendor = median(r.vs_best_vendor_rounds);
      }
    }
  }

  // Times the implementations of `planned` that can run (one spec's), on one worker, and
  // appends their Google Benchmark JSON to `merged` (with --json).
  void time_spec(const ArgSpec& spec, const Device& device, const Ceilings& ceilings,
                 BenchOptions& options, CaseRunner& runner, std::vector<BenchResult>& planned,
                 nlohmann::json& merged, const std::string& scratch) const {
    const Op& op = find_op(spec.op);
    std::vector<BenchJob> jobs;
    std::vector<BenchResult*> timed;
    for (BenchResult& r : planned) {
      if (!r.ran()) continue;
      jobs.push_back({&op.implementation(r.impl), r.config,
                      spec.op + "/" + spec.name + "/" + r.impl, r.flops, r.bytes,
                      nlohmann::json{{"config", r.config}, {"source", r.config_source}}.dump()});
      timed.push_back(&r);
    }
    if (jobs.empty()) return;
    options.json_path = json_path.empty() ? "" : scratch;
    CaseSetup setup;
    setup.op = spec.op;
    setup.args = spec.args;
    setup.device = device.id();
    setup.seed = seed;
    runner.setup(setup);
    const std::vector<BenchOutcome> outcomes = runner.bench(jobs, options);
    for (size_t k = 0; k < outcomes.size(); ++k) {
      timed[k]->stats = outcomes[k].stats;
      timed[k]->failure = outcomes[k].status == "ok" ? "" : outcomes[k].status;
    }
    if (!json_path.empty()) append_json(merged, scratch);
    derive(planned, ceilings, op.compute_dtype(spec.args));
  }

  // The ceilings line, printed before the table.
  static void print_ceilings(std::ostream& out, const Device& device, const Ceilings& ceilings,
                             const BenchOptions& options) {
    out << "device " << device.id() << ", roofline from measured ceilings: f32 FMA "
        << format_number(ceilings.f32_fma_gflops, 1) << " GFLOP/s, bf16 "
        << format_number(peak_gflops(ceilings, DType::kBF16), 1) << " GFLOP/s, memory "
        << format_number(ceilings.bandwidth_gbps, 1) << " GB/s (measured " << ceilings.measured_at
        << "; `tokamax info --remeasure`)"
        << (options.bandwidth_probe
                ? "; memory ceiling of each case: the bandwidth probed around it"
                : "")
        << "\n\n";
  }

  // The summary line, after the table.
  static void print_summary(std::ostream& out, const BenchOptions& options,
                            const std::vector<BenchResult>& results) {
    int benchmarks = 0, failures = 0, noisy = 0, drifted = 0;
    for (const BenchResult& r : results) {
      if (!r.ran()) continue;
      ++benchmarks;
      failures += !r.stats.ok;
      noisy += r.stats.noisy;
      drifted += r.stats.drift.drifted;
    }
    out << "\n"
        << benchmarks << " benchmarks, " << failures << " failed, " << noisy << " noisy, "
        << drifted << " drifted (medians of per-call wall time; sampled until "
        << estimator_name(options.stop.estimator)
        << " or the median's 95% interval <= " << format_number(100 * options.stop.max_noise, 2)
        << "% after >= " << options.stop.min_samples
        << " samples and >= " << format_number(options.stop.min_time_s, 3) << " s, at most "
        << options.stop.max_samples << " samples or " << format_number(options.stop.timeout_s, 3)
        << " s; cache " << cache_mode_name(options.cache_mode)
        << (options.rounds > 1 ? "; " + std::to_string(options.rounds) +
                                     " interleaved rounds, vs vendor the median of their ratios"
                               : std::string())
        << ")\n";
  }

  // --json: Google Benchmark's records and ours for every case so far (rewritten after each
  // case, so a stopped run keeps them).
  void write_json(nlohmann::json merged, const Ceilings& ceilings,
                  const BenchOptions& options_template, const Device& device,
                  const std::vector<BenchResult>& results, bool complete) const {
    merged["tokamax"] = {{"schema_version", 1},
                         {"kind", "tokamax-bench"},
                         {"complete", complete},
                         {"ceilings", ceilings.to_json()},
                         {"measurement", measurement_json(options_template, device)},
                         {"cases", bench_records(results)}};
    write_text_file(json_path, merged.dump(2) + "\n");
  }

  int run() {
    if (!compare_paths.empty()) return run_compare();
    const Device& device = resolve_device(device_name);
    const BenchOptions options_template = measurement_options(device);
    const std::vector<ArgSpec> specs = select_specs(selection);
    const std::string note = default_selection_note(selection, specs);
    if (!note.empty()) std::cerr << "bench: " << note << "\n";
    const ConfigSources sources(config, selection.impls);
    const Ceilings& ceilings = device.ceilings();

    // Google Benchmark's context: the run's metadata and how it was measured.
    BenchOptions options = options_template;
    const nlohmann::json metadata = run_metadata(device);
    for (const auto& [key, value] : metadata.items()) {
      options.context.emplace_back(key.rfind("tokamax_", 0) == 0 ? key : "tokamax_" + key,
                                   value.is_string() ? value.get<std::string>() : value.dump());
    }
    options.context.emplace_back("tokamax_noise_estimator",
                                 std::string(estimator_name(options.stop.estimator)));
    options.context.emplace_back("tokamax_cache_mode",
                                 std::string(cache_mode_name(options.cache_mode)));

    nlohmann::json merged;  // Google Benchmark's JSON, all specs' runs concatenated
    const std::string scratch =
        (fs::temp_directory_path() / ("tokamax-bench-" + std::to_string(getpid()) + ".json"))
            .string();
    // A first SIGINT / SIGTERM abandons the case being timed and keeps what is done.
    const InterruptScope interrupt;
    // One worker for the whole command (restarted after a crash or timeout); one spec at a
    // time, so only one case's tensors are alive at once.
    const std::unique_ptr<CaseRunner> runner = make_runner(isolation, interrupt.flag());
    std::vector<BenchResult> results;
    // Rows print as each spec finishes (its ratios need all of its implementations).
    print_ceilings(std::cout, device, ceilings, options);
    std::vector<size_t> identity(4, 0);
    for (const ArgSpec& spec : specs) {
      const Op& op = find_op(spec.op);
      identity[0] = std::max(identity[0], spec.op.size());
      identity[1] = std::max(identity[1], spec.name.size());
      identity[3] = std::max(identity[3], case_dtype(op, spec.args).size());
      for (const Implementation* impl : select_impls(op, selection.impls, specs)) {
        if (impl->supported_on(device).ok) identity[2] = std::max(identity[2], impl->name().size());
      }
    }
    Table table = bench_table_header(options.stop.estimator);
    table.stream_to(std::cout, bench_width_hints(options.stop.estimator, identity));
    bool stopped = false;
    ProgressLine progress(stderr_is_terminal());
    int case_index = 0;
    try {
      for (const ArgSpec& spec : specs) {
        std::vector<BenchResult> planned = plan(spec, specs, device, sources.context(), options);
        progress.show(++case_index, static_cast<int>(specs.size()),
                      spec.op + "/" + spec.name + ": timing " + std::to_string(planned.size()) +
                          " implementations");
        time_spec(spec, device, ceilings, options, *runner, planned, merged, scratch);
        progress.clear();
        print_retries(spec.op + "/" + spec.name, runner->take_retries());
        for (const BenchResult& r : planned) {
          if (!r.other_device) table.add_row(bench_row(r, options.stop.estimator));
        }
        results.insert(results.end(), planned.begin(), planned.end());
        if (!json_path.empty()) {
          write_json(merged, ceilings, options_template, device, results, false);
        }
        if (interrupt.interrupted()) throw Interrupted();
      }
    } catch (const Interrupted&) {
      stopped = true;
    }
    progress.clear();
    std::error_code ignored;
    fs::remove(scratch, ignored);

    const std::vector<std::string> elsewhere =
        other_device_notes(other_device_runs(results), device.id());
    if (!elsewhere.empty()) std::cout << "\n";
    for (const std::string& line : elsewhere) std::cout << line << "\n";
    print_summary(std::cout, options, results);
    if (!json_path.empty()) {
      write_json(merged, ceilings, options_template, device, results, !stopped);
    }
    if (stopped) {
      std::cerr << "bench: interrupted; the " << results.size() << " finished results are above"
                << (json_path.empty() ? "" : " and in " + json_path) << "\n";
      return kExitInterrupted;
    }
    const bool failed = std::any_of(results.begin(), results.end(),
                                    [](const BenchResult& r) { return r.ran() && !r.stats.ok; });
    return failed ? kExitFailure : kExitOk;
  }

  // Concatenates one Google Benchmark JSON file into `merged` (context from the first file).
  static void append_json(nlohmann::json& merged, const std::string& path) {
    std::ifstream in(path);
    const nlohmann::json part = nlohmann::json::parse(in);
    if (merged.is_null()) {
      merged = part;
      return;
    }
    for (const nlohmann::json& b : part["benchmarks"]) merged["benchmarks"].push_back(b);
  }
};

}  // namespace

Runner add_bench_command(CLI::App& app) {
  auto command = std::make_shared<BenchCommand>();
  CLI::App* sub = app.add_subcommand(
      "bench", "Time implementations side by side (default: the smoke set of every op)");
  add_selection_options(*sub, command->selection);
  add_device_option(*sub, command->device_name);
  add_config_options(*sub, command->config, /*allow_explicit=*/true);
  sub->add_option("--seed", command->seed, "Seed of the generated inputs")->capture_default_str();
  // Measurement (docs/measurement.md).
  CLI::Option* min_samples = sub->add_option("--min-samples", command->min_samples,
                                             "Samples per case before it may settle")
                                 ->capture_default_str()
                                 ->check(CLI::Range(1, 1000000));
  CLI::Option* max_samples = sub->add_option("--max-samples", command->max_samples,
                                             "Most samples per case (unsettled: noisy)")
                                 ->capture_default_str()
                                 ->check(CLI::Range(1, 1000000));
  sub->add_option("--repetitions", command->repetitions,
                  "Exactly N samples per case (--min-samples N --max-samples N)")
      ->check(CLI::Range(1, 1000000))
      ->excludes(min_samples)
      ->excludes(max_samples);
  sub->add_option("--min-time", command->min_time_s, "Timed seconds per case before it may settle")
      ->capture_default_str();
  sub->add_option("--max-noise", command->max_noise,
                  "Settle when the run noise is at most this: 1% or 0.01")
      ->capture_default_str();
  sub->add_option("--estimator", command->estimator,
                  "Run noise: iqr (IQR/median, robust) or stdev (stdev/mean)")
      ->capture_default_str();
  sub->add_option("--timeout", command->timeout_s,
                  "Wall seconds of sampling per case before giving up (unsettled: noisy)")
      ->capture_default_str();
  sub->add_option("--sample-time", command->sample_time_s,
                  "Seconds one sample (a batch of calls) should last")
      ->capture_default_str();
  sub->add_option("--cache-mode", command->cache_mode,
                  "hot: the same inputs every call; cold: cycle through copies that overflow "
                  "the last-level cache")
      ->capture_default_str();
  sub->add_option("--max-drift", command->max_drift,
                  "Flag a case when the drift probe before and after it differs by more: 5% "
                  "or 0.05")
      ->capture_default_str();
  sub->add_flag("--bandwidth-probe", command->bandwidth_probe,
                "Measure the memory bandwidth (a triad) right before and after each case and use "
                "their mean as its memory ceiling (for a machine whose bandwidth moves)");
  sub->add_option("--rounds", command->rounds,
                  "Interleaved rounds: each spec's implementations are timed in turn, N times "
                  "over (A B A B ...), and `vs vendor` is the median of the per-round ratios "
                  "(for a machine whose speed moves from minute to minute)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  sub->add_option("--warmup", command->warmup, "Untimed calls before timing")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  sub->add_option("--json", command->json_path,
                  "Write Google Benchmark JSON (works with its tools/compare.py); with "
                  "--compare, the comparison report");
  CLI::Option* compare =
      sub->add_option("--compare", command->compare_paths,
                      "Compare two saved --json runs OLD NEW (runs nothing; exit 1 if any case "
                      "is SLOWER)")
          ->expected(2)
          ->type_name("FILE");
  sub->add_option("--threshold", command->threshold,
                  "With --compare: smallest median change that counts, 5% or 0.05")
      ->capture_default_str()
      ->needs(compare);
  add_isolation_options(*sub, command->isolation, "--run-timeout", 300.0,
                        "one implementation's benchmark");
  return [command] { return command->run(); };
}

}  // namespace tokamax::cli
