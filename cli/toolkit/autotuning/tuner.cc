// tune: candidates -> validate -> time -> verify fastest-first -> cache entry.
#include "cli/toolkit/autotuning/tuner.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "backends/clock.h"
#include "ops/framework/errors.h"
#include "cli/toolkit/harness/local_runner.h"
#include "ops/framework/metadata.h"
#include "ops/framework/numerics.h"

namespace tokamax {

nlohmann::json TunePhases::to_json() const {
  return {{"setup_s", setup_s}, {"search_s", search_s}, {"verify_s", verify_s},
          {"total_s", total_s}, {"requests", requests}, {"checks", checks}};
}

nlohmann::json CandidateResult::to_json() const {
  nlohmann::json out = {{"config", config}, {"status", status}};
  if (!samples.empty()) {
    out["time_s"] = time_s;
    out["num_samples"] = samples.size();
  }
  if (round >= 0) out["round"] = round;
  if (requests > 0) {
    out["requests"] = requests;
    out["wall_s"] = wall_s;
  }
  if (!reason.empty()) out["reason"] = reason;
  if (is_heuristics) out["heuristics"] = true;
  return out;
}

TuneResult tune_case(const Op& op, const BoundArgs& args, const Implementation& impl,
                     const Device& device, const TuneOptions& options) {
  TuneResult result;
  const double begin = wall_seconds();
  const std::unique_ptr<Implementation::Prepared> prepared = impl.prepare(args, device);
  // The heuristics config competes too, so a tuned entry is never slower than the default.
  std::vector<nlohmann::json> configs = prepared->autotuning_configs();
  const nlohmann::json heuristics = prepared->heuristics_config();
  if (std::find(configs.begin(), configs.end(), heuristics) == configs.end()) {
    configs.insert(configs.begin(), heuristics);
  }

  LocalRunner local(options.interrupt);
  CaseRunner& runner = options.runner != nullptr ? *options.runner : local;
  CaseSetup setup;
  setup.op = std::string(op.name());
  setup.args = args;
  setup.device = device.id();
  setup.seed = options.seed;
  setup.oracle_budget = options.oracle_budget;
  // The runner's retries of setup and oracle steps, and the case lost when one died twice.
  runner.take_retries();  // a previous case's, already reported
  const auto lost = [&](const CaseLost& e) {
    result.has_winner = false;
    result.reason = e.what();
    result.retries = runner.take_retries();
    result.phases.total_s = wall_seconds() - begin;
    return result;
  };
  try {
    runner.setup(setup);
  } catch (const CaseLost& e) {
    return lost(e);
  }
  result.phases.setup_s = wall_seconds() - begin;
  result.candidates.resize(configs.size());
  std::vector<size_t> valid;  // indices into configs of the candidates that may be timed
  size_t heuristics_index = configs.size();
  for (size_t i = 0; i < configs.size(); ++i) {
    CandidateResult& candidate = result.candidates[i];
    candidate.config = configs[i];
    candidate.is_heuristics = configs[i] == heuristics;
    try {
      prepared->kernel(configs[i]);
    } catch (const InvalidArgument& e) {
      candidate.status = "invalid";
      candidate.reason = e.what();
      continue;
    }
    if (candidate.is_heuristics) heuristics_index = valid.size();
    valid.push_back(i);
  }

  SearchOptions search;
  search.strategy = options.strategy;
  search.max_evals = options.max_evals;
  search.time_budget_s = options.time_budget_s;
  search.seed = options.seed;
  search.timing = options.timing;
  if (options.progress) {
    search.progress = [&](int candidate, int total, double best) {
      options.progress(TuneProgress{candidate, total, best});
    };
  }
  std::optional<CaseLost> case_lost;  // set: no candidate can run any more
  const TimeFn time = [&](size_t index, const TimingOptions& request) {
    if (case_lost) throw CandidateFailure("skipped", case_lost->what());
    const nlohmann::json& config = configs[valid[index]];
    TimeResult timed;
    try {
      timed = runner.time(impl, config, request);
    } catch (const CaseLost& e) {
      case_lost = e;
      throw CandidateFailure("skipped", e.what());
    }
    if (timed.status != "ok") {
      throw CandidateFailure(timed.status, timed.reason);
    }
    return timed.samples;
  };
  const double search_begin = wall_seconds();
  const std::vector<SearchOutcome> outcomes =
      run_search(valid.size(), heuristics_index, time, search);
  result.phases.search_s = wall_seconds() - search_begin;
  for (size_t k = 0; k < valid.size(); ++k) {
    CandidateResult& candidate = result.candidates[valid[k]];
    candidate.status = outcomes[k].status;
    candidate.reason = outcomes[k].reason;
    candidate.round = outcomes[k].round;
    candidate.samples = outcomes[k].samples;
    candidate.time_s = outcomes[k].time_s;
    candidate.requests = outcomes[k].requests;
    candidate.wall_s = outcomes[k].wall_s;
    result.phases.requests += outcomes[k].requests;
    if (candidate.is_heuristics && !candidate.samples.empty()) {
      result.heuristics_time_s = candidate.time_s;
    }
  }

  if (case_lost) return lost(*case_lost);

  // Verify fastest-first: the oracle is computed once, only as far as needed.
  // Pruned candidates compete on their partial times too: a fast config that fails
  // verification may have been the bar that aborted the correct ones.
  std::vector<CandidateResult*> ranked;
  for (CandidateResult& c : result.candidates) {
    if (c.status == "ok" || (c.status == "pruned" && !c.samples.empty())) ranked.push_back(&c);
  }
  std::sort(ranked.begin(), ranked.end(), [](const CandidateResult* a, const CandidateResult* b) {
    return a->time_s < b->time_s;
  });
  if (ranked.empty()) {
    result.reason = "no valid candidate ran";
    result.retries = runner.take_retries();
    result.phases.total_s = wall_seconds() - begin;
    return result;
  }
  const double verify_begin = wall_seconds();
  for (CandidateResult* candidate : ranked) {
    if (options.interrupt != nullptr && options.interrupt->load()) throw Interrupted();
    ++result.phases.checks;
    CheckResult check;
    try {
      check = runner.check(impl, candidate->config);
    } catch (const CaseLost& e) {
      result.phases.verify_s = wall_seconds() - verify_begin;
      return lost(e);
    }
    if (check.status != "ok") {
      // A crash or hang only now (e.g. on other outputs) still disqualifies the candidate.
      candidate->status = check.status == "unsupported" ? "error" : check.status;
      candidate->reason = check.reason;
      continue;
    }
    std::string failure;
    for (const auto& [name, comparison] : check.comparisons) {
      if (judge(comparison) == Disposition::kFailed) {
        failure = name + ": max abs error " + std::to_string(comparison.max_abs_error) +
                  " over the bound " + std::to_string(comparison.bound);
      }
    }
    if (!failure.empty()) {
      candidate->status = "numerics";
      candidate->reason = failure;
      continue;
    }
    result.has_winner = true;
    result.entry.config = impl.canonical_config(candidate->config);
    result.entry.time_s = candidate->time_s;
    result.entry.samples = candidate->samples;
    result.entry.verified = true;
    break;
  }
  result.phases.verify_s = wall_seconds() - verify_begin;
  result.phases.total_s = wall_seconds() - begin;
  result.retries = runner.take_retries();
  if (!result.has_winner) {
    result.reason = "every timed candidate failed verification";
    return result;
  }
  for (const CandidateResult& c : result.candidates) result.entry.candidates.push_back(c.to_json());
  result.entry.metadata = run_metadata(device);
  result.entry.metadata["op"] = std::string(op.name());
  result.entry.metadata["impl"] = std::string(impl.name());
  result.entry.metadata["args"] = args.args;
  result.entry.metadata["config_source"] = "autotuned";
  result.entry.metadata["backend"] = impl.describe();
  result.entry.metadata["heuristics_time_s"] = result.heuristics_time_s;
  return result;
}

}  // namespace tokamax
