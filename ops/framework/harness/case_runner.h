// Runs implementations on one case (op, args, seed): in this process, or in a worker process that
// survives nothing of what a candidate does to it (ops/framework/harness/worker_runner.h).
//
// A CaseRunner holds one case at a time: setup() generates its inputs (and, on demand, the float64
// oracle), then time(), check() and bench() run implementations on them. The commands (tune,
// verify, bench) only talk to this interface, so the same code runs in-process
// (`--isolation none`) or isolated (`--isolation worker`, the default).
//
// Failure categories of one run, the same words in every command's output:
//   ok        ran (check: compare `comparisons` to decide; bench: stats are valid)
//   error     the implementation threw (an exception message in `reason`)
//   crash     the worker died: a signal (SIGSEGV, SIGABRT, ...) or an unexpected exit
//   timeout   no answer within the timeout; the worker was killed
//   unsupported (check only) the implementation threw NotImplemented while running
// The callers add `invalid` (check_config rejected the config) and `numerics` (outputs out of
// the error bound).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <istream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ops/framework/measurement/bench_sampler.h"
#include "ops/framework/bound_args.h"
#include "ops/framework/numerics.h"
#include "ops/framework/op.h"
#include "ops/framework/measurement/timing.h"

namespace tokamax {

// The case a runner holds.
struct CaseSetup {
  std::string op;  // registry name (find_op)
  BoundArgs args;
  uint64_t seed = 0;
  double oracle_budget = 5e8;  // float64 multiply-adds before the oracle samples outputs
  // When set: inputs and oracle are written there as .npy (verify --dump-dir).
  std::string dump_dir;

  bool same_case(const CaseSetup& other) const;  // op, args, seed, budget (not dump_dir)
};

// time(): per-call samples in seconds, unchanged from where they were measured.
struct TimeResult {
  std::string status = "ok";  // ok, error, crash, timeout
  std::string reason;
  std::vector<double> samples;
};

// check(): one run into zeroed outputs, compared to the oracle output by output.
struct CheckResult {
  std::string status = "ok";  // ok, error, crash, timeout, unsupported
  std::string reason;
  std::map<std::string, Comparison> comparisons;  // output name -> comparison (status ok)
};

// bench(): one implementation timed with Google Benchmark (ops/framework/measurement/bench_sampler.h).
struct BenchJob {
  const Implementation* impl = nullptr;
  nlohmann::json config;
  std::string name;  // "<op>/<spec>/<impl>", unique
  double flops = 0, bytes = 0;
  std::string label;
};
struct BenchOutcome {
  std::string status = "ok";  // ok, error, crash, timeout
  BenchStats stats;           // stats.ok == (status == "ok"); stats.error says why not
};

class CaseRunner {
 public:
  virtual ~CaseRunner() = default;
  // Makes `setup` the current case (nothing to do when it already is, except dumping). Errors of
  // the op itself (input generation) throw.
  virtual void setup(const CaseSetup& setup) = 0;
  // Times impl with config on the current case: time_calls, or with warmup_runs == 0 the lean
  // variant of tune's halving (the first call calibrates the batch and counts as a sample when it
  // alone lasts a sample).
  virtual TimeResult time(const Implementation& impl, const nlohmann::json& config,
                          const TimingOptions& timing) = 0;
  // Runs once into zeroed outputs and compares every output with the oracle; with `dump_dir`
  // the outputs are written there as .npy.
  virtual CheckResult check(const Implementation& impl, const nlohmann::json& config,
                            const std::string& dump_dir = "") = 0;
  // Times each job (Google Benchmark); `options.json_path` receives the Google Benchmark JSON of
  // all of them, as run_benchmarks writes it.
  virtual std::vector<BenchOutcome> bench(const std::vector<BenchJob>& jobs,
                                          const BenchOptions& options) = 0;
};

// Runs everything in this process: a crash or hang of an implementation is the process's.
// `interrupt` (may be null) is checked between timed calls: Interrupted is thrown when set.
class LocalRunner final : public CaseRunner {
 public:
  explicit LocalRunner(const std::atomic<bool>* interrupt = nullptr);
  ~LocalRunner() override;
  void setup(const CaseSetup& setup) override;
  TimeResult time(const Implementation& impl, const nlohmann::json& config,
                  const TimingOptions& timing) override;
  CheckResult check(const Implementation& impl, const nlohmann::json& config,
                    const std::string& dump_dir = "") override;
  std::vector<BenchOutcome> bench(const std::vector<BenchJob>& jobs,
                                  const BenchOptions& options) override;
  // Computes the current case's oracle now (check() would compute it on first use).
  void prepare_oracle();
  // The implementation of the current case's op with this name (InvalidArgument when none).
  const Implementation& implementation(const std::string& name) const;

 private:
  struct State;
  const State& state() const;
  const std::atomic<bool>* interrupt_;
  std::unique_ptr<State> state_;
};

// --- The worker protocol: one JSON object per line each way, request then response.
// Requests: {"cmd": "setup", "op", "args", "seed", "oracle_budget", "dump_dir"}
//           {"cmd": "oracle"}                  (computes the oracle; so that check's timeout
//                                               covers only the implementation)
//           {"cmd": "time", "impl", "config", "timing": {...}}
//           {"cmd": "check", "impl", "config", "dump_dir"}
//           {"cmd": "bench", "jobs": [{"impl", "config", "name", "flops", "bytes", "label"}],
//            "options": {...}}
// Responses: {"ok": true, ...the result's fields} or {"ok": false, "reason"} when the request
// itself was bad (unknown command, op or implementation, no setup yet, a throwing setup). An
// implementation's own failure is a result with its status, not a bad request.
nlohmann::json timing_to_json(const TimingOptions& timing);
TimingOptions timing_from_json(const nlohmann::json& value);
nlohmann::json bench_options_to_json(const BenchOptions& options);
BenchOptions bench_options_from_json(const nlohmann::json& value);
nlohmann::json comparison_to_json(const Comparison& comparison);
Comparison comparison_from_json(const nlohmann::json& value);
nlohmann::json bench_stats_to_json(const BenchStats& stats);
BenchStats bench_stats_from_json(const nlohmann::json& value);
nlohmann::json time_result_to_json(const TimeResult& result);
TimeResult time_result_from_json(const nlohmann::json& value);
nlohmann::json check_result_to_json(const CheckResult& result);
CheckResult check_result_from_json(const nlohmann::json& value);

// One request through a LocalRunner: the response object. Never throws (except Interrupted).
nlohmann::json handle_worker_request(LocalRunner& runner, const nlohmann::json& request);

// The worker's loop: reads request lines from `in` until EOF, writes one response line each.
// Returns the exit status (0 at EOF).
int serve_worker(std::istream& in, const std::function<void(const std::string&)>& write_line);

}  // namespace tokamax
