// The config of the CPU row selection (row_select.h), shared by the selection ops' "cpu"
// implementations: its invariants, heuristics and search space.
//
// Dimensions.
//   b, n, k   as in row_select.h
#pragma once

#include <cstdint>
#include <tuple>
#include <vector>

#include "backends/device.h"
#include "ops/framework/config.h"

namespace tokamax {

struct RowSelectConfig {
  // Rows per task; tasks are handed out dynamically.
  int rows_per_task = 1;
  int num_threads = 0;  // 0 = all cores
  // How a row is selected. false: threshold select (the lanes' running maxima bound the k-th
  // largest from below; the few scores above the bound are ranked: cheap for small k). true:
  // radix select (a histogram of the keys' high bits finds the bin of the k-th largest; only that
  // bin's scores are ranked further; then one sort of the k selected: cheap for large k, where
  // lane maxima bound the k-th largest loosely).
  bool radix_select = false;

  void validate() const;
  template <class V>
  void visit(V&& v) {
    v("rows_per_task", rows_per_task);
    v("num_threads", num_threads);
    v("radix_select", radix_select);
  }
  auto key() const { return std::make_tuple(rows_per_task, num_threads, radix_select); }
};

void check_row_select_config(const RowSelectConfig& c, const Device& device);
// For b rows of n scores, k selected from each. `device` may be another machine (cross-tuning):
// only its cores are used.
RowSelectConfig row_select_heuristics_config(int64_t b, int64_t n, int64_t k, const Device& device);
std::vector<RowSelectConfig> row_select_autotuning_configs(int64_t b, int64_t n, int64_t k,
                                                           const Device& device);

}  // namespace tokamax
