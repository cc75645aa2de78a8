// LocalRunner: inputs on the case's device, the float64 oracle, and time / check / bench of
// implementations in this process.
#include "cli/toolkit/harness/local_runner.h"

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>

#include "backends/device.h"
#include "ops/framework/devices.h"
#include "ops/framework/errors.h"
#include "cli/toolkit/harness/npy.h"
#include "cli/toolkit/measurement/bench_sampler.h"
#include "ops/registry.h"

namespace tokamax {
namespace {

namespace fs = std::filesystem;

void dump_tensors(const fs::path& dir, const TensorMap& tensors) {
  fs::create_directories(dir);
  for (const auto& [name, tensor] : tensors) write_npy((dir / (name + ".npy")).string(), tensor);
}

void dump_oracle(const fs::path& dir, const Op& op, const BoundArgs& args,
                 const OracleSet& oracle) {
  fs::create_directories(dir);
  for (const TensorDecl& decl : op.outputs(args)) {
    const OracleSample& sample = oracle.at(decl.name);
    const auto count = static_cast<int64_t>(sample.index.size());
    if (count == decl.spec.num_elements()) {
      write_npy((dir / (decl.name + ".npy")).string(), "<f8", decl.spec.dims, sample.value.data(),
                sample.value.size() * sizeof(double));
    } else {
      // Sampled: flat indices and values side by side (out.flat[index] ~ values).
      write_npy((dir / (decl.name + "_index.npy")).string(), "<i8", {count}, sample.index.data(),
                sample.index.size() * sizeof(int64_t));
      write_npy((dir / (decl.name + "_values.npy")).string(), "<f8", {count}, sample.value.data(),
                sample.value.size() * sizeof(double));
    }
  }
}

std::string exception_message(const std::exception& e) {
  const std::string what = e.what();
  return what.empty() ? "exception with an empty message" : what;
}

}  // namespace

bool CaseSetup::same_case(const CaseSetup& other) const {
  return op == other.op && args.key() == other.args.key() && device == other.device &&
         seed == other.seed && oracle_budget == other.oracle_budget;
}

struct LocalRunner::State {
  CaseSetup setup;
  const Op* op = nullptr;
  const Device* device = nullptr;
  TensorMap host_inputs;  // generated from the seed; the oracle reads these
  TensorMap inputs;       // host_inputs in the device's memory (the same tensors on the CPU)
  TensorMap outputs;      // in the device's memory
  std::optional<OracleSet> oracle;
  // Each implementation prepared for the case once (its problem parsed once).
  std::map<const Implementation*, std::unique_ptr<Implementation::Prepared>> prepared;

  const OracleSet& ensure_oracle() {
    if (!oracle) {
      oracle = sample_oracle(*op, setup.args, host_inputs, setup.oracle_budget, setup.seed);
    }
    return *oracle;
  }

  Kernel kernel(const Implementation& impl, const nlohmann::json& config) {
    std::unique_ptr<Implementation::Prepared>& p = prepared[&impl];
    if (!p) p = impl.prepare(setup.args, *device);
    return p->kernel(config);
  }
};

LocalRunner::LocalRunner(const std::atomic<bool>* interrupt) : interrupt_(interrupt) {}
LocalRunner::~LocalRunner() = default;

LocalRunner::State& LocalRunner::state() const {
  if (!state_) throw InvalidArgument("no case has been set up");
  return *state_;
}

void LocalRunner::setup(const CaseSetup& setup) {
  if (!state_ || !state_->setup.same_case(setup)) {
    state_.reset();  // one case's tensors alive at a time
    auto state = std::make_unique<State>();
    state->setup = setup;
    state->op = &find_op(setup.op);
    state->device = &resolve_device(setup.device);
    state->host_inputs = state->op->make_inputs(setup.args, setup.seed);
    const Memory& memory = state->device->memory();
    state->inputs = to_memory(state->host_inputs, memory);
    state->outputs = state->op->allocate_outputs(setup.args, memory);
    state_ = std::move(state);
  }
  if (!setup.dump_dir.empty()) {
    dump_tensors(fs::path(setup.dump_dir) / "inputs", state_->host_inputs);
    dump_oracle(fs::path(setup.dump_dir) / "oracle", *state_->op, setup.args,
                state_->ensure_oracle());
  }
}

void LocalRunner::prepare_oracle() { state().ensure_oracle(); }

const Implementation& LocalRunner::implementation(const std::string& name) const {
  return state().op->implementation(name);
}

TimeResult LocalRunner::time(const Implementation& impl, const nlohmann::json& config,
                             const TimingOptions& timing) {
  State& s = state();
  TimeResult result;
  try {
    const Kernel kernel = s.kernel(impl, config);
    result.samples =
        time_calls([&] { kernel.run(s.inputs, s.outputs); }, timing, *s.device, interrupt_);
  } catch (const Interrupted&) {
    throw;
  } catch (const DeviceFault&) {
    throw;  // the process cannot go on with this device (backends/device.h)
  } catch (const std::exception& e) {
    result.status = "error";
    result.reason = exception_message(e);
    result.samples.clear();
  }
  return result;
}

CheckResult LocalRunner::check(const Implementation& impl, const nlohmann::json& config,
                               const std::string& dump_dir) {
  State& s = state();
  const OracleSet& oracle = s.ensure_oracle();
  if (interrupt_ != nullptr && interrupt_->load()) throw Interrupted();
  CheckResult result;
  // NaN bytes everywhere an implementation must write (every byte 0xff is a NaN in every float
  // type), so one that leaves an element unwritten fails; zeros where the op keeps old contents.
  const bool zeroed = s.op->outputs_start_zeroed(s.setup.args);
  for (auto& [name, tensor] : s.outputs) {
    if (zeroed) {
      tensor.fill_zero();
    } else {
      const std::vector<unsigned char> poison(tensor.size_bytes(), 0xff);
      tensor.memory().copy_from_host(tensor.raw(), poison.data(), poison.size());
    }
  }
  try {
    s.kernel(impl, config).run(s.inputs, s.outputs);
    s.device->synchronize();
  } catch (const NotImplemented& e) {
    result.status = "unsupported";
    result.reason = exception_message(e);
    return result;
  } catch (const DeviceFault&) {
    throw;
  } catch (const std::exception& e) {
    result.status = "error";
    result.reason = exception_message(e);
    return result;
  }
  const TensorMap outputs = to_memory(s.outputs, host_memory());
  const ErrorModel model = s.op->error_model(s.setup.args);
  for (const auto& [name, sample] : oracle) {
    result.comparisons[name] = compare_to_oracle(outputs.at(name), sample, model);
  }
  if (!dump_dir.empty()) dump_tensors(dump_dir, outputs);
  return result;
}

std::vector<BenchOutcome> LocalRunner::bench(const std::vector<BenchJob>& jobs,
                                             const BenchOptions& options) {
  State& s = state();
  const Memory& memory = s.device->memory();
  int64_t input_bytes = 0;
  for (const auto& [name, tensor] : s.inputs) {
    input_bytes += static_cast<int64_t>(tensor.size_bytes());
  }
  std::vector<BenchCase> cases;
  for (const BenchJob& job : jobs) {
    BenchCase bench_case;
    bench_case.name = job.name;
    bench_case.flops = job.flops;
    bench_case.bytes = job.bytes;
    bench_case.label = job.label;
    Kernel kernel;
    try {
      kernel = s.kernel(*job.impl, job.config);
    } catch (const std::exception& e) {
      // A config that does not parse or fit fails like a run that throws: an error row.
      bench_case.run = [message = exception_message(e)] { throw std::runtime_error(message); };
      cases.push_back(std::move(bench_case));
      continue;
    }
    // Each implementation writes its own outputs, as it would in an application.
    auto outputs = std::make_shared<TensorMap>(s.op->allocate_outputs(s.setup.args, memory));
    bench_case.run = [run = kernel.run, inputs = &s.inputs, outputs] { run(*inputs, *outputs); };
    int64_t output_bytes = 0;
    for (const auto& [name, tensor] : *outputs) {
      output_bytes += static_cast<int64_t>(tensor.size_bytes());
    }
    bench_case.footprint_bytes = input_bytes + output_bytes;
    // Cold cache mode: separate memory per copy (Tensor copies share their buffer).
    bench_case.make_copies = [op = s.op, args = s.setup.args, run = kernel.run, inputs = &s.inputs,
                              &memory](int copies) -> std::function<void(int)> {
      auto sets = std::make_shared<std::vector<std::pair<TensorMap, TensorMap>>>();
      for (int i = 0; i < copies; ++i) {
        TensorMap copy;
        for (const auto& [name, tensor] : *inputs) copy.emplace(name, tensor.copy(memory));
        sets->emplace_back(std::move(copy), op->allocate_outputs(args, memory));
      }
      return [run, sets](int i) {
        auto& [in, out] = (*sets)[static_cast<size_t>(i)];
        run(in, out);
      };
    };
    cases.push_back(std::move(bench_case));
  }
  std::vector<BenchOutcome> outcomes;
  for (BenchStats& stats : run_benchmarks(cases, options, *s.device)) {
    BenchOutcome outcome;
    outcome.status = stats.ok ? "ok" : "error";
    outcome.stats = std::move(stats);
    outcomes.push_back(std::move(outcome));
  }
  return outcomes;
}

}  // namespace tokamax
