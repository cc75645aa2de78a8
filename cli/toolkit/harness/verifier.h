// verify: every selected implementation of a case against the float64 oracle.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/toolkit/catalog/arg_spec.h"
#include "ops/framework/config_resolution.h"
#include "cli/toolkit/harness/case_runner.h"
#include "cli/toolkit/harness/reference_estimate.h"
#include "ops/framework/numerics.h"
#include "ops/framework/op.h"

namespace tokamax {

struct VerifyRecord;

struct VerifyOptions {
  const Device* device = nullptr;  // where implementations run; null: the default device
  uint64_t seed = 0;
  // Oracle work per case, in float64 multiply-adds; past it, outputs are sampled.
  double oracle_budget = kDefaultOracleBudget;
  // Cases whose inputs + outputs need more bytes than this are skipped.
  double max_case_bytes = 8e9;
  std::string dump_dir;  // when set: DIR/<op>/<spec>/{inputs,oracle,<impl>}/<name>.npy + case.json
  ConfigContext configs;
  // Where implementations run: null = in this process. With a WorkerRunner an implementation
  // that crashes or hangs fails with failure "crash" / "timeout" and the others still run.
  CaseRunner* runner = nullptr;
  // Called with each implementation's record as soon as it is final (before verify_case
  // returns), so that a caller can print and save it even if a later implementation hangs.
  std::function<void(const VerifyRecord&)> on_record;
  // The portable `reference` is skipped (with its estimated time) where the estimate exceeds
  // this many seconds (the run timeout); 0 = never, as when the user names --impl reference.
  // `reference_estimator` keeps each op's measured rate across the cases of a run (null: none
  // is skipped).
  double reference_limit_s = 0;
  ReferenceEstimator* reference_estimator = nullptr;
  // Called as each step starts: "inputs and oracle", then each implementation's name (for a
  // progress line).
  std::function<void(const std::string& step)> on_step;
};

struct VerifyRecord {
  std::string op, spec, impl, dtype;
  Disposition disposition = Disposition::kPassed;
  std::string reason;
  // Why a failed record failed: "numerics" (out of the bound), "error" (threw), "crash",
  // "timeout"; empty otherwise.
  std::string failure;
  Comparison comparison;
  nlohmann::json config;
  std::string config_source;
  nlohmann::json backend = nlohmann::json::object();  // Implementation::describe()
  BoundArgs args;

  nlohmann::json to_json() const;  // one element of "cases" in `verify --json`
};

// The dtypes a case runs at, e.g. "bf16" or "bf16->f32" when the output differs.
std::string case_dtype(const Op& op, const BoundArgs& args);

// Verifies one case: inputs from the seed, the oracle once, then each implementation.
std::vector<VerifyRecord> verify_case(const ArgSpec& spec,
                                      const std::vector<const Implementation*>& impls,
                                      const VerifyOptions& options);

}  // namespace tokamax
