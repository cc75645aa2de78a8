// `tokamax bench`: time implementations side by side (Google Benchmark), GFLOP/s and GB/s.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "backends/cpu/cpu_info.h"
#include "backends/cpu/host_memory.h"
#include "backends/cpu/roofline.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/table.h"
#include "cli/report/bench_compare.h"
#include "ops/framework/measurement/bench_sampler.h"
#include "ops/framework/errors.h"
#include "ops/framework/measurement/measurement.h"
#include "ops/framework/metadata.h"
#include "ops/framework/registry.h"
#include "ops/framework/harness/verifier.h"

namespace tokamax::cli {
namespace {

namespace fs = std::filesystem;

// What the table and the JSON say about one benchmark besides its timings.
struct CaseInfo {
  std::string op, spec, impl, dtype, config_source;
  nlohmann::json config, args;
  double flops = 0, bytes = 0;
  DType compute = DType::kF32;  // the dtype the roofline's compute ceiling is taken at
  nlohmann::json backend = nlohmann::json::object();  // Implementation::describe()
  bool vendor = false;
  int64_t footprint_bytes = 0;  // one set of inputs + outputs (what cold mode copies)
};

// "1.23x" the best vendor implementation of the same spec in this run, "-" when none ran.
double best_vendor_gflops(const std::vector<BenchStats>& stats,
                          const std::vector<CaseInfo>& infos) {
  double best = 0.0;
  for (size_t i = 0; i < stats.size(); ++i) {
    if (infos[i].vendor && stats[i].ok) best = std::max(best, stats[i].gflops);
  }
  return best;
}

// `--compare`: a markdown table for a CI comment, then the verdict counts and one-sided cases.
void print_comparison(std::ostream& out, const CompareReport& report, const std::string& old_path,
                      const std::string& new_path) {
  const CompareOptions& o = report.options;
  out << "Comparing `" << old_path << "` (old) with `" << new_path << "` (new): threshold "
      << format_number(100 * o.threshold, 1) << "%, noise = larger IQR/median of the two runs, "
      << "Mann-Whitney U test at p < " << o.alpha
      << " where both runs have >= " << o.min_test_samples << " samples.\n\n";
  out << "| case | old median | new median | change | noise | p-value | verdict | reason |\n"
      << "|---|---:|---:|---:|---:|---:|---|---|\n";
  for (const CaseComparison& c : report.cases) {
    const std::string p = !c.test             ? "-"
                          : c.test->p < 0.001 ? "<0.001"
                                              : format_number(c.test->p, 3);
    out << "| " << c.name << " | " << format_duration(c.old_median_s) << " | "
        << format_duration(c.new_median_s) << " | " << (c.change >= 0 ? "+" : "")
        << format_number(100 * c.change, 1) << "% | " << format_number(100 * c.noise, 1) << "% | "
        << p << " | " << verdict_name(c.verdict) << " | " << c.reason << " |\n";
  }
  out << "\n"
      << report.count(Verdict::kSlower) << " slower, " << report.count(Verdict::kFaster)
      << " faster, " << report.count(Verdict::kSame) << " same";
  for (const auto& [label, names] : {std::pair{"only in old", &report.only_in_old},
                                     std::pair{"only in new", &report.only_in_new}}) {
    out << "; " << names->size() << " " << label;
    for (size_t i = 0; i < names->size(); ++i) out << (i ? ", `" : ": `") << (*names)[i] << "`";
  }
  out << "\n";
}

struct BenchCommand {
  Selection selection;
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
  BenchOptions measurement_options() const {
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
    options.llc_bytes = cpu::last_level_cache().bytes;
    options.max_drift = parse_fraction(max_drift, "--max-drift");
    options.bandwidth_probe = bandwidth_probe;
    return options;
  }

  // tokamax.measurement in the JSON: how the cases were measured.
  static nlohmann::json measurement_json(const BenchOptions& o) {
    const cpu::LastLevelCache& llc = cpu::last_level_cache();
    return {{"noise_estimator", estimator_name(o.stop.estimator)},
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
            {"bandwidth_probe_bytes", o.bandwidth_probe ? bandwidth_probe_bytes(llc.bytes) : 0},
            {"huge_pages", cpu::huge_pages_mode()}};
  }

  // "noisy", "drift +6.1%", both, or "-".
  static std::string flags(const BenchStats& s) {
    std::string out;
    if (s.noisy) out = "noisy";
    if (s.drift.drifted) {
      out += (out.empty() ? "" : ", ") + std::string("drift ") + (s.drift.change >= 0 ? "+" : "") +
             format_number(100 * s.drift.change, 1) + "%";
    }
    return out.empty() ? "-" : out;
  }

  static nlohmann::json finite_or_null(double value) {
    return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json();
  }

  int run() {
    if (!compare_paths.empty()) return run_compare();
    const BenchOptions options_template = measurement_options();
    // With no case filter, bench runs the quick `smoke` set of every op.
    Selection effective = selection;
    if (!effective.has_case_filter()) effective.tags = {"smoke"};
    const std::vector<ArgSpec> specs = select_specs(effective);
    const ConfigSources sources(config, selection.impls);
    const DeviceInfo& device = cpu::host_device();
    const cpu::Ceilings& ceilings = cpu::host_ceilings();

    BenchOptions options = options_template;
    const nlohmann::json metadata = run_metadata();
    for (const auto& [key, value] : metadata.items()) {
      options.context.emplace_back(key.rfind("tokamax_", 0) == 0 ? key : "tokamax_" + key,
                                   value.is_string() ? value.get<std::string>() : value.dump());
    }

    options.context.emplace_back("tokamax_noise_estimator",
                                 std::string(estimator_name(options.stop.estimator)));
    options.context.emplace_back("tokamax_cache_mode",
                                 std::string(cache_mode_name(options.cache_mode)));
    const std::string noise_header =
        "noise (" + std::string(estimator_name(options.stop.estimator)) + ")";
    Table table({"op", "spec", "impl", "dtype", "median", "min", "max", "samples", noise_header,
                 "GFLOP/s", "GB/s", "roofline", "vs vendor", "flags", "source", "config"});
    table.set_right_aligned({4, 5, 6, 7, 8, 9, 10, 11, 12});
    nlohmann::json merged;  // Google Benchmark's JSON, all specs' runs concatenated
    nlohmann::json case_records = nlohmann::json::array();
    int failures = 0, noisy = 0, drifted = 0;
    const std::string scratch =
        (fs::temp_directory_path() / ("tokamax-bench-" + std::to_string(getpid()) + ".json"))
            .string();

    // One worker for the whole command (restarted after a crash or timeout); one spec at a
    // time, so only one case's tensors are alive at once.
    const std::unique_ptr<CaseRunner> runner = make_runner(isolation, nullptr);
    for (const ArgSpec& spec : specs) {
      const Op& op = find_op(spec.op);
      std::vector<BenchJob> cases;
      std::vector<CaseInfo> infos;
      // Rows in dispatch order: unsupported ones now, timed ones (case_row) after the run.
      std::vector<std::vector<std::string>> rows;
      std::vector<size_t> case_row;
      for (const Implementation* impl : select_impls(op, selection.impls, specs)) {
        CaseInfo info{spec.op,
                      spec.name,
                      std::string(impl->name()),
                      case_dtype(op, spec.args),
                      "",
                      nlohmann::json(),
                      spec.args.args,
                      op.flops(spec.args),
                      op.bytes(spec.args)};
        info.compute = op.compute_dtype(spec.args);
        info.vendor = impl->is_vendor();
        for (const auto& decls : {op.inputs(spec.args), op.outputs(spec.args)}) {
          for (const TensorDecl& decl : decls)
            info.footprint_bytes += static_cast<int64_t>(decl.spec.size_bytes());
        }
        info.backend = impl->describe();
        std::string unsupported;
        const Support support = impl->supported_on(device);
        if (!support.ok) unsupported = support.reason;
        ResolvedConfig resolved;
        if (unsupported.empty()) {
          try {
            impl->check_args(spec.args);
            resolved = resolve_config(*impl, spec.args, device, sources.context());
          } catch (const NotImplemented& e) {
            unsupported = e.what();
          }
        }
        if (!unsupported.empty()) {
          rows.push_back({info.op, info.spec, info.impl, info.dtype, "-", "-", "-", "-", "-", "-",
                          "-", "-", "-", "-", "-", "unsupported: " + unsupported});
          continue;
        }
        info.config = resolved.config;
        info.config_source = std::string(config_source_name(resolved.source));
        BenchJob job;
        job.impl = impl;
        job.config = resolved.config;
        job.name = spec.op + "/" + spec.name + "/" + info.impl;
        job.flops = info.flops;
        job.bytes = info.bytes;
        job.label = nlohmann::json{{"config", info.config}, {"source", info.config_source}}.dump();
        cases.push_back(job);
        infos.push_back(info);
        case_row.push_back(rows.size());
        rows.emplace_back();
      }
      if (cases.empty()) {
        for (auto& row : rows) table.add_row(std::move(row));
        continue;
      }
      options.json_path = json_path.empty() ? "" : scratch;
      CaseSetup setup;
      setup.op = spec.op;
      setup.args = spec.args;
      setup.seed = seed;
      runner->setup(setup);
      const std::vector<BenchOutcome> outcomes = runner->bench(cases, options);
      std::vector<BenchStats> stats;
      for (const BenchOutcome& outcome : outcomes) stats.push_back(outcome.stats);
      if (!json_path.empty()) append_json(merged, scratch);
      const double vendor_gflops = best_vendor_gflops(stats, infos);
      for (size_t i = 0; i < stats.size(); ++i) {
        const BenchStats& s = stats[i];
        const CaseInfo& info = infos[i];
        if (!s.ok) ++failures;
        if (s.noisy) ++noisy;
        if (s.drift.drifted) ++drifted;
        // min(peak at the compute dtype, bandwidth x intensity); with --bandwidth-probe the
        // bandwidth is the one measured around this case.
        cpu::Ceilings case_ceilings = ceilings;
        if (s.bandwidth.probed()) case_ceilings.bandwidth_gbps = s.bandwidth.mean_gbps();
        const double roofline =
            cpu::roofline_gflops(case_ceilings, info.flops, info.bytes, info.compute);
        const double fraction = s.ok && roofline > 0 ? s.gflops / roofline : NAN;
        const double vs_vendor = s.ok && vendor_gflops > 0 ? s.gflops / vendor_gflops : NAN;
        rows[case_row[i]] = std::vector<std::string>(
            {info.op, info.spec, info.impl, info.dtype, s.ok ? format_duration(s.median_s) : "-",
             s.ok ? format_duration(s.min_s) : "-", s.ok ? format_duration(s.max_s) : "-",
             s.ok ? std::to_string(s.samples_s.size()) : "-",
             s.ok && std::isfinite(s.noise) ? format_number(100.0 * s.noise, 1) + "%" : "-",
             s.ok ? format_number(s.gflops, 2) : "-", s.ok ? format_number(s.gbps, 2) : "-",
             std::isnan(fraction) ? "-" : format_number(100.0 * fraction, 1) + "%",
             std::isnan(vs_vendor) ? "-" : format_number(vs_vendor, 2) + "x", s.ok ? flags(s) : "-",
             info.config_source, s.ok ? info.config.dump() : "failed: " + s.error});
        case_records.push_back(
            {{"name", s.name},
             {"op", info.op},
             {"spec", info.spec},
             {"impl", info.impl},
             {"dtype", info.dtype},
             {"args", info.args},
             {"config", info.config},
             {"config_source", info.config_source},
             {"backend", info.backend},
             {"flops", info.flops},
             {"bytes", info.bytes},
             {"ok", s.ok},
             {"failure", outcomes[i].status == "ok" ? "" : outcomes[i].status},
             {"error", s.error},
             {"median_s", s.median_s},
             {"min_s", s.min_s},
             {"max_s", s.max_s},
             {"cv", s.cv},
             {"iqr_s", s.iqr_s},
             {"samples_s", s.samples_s},
             {"num_samples", s.samples_s.size()},
             {"iterations_per_sample", s.iterations},
             {"noise", finite_or_null(s.noise)},
             {"noise_estimator", estimator_name(options.stop.estimator)},
             {"noisy", s.noisy},
             {"stop_reason", stop_reason_name(s.stop_reason)},
             {"sampling_s", s.elapsed_s},
             {"cache_mode", cache_mode_name(options.cache_mode)},
             {"cache_copies", s.cache_copies},
             {"footprint_bytes", info.footprint_bytes},
             {"drift",
              {{"probe_before_s", s.drift.before_s},
               {"probe_after_s", s.drift.after_s},
               {"change", s.drift.change},
               {"drifted", s.drift.drifted}}},
             {"drifted", s.drift.drifted},
             {"gflops", s.gflops},
             {"gbps", s.gbps},
             {"roofline_gflops", roofline},
             {"roofline_bandwidth_gbps", case_ceilings.bandwidth_gbps},
             {"bandwidth_probe", s.bandwidth.probed()
                                     ? nlohmann::json{{"before_gbps", s.bandwidth.before_gbps},
                                                      {"after_gbps", s.bandwidth.after_gbps}}
                                     : nlohmann::json()},
             {"roofline_fraction",
              std::isnan(fraction) ? nlohmann::json() : nlohmann::json(fraction)},
             {"vendor", info.vendor},
             {"vs_best_vendor",
              std::isnan(vs_vendor) ? nlohmann::json() : nlohmann::json(vs_vendor)},
             {"best_vendor_gflops", vendor_gflops}});
      }
      for (auto& row : rows) table.add_row(std::move(row));
    }
    std::error_code ignored;
    fs::remove(scratch, ignored);
    std::cout << "device " << device.id << ", roofline from measured ceilings: f32 FMA "
              << format_number(ceilings.f32_fma_gflops, 1) << " GFLOP/s, bf16 "
              << format_number(ceilings.peak_gflops(DType::kBF16), 1) << " GFLOP/s, memory "
              << format_number(ceilings.bandwidth_gbps, 1) << " GB/s (measured "
              << ceilings.measured_at << "; `tokamax info --remeasure`)"
              << (options.bandwidth_probe
                      ? "; memory ceiling of each case: the bandwidth probed around it"
                      : "")
              << "\n\n";
    table.print(std::cout);
    std::cout << "\n"
              << case_records.size() << " benchmarks, " << failures << " failed, " << noisy
              << " noisy, " << drifted << " drifted (medians of per-call wall time; sampled until "
              << estimator_name(options.stop.estimator)
              << " <= " << format_number(100 * options.stop.max_noise, 2)
              << "% after >= " << options.stop.min_samples
              << " samples and >= " << format_number(options.stop.min_time_s, 3) << " s, at most "
              << options.stop.max_samples << " samples or "
              << format_number(options.stop.timeout_s, 3) << " s; cache "
              << cache_mode_name(options.cache_mode) << ")\n";
    if (!json_path.empty()) {
      merged["tokamax"] = {{"schema_version", 1},
                           {"kind", "tokamax-bench"},
                           {"ceilings", ceilings.to_json()},
                           {"measurement", measurement_json(options_template)},
                           {"cases", case_records}};
      write_text_file(json_path, merged.dump(2) + "\n");
    }
    return failures > 0 ? kExitFailure : kExitOk;
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
