// Compares two saved `bench --json` runs case by case: medians, run noise, Mann-Whitney U test.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tokamax {

// --- Statistics (pure functions). --------------------------------------------------------------

// Two-sided Mann-Whitney U test of x against y (scipy.stats.mannwhitneyu's conventions).
struct MannWhitney {
  double u = 0;        // U of x: pairs (x_i, y_j) with x_i > y_j, a tie counting 1/2
  double z = 0;        // normal approximation, tie- and continuity-corrected; > 0 when x is larger
  double p = 1;        // two-sided p-value: exact when `exact`, else from z
  bool exact = false;  // no ties and both samples <= kMaxExactSamples: exact distribution of U
};
inline constexpr size_t kMaxExactSamples = 20;  // C(40, 20) counts are still exact in a double
// Throws InvalidArgument when x or y is empty.
MannWhitney mann_whitney_u(const std::vector<double>& x, const std::vector<double>& y);

// (Medians and quartiles: quantile / median of cli/toolkit/measurement/measurement.h.)
// Relative noise of one run: interquartile range / median (0 for a single sample).
double relative_iqr(const std::vector<double>& values);

// --threshold: "5%" is a percentage, "0.05" a fraction; a bare number >= 1 ("5") is ambiguous and
// rejected. Throws InvalidArgument naming the text.
double parse_threshold(const std::string& text);

// --- Verdicts. ---------------------------------------------------------------------------------

enum class Verdict { kSame, kFaster, kSlower };
std::string_view verdict_name(Verdict verdict);  // "SAME", "FASTER", "SLOWER"

struct CompareOptions {
  double threshold = 0.05;      // smallest relative change of the median that counts
  double alpha = 0.05;          // significance level of the Mann-Whitney U test
  size_t min_test_samples = 4;  // per side; fewer: the noise rule alone decides
};

struct CaseComparison {
  std::string name;  // "<op>/<spec>/<impl>"
  std::vector<double> old_samples_s, new_samples_s;
  double old_median_s = 0, new_median_s = 0;
  double change = 0;                // new median / old median - 1 (> 0: slower)
  double noise = 0;                 // max(relative_iqr(old), relative_iqr(new))
  std::optional<MannWhitney> test;  // of new against old; absent with too few samples
  Verdict verdict = Verdict::kSame;
  std::string reason;  // why this verdict, in words
};

// The rule: a case is FASTER or SLOWER only when |change| exceeds both the threshold and the
// noise, and, where both runs have min_test_samples, the U test rejects equality at alpha.
CaseComparison compare_case(const std::string& name, const std::vector<double>& old_samples_s,
                            const std::vector<double>& new_samples_s,
                            const CompareOptions& options);

// --- Runs. -------------------------------------------------------------------------------------

// One saved run: per case, the seconds of each repetition, in file order.
using BenchSamples = std::vector<std::pair<std::string, std::vector<double>>>;

// Reads a `bench --json` file: Google Benchmark's `run_type: "iteration"` entries (real_time in
// time_unit; failed ones skipped), else our `tokamax.cases[].samples_s`. Missing file, bad JSON
// or no samples at all: InputError naming the file.
BenchSamples load_bench_samples(const std::string& path);
// The same, from the file's text; `path` names it in errors.
BenchSamples parse_bench_samples(std::string_view text, const std::string& path);

struct CompareReport {
  CompareOptions options;
  std::vector<CaseComparison> cases;  // in the old run's order
  std::vector<std::string> only_in_old, only_in_new;
  int count(Verdict verdict) const;
};
CompareReport compare_runs(const BenchSamples& old_run, const BenchSamples& new_run,
                           const CompareOptions& options);

// {"schema_version": 1, "kind": "tokamax-bench-compare", "threshold", "alpha",
//  "min_test_samples", "summary", "cases": [...], "only_in_old", "only_in_new"}.
nlohmann::json to_json(const CompareReport& report);

// `--compare`'s output: a markdown table for a CI comment, then the verdict counts and the cases
// only one run has.
void print_comparison(std::ostream& out, const CompareReport& report, const std::string& old_path,
                      const std::string& new_path);

}  // namespace tokamax
