// verify: inputs, oracle (sampled past a budget), each implementation, comparison, dumps.
#include "cli/toolkit/harness/verifier.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include "backends/files.h"
#include "backends/registry.h"
#include "ops/framework/errors.h"
#include "cli/toolkit/harness/local_runner.h"
#include "cli/toolkit/harness/npy.h"
#include "ops/framework/metadata.h"
#include "ops/registry.h"

namespace tokamax {
namespace {

namespace fs = std::filesystem;

double case_bytes(const Op& op, const BoundArgs& args, size_t num_impls) {
  double bytes = 0.0;
  for (const TensorDecl& decl : op.inputs(args))
    bytes += static_cast<double>(decl.spec.size_bytes());
  for (const TensorDecl& decl : op.outputs(args)) {
    bytes += static_cast<double>(decl.spec.size_bytes()) * static_cast<double>(num_impls);
  }
  return bytes;
}

}  // namespace

std::string case_dtype(const Op& op, const BoundArgs& args) {
  std::set<std::string> in, out;
  for (const TensorDecl& d : op.inputs(args)) {
    if (is_floating(d.spec.dtype) || is_quantized(d.spec.dtype)) {
      in.insert(std::string(dtype_name(d.spec.dtype)));
    }
  }
  for (const TensorDecl& d : op.outputs(args)) out.insert(std::string(dtype_name(d.spec.dtype)));
  auto join = [](const std::set<std::string>& names) {
    std::string text;
    for (const std::string& n : names) text += (text.empty() ? "" : "/") + n;
    return text;
  };
  return in == out ? join(in) : join(in) + "->" + join(out);
}

nlohmann::json VerifyRecord::to_json() const {
  const bool compared = disposition == Disposition::kPassed ||
                        disposition == Disposition::kFailed ||
                        disposition == Disposition::kMistrusted;
  auto number = [&](double v) { return compared ? nlohmann::json(v) : nlohmann::json(nullptr); };
  return {{"op", op},
          {"spec", spec},
          {"impl", impl},
          {"dtype", dtype},
          {"disposition", std::string(disposition_name(disposition))},
          {"reason", reason},
          {"failure", failure},
          {"max_abs_error", number(comparison.max_abs_error)},
          {"max_rel_error", number(comparison.max_rel_error)},
          {"max_abs_oracle", number(comparison.max_abs_oracle)},
          {"normwise_rel_error", number(normwise_rel_error(comparison))},
          {"bound", number(comparison.bound)},
          {"worst_ratio",
           number(std::isfinite(comparison.worst_ratio) ? comparison.worst_ratio : 1e300)},
          {"violations", comparison.violations},
          {"nonfinite", comparison.nonfinite},
          {"sampled_outputs", comparison.sampled},
          {"total_outputs", comparison.total},
          {"args", args.args},
          {"config", config},
          {"config_source", config_source},
          {"backend", backend}};
}

std::vector<VerifyRecord> verify_case(const ArgSpec& spec,
                                      const std::vector<const Implementation*>& impls,
                                      const VerifyOptions& options) {
  const Op& op = find_op(spec.op);
  const BoundArgs& args = spec.args;
  const Device& device = options.device != nullptr ? *options.device : default_device();
  std::vector<VerifyRecord> records;
  auto emit = [&](VerifyRecord record) {
    if (options.on_record) options.on_record(record);
    records.push_back(std::move(record));
  };
  auto record_for = [&](const Implementation& impl) {
    VerifyRecord record;
    record.op = spec.op;
    record.spec = spec.name;
    record.impl = std::string(impl.name());
    record.dtype = case_dtype(op, args);
    record.args = args;
    record.backend = impl.describe();
    return record;
  };

  const double bytes = case_bytes(op, args, impls.size());
  if (bytes > options.max_case_bytes) {
    for (const Implementation* impl : impls) {
      VerifyRecord record = record_for(*impl);
      record.disposition = Disposition::kSkipped;
      record.reason = "needs " + std::to_string(static_cast<int64_t>(bytes / 1e6)) +
                      " MB, over the --max-memory limit";
      emit(std::move(record));
    }
    return records;
  }

  const ErrorModel model = op.error_model(args);
  LocalRunner local;
  CaseRunner& runner = options.runner != nullptr ? *options.runner : local;
  // DIR/<op>/<spec>/: both names must stay one folder each, inside DIR.
  if (!options.dump_dir.empty() && (!is_safe_file_name(spec.op) || !is_safe_file_name(spec.name))) {
    throw InvalidArgument(
        "--dump-dir: the spec name '" + spec.name.substr(0, 128) +
            "' cannot be a folder name (empty, . or .., '/', NUL, over 128 bytes)",
        "--dump-dir");
  }
  const fs::path case_dir =
      options.dump_dir.empty() ? fs::path() : fs::path(options.dump_dir) / spec.op / spec.name;
  CaseSetup setup;
  setup.op = spec.op;
  setup.args = args;
  setup.device = device.id();
  setup.seed = options.seed;
  setup.oracle_budget = options.oracle_budget;
  setup.dump_dir = case_dir.string();  // inputs and oracle
  // The reference's estimate first: its calibration uses the runner, then this case is set up.
  std::string reference_skip;
  for (const Implementation* impl : impls) {
    if (impl->name() != "reference" || options.reference_limit_s <= 0 ||
        options.reference_estimator == nullptr || !impl->supported_on(device).ok) {
      continue;
    }
    // Anything under a GFLOP finishes in seconds at any reference's rate: no calibration.
    if (op.flops(args) < 1e9) continue;
    if (options.on_step) options.on_step("estimating the reference's time");
    const std::optional<ReferenceEstimate> estimate =
        options.reference_estimator->estimate(op, args, *impl, device, runner);
    if (estimate && estimate->seconds > options.reference_limit_s) {
      reference_skip = reference_skip_reason(*estimate, options.reference_limit_s);
    }
  }
  if (options.on_step) options.on_step("inputs and oracle");
  runner.setup(setup);

  for (const Implementation* impl : impls) {
    VerifyRecord record = record_for(*impl);
    const Support support = impl->supported_on(device);
    if (!support.ok) {
      record.disposition = Disposition::kUnsupported;
      record.reason = support.reason;
      emit(std::move(record));
      continue;
    }
    if (impl->name() == "reference" && !reference_skip.empty()) {
      record.disposition = Disposition::kSkipped;
      record.reason = reference_skip;
      emit(std::move(record));
      continue;
    }
    CheckResult check;
    if (options.on_step) options.on_step(record.impl);
    try {
      const std::unique_ptr<Implementation::Prepared> prepared = impl->prepare(args, device);
      prepared->check();
      const ResolvedConfig resolved =
          resolve_config(*impl, *prepared, args, device, options.configs);
      record.config = resolved.kernel.config;
      record.config_source = std::string(config_source_name(resolved.source));
      check = runner.check(*impl, record.config,
                           case_dir.empty() ? "" : (case_dir / record.impl).string());
    } catch (const NotImplemented& e) {
      check.status = "unsupported";
      check.reason = e.what();
    } catch (const Interrupted&) {
      throw;
    } catch (const std::exception& e) {
      check.status = "error";
      check.reason = e.what();
    }
    if (check.status == "unsupported") {
      record.disposition = Disposition::kUnsupported;
      record.reason = check.reason;
      emit(std::move(record));
      continue;
    }
    if (check.status != "ok") {
      record.disposition = Disposition::kFailed;
      record.failure = check.status;
      record.reason = check.status + ": " + check.reason;
      emit(std::move(record));
      continue;
    }
    // Judge every output; the worst one decides.
    for (const auto& [name, comparison] : check.comparisons) {
      const Disposition verdict = judge(comparison);
      if (record.comparison.sampled == 0 ||
          comparison.worst_ratio > record.comparison.worst_ratio) {
        record.comparison = comparison;
      }
      if (verdict == Disposition::kFailed) {
        record.disposition = verdict;
        record.failure = "numerics";
        record.reason = comparison.nonfinite > 0 ? std::to_string(comparison.nonfinite) +
                                                       " non-finite outputs in " + name
                                                 : std::to_string(comparison.violations) +
                                                       " outputs of " + name + " exceed the bound";
      } else if (verdict == Disposition::kMistrusted &&
                 record.disposition == Disposition::kPassed) {
        record.disposition = verdict;
        record.reason = "oracle of " + name + " is all zero at the sampled points";
      }
    }
    if (record.disposition == Disposition::kPassed &&
        record.comparison.sampled < record.comparison.total) {
      record.reason = "sampled " + std::to_string(record.comparison.sampled) + " of " +
                      std::to_string(record.comparison.total) + " outputs";
    }
    emit(std::move(record));
  }

  if (!case_dir.empty()) {
    nlohmann::json meta = run_metadata(device);
    nlohmann::json results = nlohmann::json::array();
    for (const VerifyRecord& r : records) results.push_back(r.to_json());
    nlohmann::json case_json = {{"schema_version", 1},
                                {"op", spec.op},
                                {"spec", spec.name},
                                {"args", args.args},
                                {"seed", options.seed},
                                {"error_model",
                                 {{"accumulation_roundoff", model.accumulation_roundoff},
                                  {"accumulation_length", model.accumulation_length},
                                  {"output_roundoff", model.output_roundoff},
                                  {"operand_roundoff", model.operand_roundoff}}},
                                {"metadata", meta},
                                {"results", results}};
    std::ofstream(case_dir / "case.json") << case_json.dump(2) << "\n";
  }
  return records;
}

}  // namespace tokamax
