// The config of the CPU row gathers (row_gather.h), shared by the gather ops' "cpu"
// implementations: its invariants, heuristics and search space.
//
// Dimensions.
//   rows   output rows of the launch (gathered rows, or tokens of a reduce)
#pragma once

#include <cstdint>
#include <tuple>
#include <vector>

#include "backends/device.h"
#include "ops/framework/config.h"

namespace tokamax {

struct RowGatherConfig {
  // Output rows per task; tasks are handed out dynamically.
  int rows_per_task = 1;
  int num_threads = 0;  // 0 = all cores
  // Non-temporal stores of the output (where its rows are 64-byte aligned): no read for
  // ownership of lines that are overwritten whole, a third less traffic once the output does
  // not stay in cache anyway.
  bool stream_stores = false;
  // Output rows ahead whose source rows are prefetched into L2 (0: the hardware prefetchers
  // alone). Gathered rows sit at scattered addresses, where those start late on every row.
  int prefetch_rows = 0;

  void validate() const;
  template <class V>
  void visit(V&& v) {
    v("rows_per_task", rows_per_task);
    v("num_threads", num_threads);
    v("stream_stores", stream_stores);
    v("prefetch_rows", prefetch_rows);
  }
  auto key() const {
    return std::make_tuple(rows_per_task, num_threads, stream_stores, prefetch_rows);
  }
};

// What a launch moves, for its heuristics: `rows` output rows, each reading `read_bytes_per_row`
// of scattered source rows and writing `row_bytes`.
struct RowGatherShape {
  int64_t rows = 0;
  int64_t read_bytes_per_row = 0;
  int64_t row_bytes = 0;
};

void check_row_gather_config(const RowGatherConfig& c, const Device& device);
// `device` may be another machine (cross-tuning): only its cores and cache are used.
RowGatherConfig row_gather_heuristics_config(const RowGatherShape& shape, const Device& device);
std::vector<RowGatherConfig> row_gather_autotuning_configs(const RowGatherShape& shape,
                                                           const Device& device);

}  // namespace tokamax
