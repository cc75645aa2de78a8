// The bench report: each benchmark as a row of named values (one BenchField per value), rendered
// by a table printer and a JSON printer. A new column is one entry of bench_fields().
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/report/bench_result.h"
#include "cli/report/other_device.h"
#include "cli/report/table.h"

namespace tokamax::cli {

struct BenchField {
  std::string header;    // table column ("" = JSON only)
  std::string json_key;  // key of the JSON record ("" = table only)
  bool number = false;   // right-aligned in the table
  // The table cell of a benchmark that ran; unsupported rows print "-" but in the last column.
  std::function<std::string(const BenchResult&)> text;
  // The JSON value (results that ran only: unsupported ones have no record).
  std::function<nlohmann::json(const BenchResult&)> json;
  // The table column's usual width: what a table printed row by row reserves for it.
  size_t width = 0;
};

// Every value of the report, in table then record order. `estimator` names the noise column.
std::vector<BenchField> bench_fields(NoiseEstimator estimator);

// The table: one row per result, in order; an unsupported one says why in its last column.
Table bench_table(const std::vector<BenchResult>& results, NoiseEstimator estimator);
// The same table's header alone, and one result's row: for printing rows as cases finish.
Table bench_table_header(NoiseEstimator estimator);
std::vector<std::string> bench_row(const BenchResult& result, NoiseEstimator estimator);
// Widths that fit the usual values of each column of the table (the identity columns: the
// longest of `identity` = {op, spec, impl, dtype} lengths given).
std::vector<size_t> bench_width_hints(NoiseEstimator estimator,
                                      const std::vector<size_t>& identity);

// The results that are implementations for another kind of device (other_device_notes).
std::vector<OtherDeviceRun> other_device_runs(const std::vector<BenchResult>& results);

// tokamax.cases of `bench --json`: one record per result that ran.
nlohmann::json bench_records(const std::vector<BenchResult>& results);

}  // namespace tokamax::cli
