// The bench report's fields and its two printers.
#include "cli/report/bench_report.h"

#include <algorithm>
#include <cmath>

namespace tokamax::cli {
namespace {

using nlohmann::json;

json finite_or_null(double value) { return std::isfinite(value) ? json(value) : json(); }

// "noisy", "drift +6.1%", both, or "-".
std::string flags(const BenchStats& s) {
  std::string out;
  if (s.noisy) out = "noisy";
  if (s.drift.drifted) {
    out += (out.empty() ? "" : ", ") + std::string("drift ") + (s.drift.change >= 0 ? "+" : "") +
           format_number(100 * s.drift.change, 1) + "%";
  }
  return out.empty() ? "-" : out;
}

// A table cell that only means something when the benchmark completed.
std::function<std::string(const BenchResult&)> if_ok(
    std::function<std::string(const BenchResult&)> text) {
  return [text = std::move(text)](const BenchResult& r) { return r.stats.ok ? text(r) : "-"; };
}

std::string percent(double fraction) {
  return std::isfinite(fraction) ? format_number(100.0 * fraction, 1) + "%" : "-";
}

// "1.04x", or with rounds the median and the range of the per-round ratios: "1.04x (0.98-1.10)".
std::string vs_vendor(const BenchResult& r) {
  if (!std::isfinite(r.vs_best_vendor)) return "-";
  std::string text = format_number(r.vs_best_vendor, 2) + "x";
  if (r.vs_best_vendor_rounds.size() > 1) {
    const auto [low, high] =
        std::minmax_element(r.vs_best_vendor_rounds.begin(), r.vs_best_vendor_rounds.end());
    text += " (" + format_number(*low, 2) + "-" + format_number(*high, 2) + ")";
  }
  return text;
}

}  // namespace

std::vector<BenchField> bench_fields(NoiseEstimator estimator) {
  using R = const BenchResult&;
  const std::string noise_header = "noise (" + std::string(estimator_name(estimator)) + ")";
  return {
      {"op", "op", false, [](R r) { return r.op; }, [](R r) { return json(r.op); }},
      {"spec", "spec", false, [](R r) { return r.spec; }, [](R r) { return json(r.spec); }},
      {"impl", "impl", false, [](R r) { return r.impl; }, [](R r) { return json(r.impl); }},
      {"dtype", "dtype", false, [](R r) { return r.dtype; }, [](R r) { return json(r.dtype); }},
      {"median", "median_s", true, if_ok([](R r) { return format_duration(r.stats.median_s); }),
       [](R r) { return json(r.stats.median_s); }, 10},
      {"min", "min_s", true, if_ok([](R r) { return format_duration(r.stats.min_s); }),
       [](R r) { return json(r.stats.min_s); }, 10},
      {"max", "max_s", true, if_ok([](R r) { return format_duration(r.stats.max_s); }),
       [](R r) { return json(r.stats.max_s); }, 10},
      {"samples", "num_samples", true,
       if_ok([](R r) { return std::to_string(r.stats.samples_s.size()); }),
       [](R r) { return json(r.stats.samples_s.size()); }, 7},
      {noise_header, "noise", true, if_ok([](R r) { return percent(r.stats.noise); }),
       [](R r) { return finite_or_null(r.stats.noise); }, 7},
      {"GFLOP/s", "gflops", true, if_ok([](R r) { return format_number(r.stats.gflops, 2); }),
       [](R r) { return json(r.stats.gflops); }, 8},
      {"GB/s", "gbps", true, if_ok([](R r) { return format_number(r.stats.gbps, 2); }),
       [](R r) { return json(r.stats.gbps); }, 6},
      {"roofline", "roofline_fraction", true, [](R r) { return percent(r.roofline_fraction); },
       [](R r) { return finite_or_null(r.roofline_fraction); }, 8},
      {"vs vendor", "vs_best_vendor", true, [](R r) { return vs_vendor(r); },
       [](R r) { return finite_or_null(r.vs_best_vendor); }, 17},
      {"flags", "", false, if_ok([](R r) { return flags(r.stats); }), nullptr, 5},
      {"source", "config_source", false, [](R r) { return r.config_source; },
       [](R r) { return json(r.config_source); }, 10},
      {"config", "config", false,
       [](R r) { return r.stats.ok ? r.config.dump() : "failed: " + r.stats.error; },
       [](R r) { return r.config; }},
      // JSON only.
      {"", "name", false, nullptr, [](R r) { return json(r.stats.name); }},
      {"", "args", false, nullptr, [](R r) { return r.args; }},
      {"", "backend", false, nullptr, [](R r) { return r.backend; }},
      {"", "flops", false, nullptr, [](R r) { return json(r.flops); }},
      {"", "bytes", false, nullptr, [](R r) { return json(r.bytes); }},
      {"", "ok", false, nullptr, [](R r) { return json(r.stats.ok); }},
      {"", "failure", false, nullptr, [](R r) { return json(r.failure); }},
      {"", "error", false, nullptr, [](R r) { return json(r.stats.error); }},
      {"", "cv", false, nullptr, [](R r) { return json(r.stats.cv); }},
      {"", "iqr_s", false, nullptr, [](R r) { return json(r.stats.iqr_s); }},
      {"", "samples_s", false, nullptr, [](R r) { return json(r.stats.samples_s); }},
      {"", "iterations_per_sample", false, nullptr, [](R r) { return json(r.stats.iterations); }},
      {"", "noise_estimator", false, nullptr,
       [](R r) { return json(estimator_name(r.estimator)); }},
      {"", "median_uncertainty", false, nullptr,
       [](R r) { return finite_or_null(median_uncertainty(r.stats.samples_s)); }},
      {"", "noisy", false, nullptr, [](R r) { return json(r.stats.noisy); }},
      {"", "stop_reason", false, nullptr,
       [](R r) { return json(stop_reason_name(r.stats.stop_reason)); }},
      {"", "sampling_s", false, nullptr, [](R r) { return json(r.stats.elapsed_s); }},
      {"", "cache_mode", false, nullptr, [](R r) { return json(cache_mode_name(r.cache_mode)); }},
      {"", "cache_copies", false, nullptr, [](R r) { return json(r.stats.cache_copies); }},
      {"", "footprint_bytes", false, nullptr, [](R r) { return json(r.footprint_bytes); }},
      {"", "drift", false, nullptr,
       [](R r) {
         return json{{"probe_before_s", r.stats.drift.before_s},
                     {"probe_after_s", r.stats.drift.after_s},
                     {"change", r.stats.drift.change},
                     {"drifted", r.stats.drift.drifted}};
       }},
      {"", "drifted", false, nullptr, [](R r) { return json(r.stats.drift.drifted); }},
      {"", "roofline_gflops", false, nullptr, [](R r) { return json(r.roofline_gflops); }},
      {"", "roofline_bandwidth_gbps", false, nullptr,
       [](R r) { return json(r.roofline_bandwidth_gbps); }},
      {"", "bandwidth_probe", false, nullptr,
       [](R r) {
         const BandwidthProbe& b = r.stats.bandwidth;
         return b.probed() ? json{{"before_gbps", b.before_gbps}, {"after_gbps", b.after_gbps}}
                           : json();
       }},
      {"", "vendor", false, nullptr, [](R r) { return json(r.vendor); }},
      {"", "best_vendor_gflops", false, nullptr, [](R r) { return json(r.best_vendor_gflops); }},
      {"", "vs_best_vendor_rounds", false, nullptr,
       [](R r) {
         json ratios = json::array();
         for (double ratio : r.vs_best_vendor_rounds) ratios.push_back(finite_or_null(ratio));
         return ratios;
       }},
      {"", "round_medians_s", false, nullptr, [](R r) { return json(r.stats.round_medians_s); }},
  };
}

namespace {

// The fields the table shows, in order.
std::vector<BenchField> shown_fields(NoiseEstimator estimator) {
  std::vector<BenchField> shown;
  for (BenchField& field : bench_fields(estimator)) {
    if (!field.header.empty()) shown.push_back(std::move(field));
  }
  return shown;
}

}  // namespace

Table bench_table_header(NoiseEstimator estimator) {
  std::vector<std::string> header;
  std::vector<size_t> right;
  for (const BenchField& field : shown_fields(estimator)) {
    if (field.number) right.push_back(header.size());
    header.push_back(field.header);
  }
  Table table(header);
  table.set_right_aligned(right);
  return table;
}

std::vector<std::string> bench_row(const BenchResult& result, NoiseEstimator estimator) {
  const std::vector<BenchField> columns = shown_fields(estimator);
  // The case's own columns name it even when it did not run.
  constexpr size_t kIdentity = 4;  // op, spec, impl, dtype
  std::vector<std::string> row;
  for (size_t c = 0; c < columns.size(); ++c) {
    if (result.ran() || c < kIdentity) {
      row.push_back(columns[c].text(result));
    } else {
      row.push_back(c + 1 == columns.size() ? "unsupported: " + result.unsupported : "-");
    }
  }
  return row;
}

std::vector<size_t> bench_width_hints(NoiseEstimator estimator,
                                      const std::vector<size_t>& identity) {
  std::vector<size_t> hints;
  for (const BenchField& field : shown_fields(estimator)) {
    hints.push_back(hints.size() < identity.size() ? identity[hints.size()] : field.width);
  }
  return hints;
}

Table bench_table(const std::vector<BenchResult>& results, NoiseEstimator estimator) {
  Table table = bench_table_header(estimator);
  for (const BenchResult& result : results) table.add_row(bench_row(result, estimator));
  return table;
}

nlohmann::json bench_records(const std::vector<BenchResult>& results) {
  const std::vector<BenchField> fields = bench_fields(NoiseEstimator::kIqrMedian);
  json records = json::array();
  for (const BenchResult& result : results) {
    if (!result.ran()) continue;
    json record = json::object();
    for (const BenchField& field : fields) {
      if (!field.json_key.empty()) record[field.json_key] = field.json(result);
    }
    records.push_back(std::move(record));
  }
  return records;
}

std::vector<OtherDeviceRun> other_device_runs(const std::vector<BenchResult>& results) {
  std::vector<OtherDeviceRun> runs;
  for (const BenchResult& r : results) {
    if (r.other_device) runs.push_back({r.op, r.impl, r.unsupported});
  }
  return runs;
}

}  // namespace tokamax::cli
