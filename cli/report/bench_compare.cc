// Compares two saved `bench --json` runs case by case: medians, run noise, Mann-Whitney U test.
#include "cli/report/bench_compare.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include "cli/report/table.h"
#include "ops/framework/errors.h"
#include "ops/framework/input_file.h"
#include "cli/toolkit/measurement/measurement.h"

namespace tokamax {

// --- Statistics. -------------------------------------------------------------------------------

double relative_iqr(const std::vector<double>& values) {
  const double mid = median(values);
  return mid > 0 ? (quantile(values, 0.75) - quantile(values, 0.25)) / mid : 0.0;
}

namespace {

// P(U <= u) under the null for samples of n1 and n2 distinct values. The counts of U are the
// coefficients of the Gaussian binomial prod_{i=1..n1} (1 - q^(n2+i)) / (1 - q^i).
double exact_cdf(size_t n1, size_t n2, double u) {
  const size_t top = n1 * n2;
  std::vector<double> counts(top + 1, 0.0);
  counts[0] = 1.0;
  for (size_t i = 1; i <= n1; ++i) {
    for (size_t k = top; k >= n2 + i && k <= top; --k) counts[k] -= counts[k - (n2 + i)];
    for (size_t k = i; k <= top; ++k) counts[k] += counts[k - i];
  }
  double total = 0, below = 0;
  for (size_t k = 0; k <= top; ++k) {
    total += counts[k];
    if (static_cast<double>(k) <= u) below += counts[k];
  }
  return below / total;
}

}  // namespace

MannWhitney mann_whitney_u(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.empty() || y.empty())
    throw InvalidArgument("mann_whitney_u: both samples must be non-empty");
  const size_t n1 = x.size(), n2 = y.size(), n = n1 + n2;
  // Midranks of the pooled sample; tie groups feed the variance correction.
  std::vector<std::pair<double, size_t>> pooled;  // (value, index; < n1 means x)
  for (size_t i = 0; i < n1; ++i) pooled.emplace_back(x[i], i);
  for (size_t j = 0; j < n2; ++j) pooled.emplace_back(y[j], n1 + j);
  std::sort(pooled.begin(), pooled.end());
  double rank_sum_x = 0, tie_term = 0;
  for (size_t start = 0; start < n;) {
    size_t end = start;
    while (end < n && pooled[end].first == pooled[start].first) ++end;
    const double t = static_cast<double>(end - start);
    const double midrank = (static_cast<double>(start + 1) + static_cast<double>(end)) / 2;
    for (size_t k = start; k < end; ++k) {
      if (pooled[k].second < n1) rank_sum_x += midrank;
    }
    tie_term += t * t * t - t;
    start = end;
  }
  MannWhitney result;
  const double d1 = static_cast<double>(n1), d2 = static_cast<double>(n2);
  const double dn = static_cast<double>(n);
  result.u = rank_sum_x - d1 * (d1 + 1) / 2;
  const double mean = d1 * d2 / 2;
  const double variance = d1 * d2 / 12 * ((dn + 1) - (n > 1 ? tie_term / (dn * (dn - 1)) : 0.0));
  const double distance = std::max(std::abs(result.u - mean) - 0.5, 0.0);  // continuity
  if (variance > 0) result.z = std::copysign(distance / std::sqrt(variance), result.u - mean);
  result.p = std::min(1.0, std::erfc(std::abs(result.z) / std::sqrt(2.0)));
  result.exact = tie_term == 0 && n1 <= kMaxExactSamples && n2 <= kMaxExactSamples;
  if (result.exact) {
    const double lower = std::min(result.u, d1 * d2 - result.u);
    result.p = std::min(1.0, 2 * exact_cdf(n1, n2, lower));
  }
  return result;
}

double parse_threshold(const std::string& text) { return parse_fraction(text, "--threshold"); }

// --- Verdicts. ---------------------------------------------------------------------------------

std::string_view verdict_name(Verdict verdict) {
  switch (verdict) {
    case Verdict::kFaster:
      return "FASTER";
    case Verdict::kSlower:
      return "SLOWER";
    default:
      return "SAME";
  }
}

CaseComparison compare_case(const std::string& name, const std::vector<double>& old_samples_s,
                            const std::vector<double>& new_samples_s,
                            const CompareOptions& options) {
  if (old_samples_s.empty() || new_samples_s.empty()) {
    throw InvalidArgument("compare_case: '" + name + "' has no samples in one of the runs");
  }
  CaseComparison c;
  c.name = name;
  c.old_samples_s = old_samples_s;
  c.new_samples_s = new_samples_s;
  c.old_median_s = median(old_samples_s);
  c.new_median_s = median(new_samples_s);
  c.change = c.old_median_s > 0 ? c.new_median_s / c.old_median_s - 1 : 0.0;
  c.noise = std::max(relative_iqr(old_samples_s), relative_iqr(new_samples_s));
  const bool testable = old_samples_s.size() >= options.min_test_samples &&
                        new_samples_s.size() >= options.min_test_samples;
  if (testable) c.test = mann_whitney_u(new_samples_s, old_samples_s);
  const Verdict direction = c.change > 0 ? Verdict::kSlower : Verdict::kFaster;
  if (std::abs(c.change) <= options.threshold) {
    c.reason = "change within threshold";
  } else if (std::abs(c.change) <= c.noise) {
    c.reason = "change within run noise";
  } else if (!testable) {
    c.verdict = direction;
    c.reason = "fewer than " + std::to_string(options.min_test_samples) +
               " samples per run: noise rule only";
  } else if (c.test->p >= options.alpha) {
    c.reason = "not significant (U test)";
  } else {
    c.verdict = direction;
    c.reason = "significant (U test)";
  }
  return c;
}

// --- Runs. -------------------------------------------------------------------------------------

namespace {

double unit_seconds(const std::string& path, const std::string& unit) {
  static const std::map<std::string, double> kUnits = {
      {"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1.0}};
  const auto it = kUnits.find(unit);
  if (it == kUnits.end()) throw InputError(path, 0, 0, "unknown time_unit '" + unit + "'");
  return it->second;
}

// Appends a sample to `name`, keeping first-appearance order.
void add_sample(const std::string& path, BenchSamples& run, std::map<std::string, size_t>& index,
                const std::string& name, double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) {
    throw InputError(path, 0, 0,
                     "case '" + name + "' has a sample of " + std::to_string(seconds) +
                         " s; times must be >= 0");
  }
  const auto [it, inserted] = index.emplace(name, run.size());
  if (inserted) run.push_back({name, {}});
  run[it->second].second.push_back(seconds);
}

}  // namespace

BenchSamples load_bench_samples(const std::string& path) {
  return parse_bench_samples(read_input_file(path, kMaxJsonInputBytes, "bench JSON file"), path);
}

BenchSamples parse_bench_samples(std::string_view text, const std::string& path) {
  const nlohmann::json doc = parse_json_input(text, path);
  BenchSamples run;
  std::map<std::string, size_t> index;
  try {
    if (!doc.is_object()) throw InputError(path, 0, 0, "not a bench JSON object");
    const nlohmann::json benchmarks = doc.value("benchmarks", nlohmann::json::array());
    for (const nlohmann::json& b : benchmarks) {
      if (b.value("run_type", "iteration") != "iteration" || b.contains("aggregate_name") ||
          b.value("error_occurred", false)) {
        continue;
      }
      const std::string name = b.value("run_name", b.at("name").get<std::string>());
      const double seconds =
          b.at("real_time").get<double>() * unit_seconds(path, b.value("time_unit", "ns"));
      add_sample(path, run, index, name, seconds);
    }
    // Fallback: our own block, for cases without Google Benchmark iteration entries.
    std::set<std::string> from_benchmarks;
    for (const auto& [name, samples] : run) from_benchmarks.insert(name);
    if (doc.contains("tokamax")) {
      for (const nlohmann::json& c : doc.at("tokamax").value("cases", nlohmann::json::array())) {
        const std::string name = c.at("name").get<std::string>();
        if (from_benchmarks.count(name) || !c.value("ok", true)) continue;
        for (const nlohmann::json& s : c.value("samples_s", nlohmann::json::array())) {
          add_sample(path, run, index, name, s.get<double>());
        }
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw InputError(path, 0, 0, std::string("not a bench JSON file: ") + e.what());
  }
  if (run.empty()) {
    throw InputError(path, 0, 0,
                     "no benchmark samples (run_type \"iteration\" entries or "
                     "tokamax.cases[].samples_s)");
  }
  return run;
}

int CompareReport::count(Verdict verdict) const {
  return static_cast<int>(std::count_if(
      cases.begin(), cases.end(), [&](const CaseComparison& c) { return c.verdict == verdict; }));
}

CompareReport compare_runs(const BenchSamples& old_run, const BenchSamples& new_run,
                           const CompareOptions& options) {
  CompareReport report;
  report.options = options;
  std::map<std::string, const std::vector<double>*> new_by_name;
  for (const auto& [name, samples] : new_run) new_by_name[name] = &samples;
  std::set<std::string> old_names;
  for (const auto& [name, samples] : old_run) {
    old_names.insert(name);
    const auto it = new_by_name.find(name);
    if (it == new_by_name.end()) {
      report.only_in_old.push_back(name);
    } else {
      report.cases.push_back(compare_case(name, samples, *it->second, options));
    }
  }
  for (const auto& [name, samples] : new_run) {
    if (!old_names.count(name)) report.only_in_new.push_back(name);
  }
  return report;
}

nlohmann::json to_json(const CompareReport& report) {
  nlohmann::json cases = nlohmann::json::array();
  for (const CaseComparison& c : report.cases) {
    cases.push_back({{"name", c.name},
                     {"old_median_s", c.old_median_s},
                     {"new_median_s", c.new_median_s},
                     {"change", c.change},
                     {"noise", c.noise},
                     {"old_samples_s", c.old_samples_s},
                     {"new_samples_s", c.new_samples_s},
                     {"u", c.test ? nlohmann::json(c.test->u) : nlohmann::json()},
                     {"z", c.test ? nlohmann::json(c.test->z) : nlohmann::json()},
                     {"p_value", c.test ? nlohmann::json(c.test->p) : nlohmann::json()},
                     {"test", c.test ? (c.test->exact ? "exact" : "normal") : "none"},
                     {"verdict", verdict_name(c.verdict)},
                     {"reason", c.reason}});
  }
  return {{"schema_version", 1},
          {"kind", "tokamax-bench-compare"},
          {"threshold", report.options.threshold},
          {"alpha", report.options.alpha},
          {"min_test_samples", report.options.min_test_samples},
          {"noise", "max of the two runs' IQR / median"},
          {"summary",
           {{"same", report.count(Verdict::kSame)},
            {"faster", report.count(Verdict::kFaster)},
            {"slower", report.count(Verdict::kSlower)},
            {"only_in_old", report.only_in_old.size()},
            {"only_in_new", report.only_in_new.size()}}},
          {"cases", cases},
          {"only_in_old", report.only_in_old},
          {"only_in_new", report.only_in_new}};
}

void print_comparison(std::ostream& out, const CompareReport& report, const std::string& old_path,
                      const std::string& new_path) {
  const CompareOptions& o = report.options;
  out << "Comparing `" << old_path << "` (old) with `" << new_path << "` (new): threshold "
      << cli::format_number(100 * o.threshold, 1)
      << "%, noise = larger IQR/median of the two runs, "
      << "Mann-Whitney U test at p < " << o.alpha
      << " where both runs have >= " << o.min_test_samples << " samples.\n\n";
  out << "| case | old median | new median | change | noise | p-value | verdict | reason |\n"
      << "|---|---:|---:|---:|---:|---:|---|---|\n";
  for (const CaseComparison& c : report.cases) {
    const std::string p = !c.test             ? "-"
                          : c.test->p < 0.001 ? "<0.001"
                                              : cli::format_number(c.test->p, 3);
    out << "| " << c.name << " | " << cli::format_duration(c.old_median_s) << " | "
        << cli::format_duration(c.new_median_s) << " | " << (c.change >= 0 ? "+" : "")
        << cli::format_number(100 * c.change, 1) << "% | " << cli::format_number(100 * c.noise, 1)
        << "% | " << p << " | " << verdict_name(c.verdict) << " | " << c.reason << " |\n";
  }
  out << "\n"
      << report.count(Verdict::kSlower) << " slower, " << report.count(Verdict::kFaster)
      << " faster, " << report.count(Verdict::kSame) << " same";
  for (const auto& [label, names] : {std::pair{"only in old", &report.only_in_old},
                                     std::pair{"only in new", &report.only_in_new}}) {
    out << "; " << names->size() << " " << label;
    for (size_t i = 0; i < names->size(); ++i) out << (i ? ", `" : ": `") << (*names)[i] << "`";
  }
  out << "\n";
}

}  // namespace tokamax
