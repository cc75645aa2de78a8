// tune: candidates -> validate -> time -> verify fastest-first -> cache entry.
#include "ops/tuner.h"

#include <algorithm>
#include <cmath>

#include "ops/errors.h"
#include "ops/metadata.h"
#include "ops/numerics.h"

namespace tokamax {

nlohmann::json CandidateResult::to_json() const {
  nlohmann::json out = {{"config", config}, {"status", status}};
  if (status == "ok" || status == "numerics") out["time_s"] = time_s;
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
  TuneProgress progress{0, static_cast<int>(configs.size()), 0.0};
  for (const nlohmann::json& config : configs) {
    ++progress.candidate;
    if (options.progress) options.progress(progress);
    CandidateResult candidate;
    candidate.config = config;
    candidate.is_heuristics = config == heuristics;
    try {
      const nlohmann::json canonical = impl.canonical_config(config);
      impl.check_config_json(args, canonical);
    } catch (const InvalidArgument& e) {
      candidate.status = "invalid";
      candidate.reason = e.what();
      result.candidates.push_back(candidate);
      continue;
    }
    try {
      candidate.samples = time_calls([&] { impl.run_json(args, config, inputs, outputs); },
                                     options.timing, options.interrupt);
      candidate.time_s = median(candidate.samples);
      candidate.status = "ok";
      if (progress.best_time_s == 0.0 || candidate.time_s < progress.best_time_s) {
        progress.best_time_s = candidate.time_s;
      }
      if (candidate.is_heuristics) result.heuristics_time_s = candidate.time_s;
    } catch (const Interrupted&) {
      throw;
    } catch (const std::exception& e) {
      candidate.status = "error";
      candidate.reason = e.what();
    }
    result.candidates.push_back(candidate);
  }

  // Verify fastest-first: the oracle is computed once, only as far as needed.
  std::vector<CandidateResult*> ranked;
  for (CandidateResult& c : result.candidates) {
    if (c.status == "ok") ranked.push_back(&c);
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
