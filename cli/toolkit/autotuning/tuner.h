// tune: search an implementation's config space for one case, verify the winner, make a cache
// entry.
#pragma once

#include <atomic>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ops/framework/autotune_cache.h"
#include "cli/toolkit/autotuning/search_strategy.h"
#include "cli/toolkit/harness/case_runner.h"
#include "cli/toolkit/measurement/timing.h"
#include "ops/framework/op.h"

namespace tokamax {

struct CandidateResult {
  nlohmann::json config;
  // "ok", "invalid", "error", "crash", "timeout", "numerics", "pruned", "skipped"
  std::string status;
  std::string reason;
  int round = -1;       // halving: the last round the candidate was timed in
  double time_s = 0.0;  // median, for "ok"
  int requests = 0;     // timing requests made for it
  double wall_s = 0.0;  // wall time of those requests (samples, warm-up, calibration, transport)
  std::vector<double> samples;
  bool is_heuristics = false;

  nlohmann::json to_json() const;
};

struct TuneProgress {
  int candidate = 0;  // 1-based
  int num_candidates = 0;
  double best_time_s = 0.0;  // 0 while none
};

struct TuneOptions {
  uint64_t seed = 0;
  double oracle_budget = kDefaultOracleBudget;
  TimingOptions timing;
  Strategy strategy = Strategy::kExhaustive;
  int max_evals = 0;           // candidates timed per case; 0 = unlimited
  double time_budget_s = 0.0;  // wall time for timing per case; 0 = unlimited
  const std::atomic<bool>* interrupt = nullptr;
  std::function<void(const TuneProgress&)> progress;
  // Where candidates run (timing and verification): null = in this process. With a
  // WorkerRunner a crash or hang costs only the candidate ("crash", "timeout").
  CaseRunner* runner = nullptr;
};

// Where one case's tuning wall time went.
struct TunePhases {
  double setup_s = 0.0;   // worker start and input generation (runner.setup)
  double search_s = 0.0;  // the strategy's timing requests
  double verify_s = 0.0;  // oracle and checks, fastest-first until one passes
  double total_s = 0.0;   // tune_case end to end
  int requests = 0;       // timing requests
  int checks = 0;         // verification runs

  nlohmann::json to_json() const;
};

struct TuneResult {
  bool has_winner = false;
  std::string reason;  // why there is no winner (CaseLost: the worker died twice in our step)
  // Steps of ours (setup, oracle) whose worker died and that were retried in a fresh one
  // (CaseRunner::take_retries).
  std::vector<std::string> retries;
  CacheEntry entry;  // the winner, ready for the cache
  std::vector<CandidateResult> candidates;
  double heuristics_time_s = 0.0;  // the heuristics config's median, for the gain
  TunePhases phases;
};

// Enumerates autotuning_configs (plus the heuristics config), skips invalid ones with the
// reason, times the rest as `strategy` and the budgets allow, and verifies candidates against the
// oracle fastest-first until one passes: only a verified config can win. A candidate that throws,
// crashes or hangs is recorded with that status and the search goes on. A case whose setup or
// oracle cannot be run (CaseLost) has no winner, the remaining candidates "skipped". Throws
// Interrupted when `interrupt` is raised.
TuneResult tune_case(const Op& op, const BoundArgs& args, const Implementation& impl,
                     const Device& device, const TuneOptions& options);

}  // namespace tokamax
