// WorkerRunner: the case and each request sent to a worker process, restarted after a crash.
#include "cli/toolkit/harness/worker_runner.h"

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "ops/framework/errors.h"
#include "cli/toolkit/harness/worker_protocol.h"

namespace tokamax {

using nlohmann::json;

WorkerRunner::WorkerRunner(WorkerOptions options) : options_(std::move(options)) {}
WorkerRunner::~WorkerRunner() = default;

json WorkerRunner::parse_ok(const WorkerProcess::Reply& reply, const std::string& what) {
  if (reply.status != "ok") {
    throw std::runtime_error("worker " + reply.status + " while " + what + ": " + reply.reason);
  }
  json response;
  try {
    response = json::parse(reply.line);
  } catch (const json::parse_error& e) {
    throw std::runtime_error("worker answered " + what +
                             " with a line that is not JSON: " + reply.line.substr(0, 200));
  }
  if (!response.value("ok", false)) {
    throw std::runtime_error("worker refused " + what + ": " +
                             response.value("reason", std::string("no reason given")));
  }
  return response;
}

void WorkerRunner::lost_worker(const std::string& what, const WorkerProcess::Reply& reply,
                               std::string& first_death) {
  if (first_death.empty()) {
    first_death = reply.reason;
    retries_.push_back("the worker died " + what + " (" + reply.reason +
                       "); retried in a fresh worker");
    return;
  }
  throw CaseLost("the worker died " + what + " twice (" + first_death + "; then, in a fresh " +
                 "worker, " + reply.reason + ")");
}

void WorkerRunner::ensure_ready() {
  std::string first_death;
  for (;;) {
    if (process_ && !process_->alive()) process_.reset();
    if (!process_) {
      process_ = std::make_unique<WorkerProcess>(std::vector<std::string>{options_.exe, "worker"});
      ++starts_;
      case_ready_ = false;
      oracle_ready_ = false;
    }
    if (case_ready_ || !setup_) return;
    const json message = setup_to_json(*setup_);
    const WorkerProcess::Reply reply = exchange(message, 0.0);
    if (reply.status != "ok") {
      lost_worker("setting up the case", reply, first_death);
      continue;
    }
    parse_ok(reply, "setting up the case");  // a refusal is the op's error: not retried
    setup_->dump_dir.clear();  // dumped once; a restarted worker need not write it again
    case_ready_ = true;
    oracle_ready_ = oracle_ready_ || !message.at("dump_dir").get<std::string>().empty();
    return;
  }
}

void WorkerRunner::ensure_oracle() {
  std::string first_death;
  for (;;) {
    ensure_ready();
    if (oracle_ready_) return;
    const WorkerProcess::Reply reply = exchange(json{{"cmd", "oracle"}}, 0.0);
    if (reply.status != "ok") {
      lost_worker("computing the oracle", reply, first_death);
      continue;
    }
    parse_ok(reply, "computing the oracle");
    oracle_ready_ = true;
    return;
  }
}

std::vector<std::string> WorkerRunner::take_retries() {
  std::vector<std::string> taken;
  taken.swap(retries_);
  return taken;
}

WorkerProcess::Reply WorkerRunner::request(const json& message, double timeout_s) {
  ensure_ready();
  return exchange(message, timeout_s);
}

WorkerProcess::Reply WorkerRunner::exchange(const json& message, double timeout_s) {
  WorkerProcess::Reply reply = process_->exchange(message.dump(), timeout_s, options_.interrupt);
  if (reply.status == "ok" && reply.line.find("\"fault\"") != std::string::npos) {
    // The worker's device faulted (DeviceFault); it exits after this line. A crash, like a
    // signal, with the device's error as the reason.
    const json response = json::parse(reply.line, nullptr, false);
    if (!response.is_discarded() && response.contains("fault")) {
      reply = {"crash", "", "device fault: " + response.at("fault").get<std::string>()};
    }
  }
  if (reply.status != "ok") process_.reset();  // the next request starts a fresh worker
  return reply;
}

void WorkerRunner::setup(const CaseSetup& setup) {
  const bool same = setup_ && setup_->same_case(setup);
  setup_ = setup;
  if (!same) case_ready_ = false;
  if (!same) oracle_ready_ = false;
  if (same && !setup.dump_dir.empty()) case_ready_ = false;  // re-send to dump
  ensure_ready();
}

TimeResult WorkerRunner::time(const Implementation& impl, const json& config,
                              const TimingOptions& timing) {
  const json message = {{"cmd", "time"},
                        {"impl", std::string(impl.name())},
                        {"config", config},
                        {"timing", timing_to_json(timing)}};
  const WorkerProcess::Reply reply = request(message, options_.timeout_s);
  if (reply.status != "ok") {
    TimeResult result;
    result.status = reply.status;
    result.reason = reply.reason;
    return result;
  }
  return time_result_from_json(parse_ok(reply, "timing " + std::string(impl.name())));
}

CheckResult WorkerRunner::check(const Implementation& impl, const json& config,
                                const std::string& dump_dir) {
  ensure_oracle();
  const json message = {{"cmd", "check"},
                        {"impl", std::string(impl.name())},
                        {"config", config},
                        {"dump_dir", dump_dir}};
  const WorkerProcess::Reply reply = request(message, options_.timeout_s);
  if (reply.status != "ok") {
    CheckResult result;
    result.status = reply.status;
    result.reason = reply.reason;
    return result;
  }
  return check_result_from_json(parse_ok(reply, "checking " + std::string(impl.name())));
}

namespace {

// The request of `jobs` (their Google Benchmark JSON into options.json_path when set).
json bench_request(const std::vector<const BenchJob*>& jobs, const BenchOptions& options) {
  json list = json::array();
  for (const BenchJob* job : jobs) {
    list.push_back({{"impl", std::string(job->impl->name())},
                    {"config", job->config},
                    {"name", job->name},
                    {"flops", job->flops},
                    {"bytes", job->bytes},
                    {"label", job->label}});
  }
  return {{"cmd", "bench"}, {"jobs", list}, {"options", bench_options_to_json(options)}};
}

}  // namespace

std::vector<BenchOutcome> WorkerRunner::bench(const std::vector<BenchJob>& jobs,
                                              const BenchOptions& options) {
  const double per_job_timeout =
      options_.timeout_s > 0 ? options_.timeout_s * options.rounds : options_.timeout_s;
  // Interleaved rounds need every job in one process: one request for all of them. When that
  // worker dies, each job is benchmarked alone below, so that the crash lands on its own row.
  if (options.rounds > 1 && jobs.size() > 1) {
    std::vector<const BenchJob*> all;
    for (const BenchJob& job : jobs) all.push_back(&job);
    const double timeout = per_job_timeout > 0 ? per_job_timeout * static_cast<double>(jobs.size())
                                               : per_job_timeout;
    const WorkerProcess::Reply reply = request(bench_request(all, options), timeout);
    if (reply.status == "ok") {
      const json response = parse_ok(reply, "benchmarking " + jobs.front().name + " and others");
      std::vector<BenchOutcome> outcomes;
      for (const json& item : response.at("outcomes")) {
        BenchOutcome outcome;
        outcome.status = item.at("status").get<std::string>();
        outcome.stats = bench_stats_from_json(item.at("stats"));
        outcomes.push_back(std::move(outcome));
      }
      return outcomes;
    }
  }
  // One request per implementation, so that a crash costs only its own row.
  std::vector<BenchOutcome> outcomes;
  json merged;  // Google Benchmark JSON of all jobs, as one run_benchmarks call writes it
  for (size_t k = 0; k < jobs.size(); ++k) {
    const BenchJob& job = jobs[k];
    BenchOptions one = options;
    if (!options.json_path.empty()) one.json_path = options.json_path + ".part";
    const WorkerProcess::Reply reply = request(bench_request({&job}, one), per_job_timeout);
    BenchOutcome outcome;
    if (reply.status != "ok") {
      outcome.status = reply.status;
      outcome.stats.name = job.name;
      outcome.stats.ok = false;
      outcome.stats.error = reply.status + ": " + reply.reason;
    } else {
      const json response = parse_ok(reply, "benchmarking " + job.name);
      const json& first = response.at("outcomes").at(0);
      outcome.status = first.at("status").get<std::string>();
      outcome.stats = bench_stats_from_json(first.at("stats"));
    }
    outcomes.push_back(outcome);
    if (options.json_path.empty()) continue;
    std::ifstream part(one.json_path);
    if (outcome.status == "ok" || outcome.status == "error") {
      const json piece = json::parse(part);
      if (merged.is_null()) {
        merged = piece;
      } else {
        for (const json& b : piece["benchmarks"]) merged["benchmarks"].push_back(b);
      }
    } else {
      // What Google Benchmark writes for a skipped benchmark, so readers see the failure.
      if (merged.is_null()) merged = {{"context", json::object()}, {"benchmarks", json::array()}};
      merged["benchmarks"].push_back({{"name", job.name},
                                      {"run_name", job.name},
                                      {"run_type", "iteration"},
                                      {"error_occurred", true},
                                      {"error_message", outcome.stats.error},
                                      {"label", job.label}});
    }
    std::error_code ignored;
    std::filesystem::remove(one.json_path, ignored);
  }
  if (!options.json_path.empty()) {
    std::ofstream out(options.json_path);
    out << merged.dump(2) << "\n";
    if (!out) throw InvalidArgument("cannot write " + options.json_path, "json_path");
  }
  return outcomes;
}

}  // namespace tokamax
