// tune: candidates -> validate -> time -> verify fastest-first -> cache entry.
#include "ops/tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "ops/errors.h"
#include "ops/metadata.h"
#include "ops/numerics.h"

namespace tokamax {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// time_calls, or with warmup_runs == 0 a lean variant for halving: the first call calibrates
// the batch and counts as a sample when it alone lasts a sample (slow kernels waste nothing).
std::vector<double> sample_calls(const std::function<void()>& call, const TimingOptions& options,
                                 const std::atomic<bool>* interrupt) {
  if (options.warmup_runs > 0) return time_calls(call, options, interrupt);
  auto check = [&] {
    if (interrupt != nullptr && interrupt->load()) throw Interrupted();
  };
  check();
  double start = now_s();
  call();
  const double one_call = now_s() - start;
  std::vector<double> samples;
  double timed = 0.0;
  if (one_call >= options.sample_time_s) {
    samples.push_back(one_call);
    timed = one_call;
  }
  const int batch =
      static_cast<int>(std::clamp(options.sample_time_s / std::max(one_call, 1e-9), 1.0, 1e6));
  while (static_cast<int>(samples.size()) < options.max_samples &&
         (static_cast<int>(samples.size()) < options.min_samples || timed < options.min_time_s)) {
    check();
    start = now_s();
    for (int i = 0; i < batch; ++i) call();
    const double elapsed = now_s() - start;
    timed += elapsed;
    samples.push_back(elapsed / batch);
  }
  return samples;
}

}  // namespace

nlohmann::json CandidateResult::to_json() const {
  nlohmann::json out = {{"config", config}, {"status", status}};
  if (!samples.empty()) {
    out["time_s"] = time_s;
    out["num_samples"] = samples.size();
  }
  if (round >= 0) out["round"] = round;
  if (!reason.empty()) out["reason"] = reason;
  if (is_heuristics) out["heuristics"] = true;
  return out;
}

TuneResult tune_case(const Op& op, const BoundArgs& args, const Implementation& impl,
                     const DeviceInfo& device, const TuneOptions& options) {
  TuneResult result;
  // The heuristics config competes too, so a tuned entry is never slower than the default.
  std::vector<nlohmann::json> configs = impl.autotuning_configs_json(args, device);
  const nlohmann::json heuristics = impl.heuristics_config_json(args, device);
  if (std::find(configs.begin(), configs.end(), heuristics) == configs.end()) {
    configs.insert(configs.begin(), heuristics);
  }

  const TensorMap inputs = op.make_inputs(args, options.seed);
  TensorMap outputs = op.allocate_outputs(args);
  result.candidates.resize(configs.size());
  std::vector<size_t> valid;  // indices into configs of the candidates that may be timed
  size_t heuristics_index = configs.size();
  for (size_t i = 0; i < configs.size(); ++i) {
    CandidateResult& candidate = result.candidates[i];
    candidate.config = configs[i];
    candidate.is_heuristics = configs[i] == heuristics;
    try {
      impl.check_config_json(args, impl.canonical_config(configs[i]));
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
  const TimeFn time = [&](size_t index, const TimingOptions& request) {
    const nlohmann::json& config = configs[valid[index]];
    return sample_calls([&] { impl.run_json(args, config, inputs, outputs); }, request,
                        options.interrupt);
  };
  const std::vector<SearchOutcome> outcomes =
      run_search(valid.size(), heuristics_index, time, search);
  for (size_t k = 0; k < valid.size(); ++k) {
    CandidateResult& candidate = result.candidates[valid[k]];
    candidate.status = outcomes[k].status;
    candidate.reason = outcomes[k].reason;
    candidate.round = outcomes[k].round;
    candidate.samples = outcomes[k].samples;
    candidate.time_s = outcomes[k].time_s;
    if (candidate.is_heuristics && !candidate.samples.empty()) {
      result.heuristics_time_s = candidate.time_s;
    }
  }

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
    return result;
  }
  const ErrorModel model = op.error_model(args);
  const OracleSet oracle = sample_oracle(op, args, inputs, options.oracle_budget, options.seed);
  for (CandidateResult* candidate : ranked) {
    if (options.interrupt != nullptr && options.interrupt->load()) throw Interrupted();
    for (auto& [name, tensor] : outputs) tensor.fill_zero();
    impl.run_json(args, candidate->config, inputs, outputs);
    std::string failure;
    for (const auto& [name, sample] : oracle) {
      const Comparison comparison = compare_to_oracle(outputs.at(name), sample, model);
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
  if (!result.has_winner) {
    result.reason = "every timed candidate failed verification";
    return result;
  }
  for (const CandidateResult& c : result.candidates) result.entry.candidates.push_back(c.to_json());
  result.entry.metadata = run_metadata();
  result.entry.metadata["op"] = std::string(op.name());
  result.entry.metadata["impl"] = std::string(impl.name());
  result.entry.metadata["args"] = args.args;
  result.entry.metadata["config_source"] = "autotuned";
  result.entry.metadata["backend"] = impl.describe();
  result.entry.metadata["heuristics_time_s"] = result.heuristics_time_s;
  return result;
}

}  // namespace tokamax
