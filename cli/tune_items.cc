// The work list of `tokamax tune`: sorted items, shards, the failed-candidate summary.
#include "cli/tune_items.h"

#include <algorithm>
#include <stdexcept>
#include <string_view>
#include <tuple>

#include "cli/common.h"
#include "ops/framework/errors.h"
#include "ops/registry.h"

namespace tokamax::cli {

Shard parse_shard(const std::string& text) {
  Shard shard;
  const size_t slash = text.find('/');
  size_t used_index = 0, used_count = 0;
  try {
    if (slash == std::string::npos) throw std::invalid_argument("no slash");
    shard.index = std::stoi(text.substr(0, slash), &used_index);
    shard.count = std::stoi(text.substr(slash + 1), &used_count);
  } catch (const std::exception&) {
    used_index = used_count = 0;
  }
  if (slash == std::string::npos || used_index != slash || used_index == 0 ||
      used_count != text.size() - slash - 1 || used_count == 0 || shard.count < 1 ||
      shard.index < 0 || shard.index >= shard.count) {
    throw InvalidArgument(
        "--shard '" + text + "': expected I/N with 0 <= I < N (0-based shard index, shard count)",
        "shard");
  }
  return shard;
}

std::string failure_counts(const std::vector<CandidateResult>& candidates) {
  std::string text;
  for (const char* status : {"invalid", "error", "crash", "timeout", "numerics"}) {
    int count = 0;
    for (const CandidateResult& c : candidates) count += c.status == status;
    if (count > 0)
      text += (text.empty() ? "" : ", ") + std::string(status) + " " + std::to_string(count);
  }
  return text.empty() ? "-" : text;
}

std::vector<TuneItem> sorted_items(const std::vector<ArgSpec>& specs, const std::string& impls) {
  std::vector<TuneItem> items;
  for (const ArgSpec& spec : specs) {
    for (const Implementation* impl : select_impls(find_op(spec.op), impls, specs)) {
      items.push_back({&spec, impl});
    }
  }
  auto order = [](const TuneItem& item) {
    return std::make_tuple(std::string_view(item.spec->op), std::string_view(item.spec->name),
                           item.impl->name(), item.spec->args.key());
  };
  std::stable_sort(items.begin(), items.end(),
                   [&](const TuneItem& a, const TuneItem& b) { return order(a) < order(b); });
  return items;
}

}  // namespace tokamax::cli
