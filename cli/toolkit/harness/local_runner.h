// LocalRunner: a CaseRunner that runs everything in this process, on the case's device.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "cli/toolkit/harness/case_runner.h"

namespace tokamax {

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
  State& state() const;
  const std::atomic<bool>* interrupt_;
  std::unique_ptr<State> state_;
};

}  // namespace tokamax
