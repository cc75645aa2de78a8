// The CPU row gathers' config: validation, heuristics and search space.
#include "ops/common/row_gather_config.h"

#include <algorithm>
#include <set>
#include <string>

#include "backends/cpu/cpu_device.h"
#include "ops/common/cpu_checks.h"

namespace tokamax {
namespace {

constexpr int kMaxRowsPerTask = 1 << 20;
constexpr int kMaxPrefetchRows = 64;
// Bytes one task should read: enough that handing out a task is noise, little enough that the
// last tasks balance (at least 4 tasks per thread besides).
constexpr int64_t kTaskBytes = 256 * 1024;
// Rows ahead prefetched by default: enough lead to cover a DRAM miss on the next rows, few
// enough that the prefetched lines stay in L2 until read (measured: docs/ops/ragged_gather.md).
constexpr int kDefaultPrefetchRows = 2;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

void RowGatherConfig::validate() const {
  require_config(rows_per_task >= 1 && rows_per_task <= kMaxRowsPerTask, "rows_per_task", [&] {
    return "rows_per_task is " + std::to_string(rows_per_task) + "; expected 1.." +
           std::to_string(kMaxRowsPerTask);
  });
  require_config(num_threads >= 0, "num_threads", [&] {
    return "num_threads is " + std::to_string(num_threads) + "; expected >= 0 (0 = all cores)";
  });
  require_config(prefetch_rows >= 0 && prefetch_rows <= kMaxPrefetchRows, "prefetch_rows", [&] {
    return "prefetch_rows is " + std::to_string(prefetch_rows) + "; expected 0.." +
           std::to_string(kMaxPrefetchRows);
  });
}

void check_row_gather_config(const RowGatherConfig& c, const Device& device) {
  require_num_threads(c.num_threads, device);
}

RowGatherConfig row_gather_heuristics_config(const RowGatherShape& shape, const Device& target) {
  const cpu::CpuInfo& device = cpu::cpu_info(target);
  RowGatherConfig c;
  const int64_t read = std::max<int64_t>(shape.read_bytes_per_row, 1);
  const int64_t by_size = std::max<int64_t>(kTaskBytes / read, 1);
  const int64_t by_balance =
      std::max<int64_t>(ceil_div(shape.rows, 4 * std::max(device.cores, 1)), 1);
  c.rows_per_task =
      static_cast<int>(std::clamp<int64_t>(std::min(by_size, by_balance), 1, kMaxRowsPerTask));
  // Stream the output unless it is small next to a core's L2, where its consumer finds it: a
  // streamed copy skips the read for ownership of every output line, and a larger output soon
  // goes to the shared last level anyway, contended by the source rows (and on a cloud machine by
  // tenants beside us). The crossover measured between 0.4 and 0.9 MB of output with a 2 MB L2,
  // streaming 1.1-3x faster above it, cache hot or cold (docs/ops/ragged_gather.md).
  c.stream_stores = static_cast<double>(shape.rows) * static_cast<double>(shape.row_bytes) >
                    0.25 * static_cast<double>(device.tile_l2_bytes());
  c.prefetch_rows = kDefaultPrefetchRows;
  return c;
}

std::vector<RowGatherConfig> row_gather_autotuning_configs(const RowGatherShape& shape,
                                                           const Device& target) {
  const RowGatherConfig h = row_gather_heuristics_config(shape, target);
  std::vector<RowGatherConfig> configs = {h};
  std::set<std::tuple<int, int, bool, int>> seen = {h.key()};
  for (const bool stream : {h.stream_stores, !h.stream_stores}) {
    for (const int prefetch : {h.prefetch_rows, 0, 1, 4, 8}) {
      for (const int rows :
           {h.rows_per_task, h.rows_per_task * 4, std::max(h.rows_per_task / 4, 1)}) {
        RowGatherConfig c = h;
        c.stream_stores = stream;
        c.prefetch_rows = prefetch;
        c.rows_per_task = std::clamp(rows, 1, kMaxRowsPerTask);
        if (seen.insert(c.key()).second) configs.push_back(c);
      }
    }
  }
  return configs;
}

}  // namespace tokamax
