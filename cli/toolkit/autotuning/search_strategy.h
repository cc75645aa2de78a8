// Search strategies for tune (exhaustive, random, successive halving) over an injected timer.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/toolkit/measurement/timing.h"

namespace tokamax {

enum class Strategy { kExhaustive, kRandom, kHalving };

// "exhaustive" | "random" | "halving"; anything else -> InvalidArgument.
Strategy parse_strategy(const std::string& name);

struct SearchOptions {
  Strategy strategy = Strategy::kExhaustive;
  int max_evals = 0;           // candidates timed at most; 0 = unlimited
  double time_budget_s = 0.0;  // wall time for timing; 0 = unlimited
  uint64_t seed = 0;           // order and subset of `random` (and of a capped `halving`)
  TimingOptions timing;        // a full timing (exhaustive, random, halving's finalists)
  double abort_ratio = 1.5;    // halving round 0: fastest sample above this x best -> pruned
  // halving, before each round: a candidate with >= 2 samples whose fastest sample is over
  // (1 + race_margin) x the best median (of those with >= 2 samples) is raced out.
  double race_margin = 0.03;
  int keep = 2;                   // halving: stop halving at this many survivors
  std::function<double()> clock;  // seconds; default wall_seconds (tests inject a fake)
  // Called before each timing request: (1-based request, candidates in the search, best).
  std::function<void(int, int, double)> progress;
};

// A candidate that failed in a known way: `status` is its category ("error", "crash",
// "timeout"), the message the reason.
class CandidateFailure : public std::runtime_error {
 public:
  CandidateFailure(std::string status, const std::string& reason)
      : std::runtime_error(reason), status_(std::move(status)) {}
  const std::string& status() const { return status_; }

 private:
  std::string status_;
};

// Samples (seconds per call) of candidate `index` under `request`. warmup_runs == 0 asks for a
// lean timing (no discarded call beyond batch calibration). Throws on a failing candidate
// (CandidateFailure gives the failure its category; any other exception is an "error").
using TimeFn = std::function<std::vector<double>(size_t index, const TimingOptions& request)>;

struct SearchOutcome {
  std::string status = "skipped";  // "ok", "pruned", "skipped", "error", "crash", "timeout"
  std::string reason;
  int round = -1;  // halving: the last round the candidate was timed in
  std::vector<double> samples;
  double time_s = 0.0;  // median of `samples`
  int requests = 0;     // timing requests made for it
  double wall_s = 0.0;  // their wall time by `clock` (samples plus warm-up, calibration, transport)
};

// Times candidates 0..n-1 by `options.strategy`; `heuristics` (or n for none) is always timed
// first. Exceptions of `time` other than Interrupted mark the candidate failed: "error", or the
// status of a CandidateFailure.
std::vector<SearchOutcome> run_search(size_t n, size_t heuristics, const TimeFn& time,
                                      const SearchOptions& options);

}  // namespace tokamax
