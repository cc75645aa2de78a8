// One conformance test over every registered op x implementation x `ci_tests` case, in the manner
// of upstream's test_base.py: a new op or implementation is covered without a line of test code.
//
// For each case on the host device:
//   - verify passes for every implementation, or the implementation is unsupported with a reason,
//     or the oracle is all zero (every group empty, K = 0) and so is the output (failed, skipped
//     or a non-zero output fails the test);
//   - for every implementation that accepts the case, its heuristics config and every config of
//     its autotuning space round-trip through JSON unchanged and pass its check for the case.
#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "backends/cpu/cpu_device.h"
#include "cli/toolkit/catalog/arg_spec.h"
#include "ops/framework/errors.h"
#include "cli/toolkit/harness/verifier.h"
#include "ops/registry.h"

using namespace tokamax;
using nlohmann::json;

namespace {

std::vector<ArgSpec> ci_tests() {
  return filter_specs(load_specs({}), SpecFilter{{}, {"ci_tests"}, {}});
}

}  // namespace

TEST_CASE("every op has ci_tests cases", "[conformance]") {
  std::set<std::string> covered;
  for (const ArgSpec& spec : ci_tests()) covered.insert(spec.op);
  for (const Op* op : all_ops()) {
    CAPTURE(op->name());
    CHECK(covered.count(std::string(op->name())) == 1);
  }
}

TEST_CASE("every implementation passes verify on every ci_tests case or says why not",
          "[conformance]") {
  VerifyOptions options;  // in this process, on the host device
  options.device = &cpu::host_device();
  int passed = 0;
  for (const ArgSpec& spec : ci_tests()) {
    const Op& op = find_op(spec.op);
    for (const VerifyRecord& record : verify_case(spec, op.implementations(), options)) {
      INFO(record.op << "/" << record.spec << "/" << record.impl << ": "
                     << disposition_name(record.disposition) << " " << record.reason);
      if (record.disposition == Disposition::kUnsupported) {
        CHECK_FALSE(record.reason.empty());
        // The reference runs every valid case: it is the fallback of "auto".
        CHECK(record.impl != "reference");
      } else if (record.disposition == Disposition::kMistrusted) {
        // An all-zero oracle (all groups empty, K = 0): right only if the output is all zero.
        CHECK(record.comparison.max_abs_error == 0);
        CHECK(record.comparison.nonfinite == 0);
      } else {
        CHECK(record.disposition == Disposition::kPassed);
        ++passed;
      }
    }
  }
  CHECK(passed > 0);
}

TEST_CASE("every config an implementation offers round-trips and fits the case", "[conformance]") {
  const Device& device = cpu::host_device();
  for (const ArgSpec& spec : ci_tests()) {
    for (const Implementation* impl : find_op(spec.op).implementations()) {
      CAPTURE(spec.op, spec.name, impl->name());
      if (!impl->supported_on(device).ok) continue;
      const std::unique_ptr<Implementation::Prepared> prepared = impl->prepare(spec.args, device);
      try {
        prepared->check();
      } catch (const NotImplemented&) {
        continue;  // verify above requires the reason
      }
      const json heuristics = prepared->heuristics_config();
      CHECK(impl->canonical_config(heuristics) == heuristics);
      CHECK(prepared->heuristics_kernel().config == heuristics);
      const std::vector<json> space = prepared->autotuning_configs();
      CHECK_FALSE(space.empty());
      for (const json& config : space) {
        CAPTURE(config.dump());
        CHECK(impl->canonical_config(json::parse(config.dump())) == config);
        CHECK_NOTHROW(prepared->kernel(config));
      }
    }
  }
}
