// The worker protocol: JSON codecs of the runner's requests and results, and the worker's loop.
#include "cli/toolkit/harness/worker_protocol.h"

#include <cmath>

#include "backends/device.h"
#include "ops/framework/errors.h"

namespace tokamax {
namespace {

using nlohmann::json;

std::string exception_message(const std::exception& e) {
  const std::string what = e.what();
  return what.empty() ? "exception with an empty message" : what;
}

// JSON has no inf or nan: they travel as strings.
json number(double value) {
  if (std::isfinite(value)) return value;
  if (std::isnan(value)) return "nan";
  return value > 0 ? "inf" : "-inf";
}

double number_from(const json& value) {
  if (value.is_number()) return value.get<double>();
  if (value.is_string()) {
    const std::string text = value.get<std::string>();
    if (text == "inf") return INFINITY;
    if (text == "-inf") return -INFINITY;
    if (text == "nan") return NAN;
  }
  throw InvalidArgument("worker protocol: expected a number, got " + value.dump());
}

}  // namespace

// --- Serialization.
// Tripwires: a field added to one of these structs must also travel to the worker, or
// `--isolation worker` (the default) would silently drop it. Add it to the functions below (and
// to the round-trip test in tests/cli/toolkit/harness/worker_protocol_test.cc), then update the
// size here.
static_assert(sizeof(TimingOptions) == 56, "new TimingOptions field: update timing_to_json");
static_assert(sizeof(BenchOptions) == 152, "new BenchOptions field: update bench_options_to_json");
static_assert(sizeof(BenchStats) == 272, "new BenchStats field: update bench_stats_to_json");
static_assert(sizeof(Comparison) == 88, "new Comparison field: update comparison_to_json");

json stop_rule_to_json(const StopRule& r) {
  return {{"min_samples", r.min_samples},
          {"max_samples", r.max_samples},
          {"min_time_s", number(r.min_time_s)},
          {"max_noise", number(r.max_noise)},
          {"timeout_s", number(r.timeout_s)},
          {"estimator", std::string(estimator_name(r.estimator))}};
}

StopRule stop_rule_from_json(const json& value) {
  StopRule r;
  r.min_samples = value.at("min_samples").get<int>();
  r.max_samples = value.at("max_samples").get<int>();
  r.min_time_s = number_from(value.at("min_time_s"));
  r.max_noise = number_from(value.at("max_noise"));
  r.timeout_s = number_from(value.at("timeout_s"));
  r.estimator = parse_estimator(value.at("estimator").get<std::string>());
  return r;
}

json timing_to_json(const TimingOptions& t) {
  return {
      {"warmup_runs", t.warmup_runs},     {"min_samples", t.min_samples},
      {"max_samples", t.max_samples},     {"min_time_s", t.min_time_s},
      {"sample_time_s", t.sample_time_s}, {"max_noise", number(t.max_noise)},
      {"timeout_s", number(t.timeout_s)}, {"estimator", std::string(estimator_name(t.estimator))}};
}

TimingOptions timing_from_json(const json& value) {
  TimingOptions t;
  t.warmup_runs = value.at("warmup_runs").get<int>();
  t.min_samples = value.at("min_samples").get<int>();
  t.max_samples = value.at("max_samples").get<int>();
  t.min_time_s = value.at("min_time_s").get<double>();
  t.sample_time_s = value.at("sample_time_s").get<double>();
  t.max_noise = number_from(value.at("max_noise"));
  t.timeout_s = number_from(value.at("timeout_s"));
  t.estimator = parse_estimator(value.at("estimator").get<std::string>());
  return t;
}

json bench_options_to_json(const BenchOptions& o) {
  json context = json::array();
  for (const auto& [key, value] : o.context) context.push_back({key, value});
  return {{"warmup_runs", o.warmup_runs},
          {"stop", stop_rule_to_json(o.stop)},
          {"sample_time_s", number(o.sample_time_s)},
          {"cache_mode", std::string(cache_mode_name(o.cache_mode))},
          {"llc_bytes", o.llc_bytes},
          {"drift_probe", o.drift_probe},
          {"bandwidth_probe", o.bandwidth_probe},
          {"max_drift", number(o.max_drift)},
          {"rounds", o.rounds},
          {"json_path", o.json_path},
          {"context", context}};
}

BenchOptions bench_options_from_json(const json& value) {
  BenchOptions o;
  o.warmup_runs = value.at("warmup_runs").get<int>();
  o.stop = stop_rule_from_json(value.at("stop"));
  o.sample_time_s = number_from(value.at("sample_time_s"));
  o.cache_mode = parse_cache_mode(value.at("cache_mode").get<std::string>());
  o.llc_bytes = value.at("llc_bytes").get<int64_t>();
  o.drift_probe = value.at("drift_probe").get<bool>();
  o.bandwidth_probe = value.at("bandwidth_probe").get<bool>();
  o.max_drift = number_from(value.at("max_drift"));
  o.rounds = value.at("rounds").get<int>();
  o.json_path = value.at("json_path").get<std::string>();
  for (const json& pair : value.at("context")) {
    o.context.emplace_back(pair.at(0).get<std::string>(), pair.at(1).get<std::string>());
  }
  return o;
}

json comparison_to_json(const Comparison& c) {
  return {{"max_abs_error", number(c.max_abs_error)},
          {"max_rel_error", number(c.max_rel_error)},
          {"max_abs_oracle", number(c.max_abs_oracle)},
          {"bound", number(c.bound)},
          {"worst_ratio", number(c.worst_ratio)},
          {"worst_index", c.worst_index},
          {"violations", c.violations},
          {"nonfinite", c.nonfinite},
          {"sampled", c.sampled},
          {"total", c.total},
          {"degenerate_oracle", c.degenerate_oracle}};
}

Comparison comparison_from_json(const json& value) {
  Comparison c;
  c.max_abs_error = number_from(value.at("max_abs_error"));
  c.max_rel_error = number_from(value.at("max_rel_error"));
  c.max_abs_oracle = number_from(value.at("max_abs_oracle"));
  c.bound = number_from(value.at("bound"));
  c.worst_ratio = number_from(value.at("worst_ratio"));
  c.worst_index = value.at("worst_index").get<int64_t>();
  c.violations = value.at("violations").get<int64_t>();
  c.nonfinite = value.at("nonfinite").get<int64_t>();
  c.sampled = value.at("sampled").get<int64_t>();
  c.total = value.at("total").get<int64_t>();
  c.degenerate_oracle = value.at("degenerate_oracle").get<bool>();
  return c;
}

json bench_stats_to_json(const BenchStats& s) {
  json samples = json::array(), round_medians = json::array();
  for (double v : s.samples_s) samples.push_back(number(v));
  for (double v : s.round_medians_s) round_medians.push_back(number(v));
  return {{"name", s.name},
          {"ok", s.ok},
          {"error", s.error},
          {"median_s", number(s.median_s)},
          {"min_s", number(s.min_s)},
          {"max_s", number(s.max_s)},
          {"mean_s", number(s.mean_s)},
          {"cv", number(s.cv)},
          {"iqr_s", number(s.iqr_s)},
          {"samples_s", samples},
          {"round_medians_s", round_medians},
          {"iterations", s.iterations},
          {"gflops", number(s.gflops)},
          {"gbps", number(s.gbps)},
          {"noise", number(s.noise)},
          {"noisy", s.noisy},
          {"stop_reason", static_cast<int>(s.stop_reason)},
          {"elapsed_s", number(s.elapsed_s)},
          {"cache_copies", s.cache_copies},
          {"drift",
           {{"before_s", number(s.drift.before_s)},
            {"after_s", number(s.drift.after_s)},
            {"change", number(s.drift.change)},
            {"drifted", s.drift.drifted}}},
          {"bandwidth",
           {{"before_gbps", number(s.bandwidth.before_gbps)},
            {"after_gbps", number(s.bandwidth.after_gbps)}}}};
}

BenchStats bench_stats_from_json(const json& value) {
  BenchStats s;
  s.name = value.at("name").get<std::string>();
  s.ok = value.at("ok").get<bool>();
  s.error = value.at("error").get<std::string>();
  s.median_s = number_from(value.at("median_s"));
  s.min_s = number_from(value.at("min_s"));
  s.max_s = number_from(value.at("max_s"));
  s.mean_s = number_from(value.at("mean_s"));
  s.cv = number_from(value.at("cv"));
  s.iqr_s = number_from(value.at("iqr_s"));
  for (const json& v : value.at("samples_s")) s.samples_s.push_back(number_from(v));
  for (const json& v : value.at("round_medians_s")) s.round_medians_s.push_back(number_from(v));
  s.iterations = value.at("iterations").get<int64_t>();
  s.gflops = number_from(value.at("gflops"));
  s.gbps = number_from(value.at("gbps"));
  s.noise = number_from(value.at("noise"));
  s.noisy = value.at("noisy").get<bool>();
  s.stop_reason = static_cast<StopReason>(value.at("stop_reason").get<int>());
  s.elapsed_s = number_from(value.at("elapsed_s"));
  s.cache_copies = value.at("cache_copies").get<int>();
  const json& drift = value.at("drift");
  s.drift.before_s = number_from(drift.at("before_s"));
  s.drift.after_s = number_from(drift.at("after_s"));
  s.drift.change = number_from(drift.at("change"));
  s.drift.drifted = drift.at("drifted").get<bool>();
  const json& bandwidth = value.at("bandwidth");
  s.bandwidth.before_gbps = number_from(bandwidth.at("before_gbps"));
  s.bandwidth.after_gbps = number_from(bandwidth.at("after_gbps"));
  return s;
}

json time_result_to_json(const TimeResult& r) {
  json samples = json::array();
  for (double v : r.samples) samples.push_back(number(v));
  return {{"status", r.status}, {"reason", r.reason}, {"samples", samples}};
}

TimeResult time_result_from_json(const json& value) {
  TimeResult r;
  r.status = value.at("status").get<std::string>();
  r.reason = value.at("reason").get<std::string>();
  for (const json& v : value.at("samples")) r.samples.push_back(number_from(v));
  return r;
}

json check_result_to_json(const CheckResult& r) {
  json comparisons = json::object();
  for (const auto& [name, c] : r.comparisons) comparisons[name] = comparison_to_json(c);
  return {{"status", r.status}, {"reason", r.reason}, {"comparisons", comparisons}};
}

CheckResult check_result_from_json(const json& value) {
  CheckResult r;
  r.status = value.at("status").get<std::string>();
  r.reason = value.at("reason").get<std::string>();
  for (const auto& [name, c] : value.at("comparisons").items()) {
    r.comparisons[name] = comparison_from_json(c);
  }
  return r;
}

// --- The worker side.

json setup_to_json(const CaseSetup& setup) {
  return {{"cmd", "setup"},
          {"op", setup.op},
          {"args", setup.args.to_json()},
          {"device", setup.device},
          {"seed", setup.seed},
          {"oracle_budget", setup.oracle_budget},
          {"dump_dir", setup.dump_dir}};
}

CaseSetup setup_from_json(const json& request) {
  CaseSetup setup;
  setup.op = request.at("op").get<std::string>();
  setup.args = BoundArgs::from_json(request.at("args"));
  setup.device = request.value("device", "");
  setup.seed = request.at("seed").get<uint64_t>();
  setup.oracle_budget = request.at("oracle_budget").get<double>();
  setup.dump_dir = request.value("dump_dir", "");
  return setup;
}

json handle_worker_request(LocalRunner& runner, const json& request) {
  auto impl_of = [&](const json& r) -> const Implementation& {
    return runner.implementation(r.at("impl").get<std::string>());
  };
  try {
    const std::string cmd = request.at("cmd").get<std::string>();
    json response;
    if (cmd == "setup") {
      runner.setup(setup_from_json(request));
      response = json::object();
    } else if (cmd == "oracle") {
      runner.prepare_oracle();
      response = json::object();
    } else if (cmd == "time") {
      response = time_result_to_json(runner.time(impl_of(request), request.at("config"),
                                                 timing_from_json(request.at("timing"))));
    } else if (cmd == "check") {
      response = check_result_to_json(
          runner.check(impl_of(request), request.at("config"), request.value("dump_dir", "")));
    } else if (cmd == "bench") {
      std::vector<BenchJob> jobs;
      for (const json& j : request.at("jobs")) {
        BenchJob job;
        job.impl = &impl_of(j);
        job.config = j.at("config");
        job.name = j.at("name").get<std::string>();
        job.flops = j.at("flops").get<double>();
        job.bytes = j.at("bytes").get<double>();
        job.label = j.at("label").get<std::string>();
        jobs.push_back(std::move(job));
      }
      json outcomes = json::array();
      for (const BenchOutcome& outcome :
           runner.bench(jobs, bench_options_from_json(request.at("options")))) {
        outcomes.push_back(
            {{"status", outcome.status}, {"stats", bench_stats_to_json(outcome.stats)}});
      }
      response = {{"outcomes", outcomes}};
    } else {
      throw InvalidArgument("unknown command '" + cmd + "'");
    }
    response["ok"] = true;
    return response;
  } catch (const Interrupted&) {
    throw;
  } catch (const DeviceFault& e) {
    return {{"ok", false}, {"fault", exception_message(e)}};
  } catch (const std::exception& e) {
    return {{"ok", false}, {"reason", exception_message(e)}};
  }
}

int serve_worker(std::istream& in, const std::function<void(const std::string&)>& write_line) {
  LocalRunner runner;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    json response;
    try {
      response = handle_worker_request(runner, json::parse(line));
    } catch (const json::parse_error& e) {
      response = {{"ok", false}, {"reason", std::string("request is not JSON: ") + e.what()}};
    }
    write_line(response.dump());
    // The device is unusable in this process: exit, so that the parent starts a fresh worker.
    if (response.contains("fault")) return kWorkerFaultExit;
  }
  return 0;
}

}  // namespace tokamax
