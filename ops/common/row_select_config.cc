// The CPU row selection's config: validation, heuristics and search space.
#include "ops/common/row_select_config.h"

#include <algorithm>
#include <set>
#include <string>

#include "backends/cpu/cpu_device.h"
#include "ops/common/cpu_checks.h"

namespace tokamax {
namespace {

constexpr int kMaxRowsPerTask = 1 << 20;
// The largest k threshold select takes by default: past it the lanes' maxima are maxima of few
// scores each, the bound is loose and the candidates many, and radix select's fixed costs (a
// histogram to clear and scan) cost less.
constexpr int64_t kThresholdMaxK = 64;
// Scores one task should read: enough that handing out a task is noise, little enough that the
// last tasks balance (at least 4 tasks per thread besides).
constexpr int64_t kTaskScores = 64 * 1024;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

void RowSelectConfig::validate() const {
  require_config(rows_per_task >= 1 && rows_per_task <= kMaxRowsPerTask, "rows_per_task", [&] {
    return "rows_per_task is " + std::to_string(rows_per_task) + "; expected 1.." +
           std::to_string(kMaxRowsPerTask);
  });
  require_config(num_threads >= 0, "num_threads", [&] {
    return "num_threads is " + std::to_string(num_threads) + "; expected >= 0 (0 = all cores)";
  });
}

void check_row_select_config(const RowSelectConfig& c, const Device& device) {
  require_num_threads(c.num_threads, device);
}

RowSelectConfig row_select_heuristics_config(int64_t b, int64_t n, int64_t k,
                                             const Device& target) {
  const cpu::CpuInfo& device = cpu::cpu_info(target);
  RowSelectConfig c;
  c.radix_select = k > kThresholdMaxK;
  const int64_t by_size = std::max<int64_t>(kTaskScores / std::max<int64_t>(n, 1), 1);
  const int64_t by_balance = std::max<int64_t>(ceil_div(b, 4 * std::max(device.cores, 1)), 1);
  c.rows_per_task =
      static_cast<int>(std::clamp<int64_t>(std::min(by_size, by_balance), 1, kMaxRowsPerTask));
  return c;
}

std::vector<RowSelectConfig> row_select_autotuning_configs(int64_t b, int64_t n, int64_t k,
                                                           const Device& target) {
  const RowSelectConfig h = row_select_heuristics_config(b, n, k, target);
  std::vector<RowSelectConfig> configs = {h};
  std::set<std::tuple<int, int, bool>> seen = {h.key()};
  for (const bool radix : {h.radix_select, !h.radix_select}) {
    for (const int rows :
         {h.rows_per_task, h.rows_per_task * 4, std::max(h.rows_per_task / 4, 1), 1}) {
      RowSelectConfig c = h;
      c.radix_select = radix;
      c.rows_per_task = std::clamp(rows, 1, kMaxRowsPerTask);
      if (seen.insert(c.key()).second) configs.push_back(c);
    }
  }
  return configs;
}

}  // namespace tokamax
