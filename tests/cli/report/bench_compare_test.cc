// Tests of `bench --compare`'s logic: U test on reference values, the verdict rule, JSON loading.
#include "cli/report/bench_compare.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/test_util.h"
#include "ops/framework/errors.h"

namespace tokamax {
namespace {

using Catch::Matchers::Contains;
using testing::ScratchDir;
using testing::write_file;

// Reference values: scipy.stats.mannwhitneyu(x, y) (two-sided, use_continuity=True). Without
// scipy at hand they were recomputed with the Python stdlib following scipy's formulas (exact:
// enumerate all C(n1+n2, n1) rank sets; asymptotic: z = (max(U1,U2) - n1*n2/2 - 0.5) / sigma with
// the tie-corrected sigma, p = erfc(z / sqrt(2))). The first case is the example of scipy's
// documentation, whose printed values (U=17, exact p=0.1111111111111111, asymptotic
// p=0.11134688653314041) the script reproduces.
TEST_CASE("mann_whitney_u matches reference values", "[bench_compare]") {
  SECTION("scipy documentation example (no ties, exact)") {
    const MannWhitney r = mann_whitney_u({19, 22, 16, 29, 24}, {20, 11, 17, 12});
    CHECK(r.u == 17);
    CHECK(r.exact);
    CHECK(r.p == Approx(0.1111111111111111).epsilon(1e-12));
    CHECK(r.z == Approx(1.5921683328090657).epsilon(1e-12));
  }
  SECTION("complete separation: 2 / C(8, 4)") {
    const MannWhitney r = mann_whitney_u({1, 2, 3, 4}, {5, 6, 7, 8});
    CHECK(r.u == 0);
    CHECK(r.p == Approx(2.0 / 70).epsilon(1e-12));
    CHECK(r.z == Approx(-2.165063509461097).epsilon(1e-12));  // x smaller: negative
  }
  SECTION("10 against 10, exact") {
    std::vector<double> x, y;
    for (int i = 1; i <= 10; ++i) x.push_back(i);
    for (int i = 3; i <= 12; ++i) y.push_back(i + 0.5);
    const MannWhitney r = mann_whitney_u(x, y);
    CHECK(r.u == 28);
    CHECK(r.exact);
    CHECK(r.p == Approx(0.10512243174781874).epsilon(1e-12));
  }
  SECTION("ties: normal approximation with tie correction") {
    const MannWhitney r = mann_whitney_u({1, 2, 2, 3, 3, 3, 4}, {2, 3, 4, 4, 5, 5, 6});
    CHECK(r.u == 8.5);
    CHECK_FALSE(r.exact);
    CHECK(r.z == Approx(-2.023210663587198).epsilon(1e-12));
    CHECK(r.p == Approx(0.04305143272894518).epsilon(1e-12));
  }
  SECTION("identical samples: p = 1") {
    const MannWhitney r = mann_whitney_u({1, 1, 1, 1}, {1, 1, 1, 1});
    CHECK(r.u == 8);
    CHECK(r.z == 0);
    CHECK(r.p == 1);
  }
  CHECK_THROWS_AS(mann_whitney_u({}, {1.0}), InvalidArgument);
}

TEST_CASE("relative IQR and --threshold parsing", "[bench_compare]") {
  CHECK(relative_iqr({0.8, 0.9, 1.0, 1.1, 1.2}) == Approx(0.2));
  CHECK(relative_iqr({5}) == 0);
  CHECK(parse_threshold("5%") == Approx(0.05));
  CHECK(parse_threshold("0.05") == Approx(0.05));
  CHECK(parse_threshold("2.5%") == Approx(0.025));
  CHECK_THROWS_WITH(parse_threshold("5"), Contains("ambiguous") && Contains("5%"));
  CHECK_THROWS_AS(parse_threshold("fast"), InvalidArgument);
  CHECK_THROWS_AS(parse_threshold("-1%"), InvalidArgument);
  CHECK_THROWS_AS(parse_threshold("%"), InvalidArgument);
}

const std::vector<double> kBase = {1.00, 1.01, 0.99, 1.005, 1.02};  // distinct: exact test

std::vector<double> scaled(const std::vector<double>& v, double factor) {
  std::vector<double> out;
  for (double x : v) out.push_back(x * factor);
  return out;
}

TEST_CASE("verdict rule", "[bench_compare]") {
  const CompareOptions options;  // 5%, alpha 0.05, >= 4 samples for the test
  SECTION("identical runs are SAME") {
    const CaseComparison c = compare_case("a", kBase, kBase, options);
    CHECK(c.verdict == Verdict::kSame);
    CHECK(c.change == 0);
    REQUIRE(c.test);
    CHECK(c.test->p == 1);
  }
  SECTION("clearly slower is SLOWER, clearly faster FASTER") {
    const CaseComparison slow = compare_case("a", kBase, scaled(kBase, 1.2), options);
    CHECK(slow.verdict == Verdict::kSlower);
    CHECK(slow.change == Approx(0.2));
    CHECK(slow.test->p == Approx(2.0 / 252));  // complete separation, 5 against 5
    const CaseComparison fast = compare_case("a", kBase, scaled(kBase, 0.8), options);
    CHECK(fast.verdict == Verdict::kFaster);
    CHECK(fast.change == Approx(-0.2));
  }
  SECTION("a change below the threshold is SAME") {
    CHECK(compare_case("a", kBase, scaled(kBase, 1.03), options).verdict == Verdict::kSame);
  }
  SECTION("a change above the threshold but within the runs' noise is SAME") {
    const std::vector<double> noisy = {1.0, 0.8, 1.2, 0.9, 1.1};  // IQR / median = 20%
    const CaseComparison c = compare_case("a", noisy, scaled(noisy, 1.1), options);
    CHECK(c.noise == Approx(0.2));
    CHECK(c.verdict == Verdict::kSame);
    CHECK_THAT(c.reason, Contains("noise"));
  }
  SECTION("outside threshold and noise but not significant is SAME") {
    // Medians differ by 10%, IQRs are small, but the samples interleave: p is large.
    const std::vector<double> old_run = {1.0, 1.01, 1.02, 1.5, 0.5};
    const std::vector<double> new_run = {1.1, 1.11, 1.12, 0.6, 1.6};
    const CaseComparison c = compare_case("a", old_run, new_run, options);
    CHECK(c.change == Approx(1.11 / 1.01 - 1));
    CHECK(c.noise < 0.03);
    CHECK(c.test->u == 18);
    CHECK(c.test->p == Approx(0.30952380952380953).epsilon(1e-12));  // same reference script
    CHECK(c.verdict == Verdict::kSame);
    CHECK_THAT(c.reason, Contains("not significant"));
  }
  SECTION("too few samples: the noise rule alone decides, and says so") {
    const CaseComparison c = compare_case("a", {1.0, 1.01}, {1.2, 1.21}, options);
    CHECK_FALSE(c.test);
    CHECK(c.verdict == Verdict::kSlower);
    CHECK_THAT(c.reason, Contains("noise rule only"));
  }
}

TEST_CASE("compare_runs lists cases present in one run only", "[bench_compare]") {
  const BenchSamples old_run = {{"op/a/cpu", kBase}, {"op/gone/cpu", kBase}};
  const BenchSamples new_run = {{"op/new/cpu", kBase}, {"op/a/cpu", scaled(kBase, 1.5)}};
  const CompareReport report = compare_runs(old_run, new_run, CompareOptions{});
  REQUIRE(report.cases.size() == 1);
  CHECK(report.cases[0].verdict == Verdict::kSlower);
  CHECK(report.only_in_old == std::vector<std::string>{"op/gone/cpu"});
  CHECK(report.only_in_new == std::vector<std::string>{"op/new/cpu"});
  const nlohmann::json j = to_json(report);
  CHECK(j["schema_version"] == 1);
  CHECK(j["threshold"] == 0.05);
  CHECK(j["summary"]["slower"] == 1);
  CHECK(j["cases"][0]["verdict"] == "SLOWER");
  CHECK(j["cases"][0]["test"] == "exact");
  CHECK(j["only_in_new"][0] == "op/new/cpu");
}

TEST_CASE("load_bench_samples reads iterations, the tokamax fallback, and rejects bad files",
          "[bench_compare]") {
  ScratchDir dir;
  const nlohmann::json doc = {
      {"benchmarks",
       {{{"name", "op/a/cpu"},
         {"run_name", "op/a/cpu"},
         {"run_type", "iteration"},
         {"real_time", 1500.0},
         {"time_unit", "us"}},
        {{"name", "op/a/cpu"},
         {"run_name", "op/a/cpu"},
         {"run_type", "iteration"},
         {"real_time", 2.0},
         {"time_unit", "ms"}},
        {{"name", "op/a/cpu_median"},
         {"run_name", "op/a/cpu"},
         {"run_type", "aggregate"},
         {"aggregate_name", "median"},
         {"real_time", 1750.0},
         {"time_unit", "us"}},
        {{"name", "op/bad/cpu"},
         {"run_type", "iteration"},
         {"error_occurred", true},
         {"real_time", 0.0},
         {"time_unit", "us"}}}},
      {"tokamax",
       {{"cases",
         {{{"name", "op/a/cpu"}, {"ok", true}, {"samples_s", {9.0}}},
          {{"name", "op/b/cpu"}, {"ok", true}, {"samples_s", {0.25, 0.5}}}}}}}};
  write_file(dir.file("run.json"), doc.dump());
  const BenchSamples run = load_bench_samples(dir.file("run.json"));
  REQUIRE(run.size() == 2);
  CHECK(run[0].first == "op/a/cpu");
  REQUIRE(run[0].second.size() == 2);  // iterations win over the fallback; aggregates skipped
  CHECK(run[0].second[0] == Approx(1.5e-3));
  CHECK(run[0].second[1] == Approx(2e-3));
  CHECK(run[1] == std::pair<std::string, std::vector<double>>{"op/b/cpu", {0.25, 0.5}});

  CHECK_THROWS_WITH(load_bench_samples(dir.file("missing.json")), Contains("missing.json"));
  write_file(dir.file("corrupt.json"), "{\"benchmarks\": [");
  CHECK_THROWS_AS(load_bench_samples(dir.file("corrupt.json")), InputError);
  write_file(dir.file("empty.json"), "{\"benchmarks\": []}");
  CHECK_THROWS_WITH(load_bench_samples(dir.file("empty.json")),
                    Contains("empty.json") && Contains("no benchmark samples"));
  write_file(dir.file("types.json"), R"({"benchmarks": [{"name": "x", "real_time": "fast"}]})");
  CHECK_THROWS_WITH(load_bench_samples(dir.file("types.json")), Contains("types.json"));
  write_file(dir.file("negative.json"),
             R"({"tokamax": {"cases": [{"name": "x", "samples_s": [-1]}]}})");
  CHECK_THROWS_WITH(load_bench_samples(dir.file("negative.json")),
                    Contains("negative.json") && Contains("'x'"));
}

}  // namespace
}  // namespace tokamax
