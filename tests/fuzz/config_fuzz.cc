// Fuzz target: config JSON of every implementation (what caches, records and `--config` hold).
// Input: "<op>/<implementation>\n<config JSON>". The config is parsed without a problem
// (canonical_config) and checked against the smallest ci_tests case of its op on the host CPU
// (Prepared::kernel, which builds the kernel without running it).
#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "cli/toolkit/catalog/arg_spec.h"
#include "ops/registry.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

struct Target {
  std::string name;  // "<op>/<implementation>"
  const tokamax::Implementation* impl;
  std::unique_ptr<tokamax::Implementation::Prepared> prepared;  // null: unsupported here
};

std::vector<Target> make_targets() {
  const std::vector<tokamax::ArgSpec> specs = tokamax::builtin_specs();
  const tokamax::Device& cpu = tokamax::default_device();
  std::vector<Target> targets;
  for (const tokamax::Op* op : tokamax::all_ops()) {
    const tokamax::ArgSpec* smallest = nullptr;
    for (const tokamax::ArgSpec& spec : specs) {
      const bool ci = std::find(spec.tags.begin(), spec.tags.end(), "ci_tests") != spec.tags.end();
      if (spec.op == op->name() && ci &&
          (!smallest || op->flops(spec.args) < op->flops(smallest->args))) {
        smallest = &spec;
      }
    }
    for (const tokamax::Implementation* impl : op->implementations()) {
      Target target{std::string(op->name()) + "/" + std::string(impl->name()), impl, nullptr};
      if (smallest && impl->supported_on(cpu).ok) {
        try {
          auto prepared = impl->prepare(smallest->args, cpu);
          prepared->check();
          target.prepared = std::move(prepared);
        } catch (const tokamax::NotImplemented&) {
        }
      }
      targets.push_back(std::move(target));
    }
  }
  return targets;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<Target> targets = make_targets();
  const std::string_view input = tokamax::fuzz::as_text(data, size);
  const size_t newline = input.find('\n');
  if (newline == std::string_view::npos) return 0;
  const auto target_it = std::find_if(targets.begin(), targets.end(), [&](const Target& t) {
    return t.name == input.substr(0, newline);
  });
  if (target_it == targets.end()) return 0;
  const Target& target = *target_it;
  const std::string_view text = input.substr(newline + 1);
  const nlohmann::json config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) return 0;  // not JSON: the JSON reader's business, not the config's
  tokamax::fuzz::expect_clean_refusal([&] {
    const nlohmann::json canonical = target.impl->canonical_config(config);
    if (target.impl->canonical_config(canonical) != canonical) {
      throw std::logic_error("a canonical config is not a fixed point of canonical_config");
    }
    if (target.prepared) {
      try {
        (void)target.prepared->kernel(canonical);
      } catch (const tokamax::NotImplemented&) {
      }
    }
  });
  return 0;
}
