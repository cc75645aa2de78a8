// Shared test helper: an op's blocked float64 oracle against the plain loop it replaces
// (OracleMethod, ops/common/f64_dot.h), on index sets that take both of f64_dot_rows' paths.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "ops/common/f64_dot.h"
#include "ops/framework/numerics.h"
#include "ops/framework/op.h"

namespace tokamax::testing {

// The index sets to ask for: every element (dense tiles), a sparse sample (per-point dots), and
// every element of the first rows plus a sparse sample of the rest (both in one call).
inline std::vector<std::vector<int64_t>> oracle_index_sets(int64_t total, int64_t row_length) {
  std::vector<int64_t> all(static_cast<size_t>(total));
  std::iota(all.begin(), all.end(), int64_t{0});
  std::vector<int64_t> sparse = sample_indices(total, std::max<int64_t>(total / 40, 3), 11);
  std::vector<int64_t> mixed;
  const int64_t head = std::min(total, 20 * row_length);
  for (int64_t i = 0; i < head; ++i) mixed.push_back(i);
  for (int64_t i : sparse) {
    if (i >= head) mixed.push_back(i);
  }
  return {all, sparse, mixed};
}

// Blocked and loop oracles agree at every point: values to `rel` of |value| + magnitude (the
// summation orders differ by float64 roundings of the terms, which magnitude bounds; infinities
// exactly) and magnitudes to `rel` of themselves.
inline void check_same_oracle(const OracleSample& blocked, const OracleSample& loop,
                              double rel = 1e-12) {
  REQUIRE(blocked.index == loop.index);
  REQUIRE(blocked.value.size() == loop.value.size());
  REQUIRE(blocked.magnitude.size() == loop.magnitude.size());
  int64_t nonzero = 0;
  for (size_t s = 0; s < loop.value.size(); ++s) {
    const double scale = std::fabs(loop.value[s]) + std::fabs(loop.magnitude[s]);
    if (loop.value[s] != 0.0) ++nonzero;
    CAPTURE(s, loop.index[s], loop.value[s], blocked.value[s], loop.magnitude[s],
            blocked.magnitude[s]);
    if (!std::isfinite(loop.value[s])) {
      REQUIRE(blocked.value[s] == loop.value[s]);  // lse of a row without keys: -inf in both
    } else {
      REQUIRE(std::fabs(blocked.value[s] - loop.value[s]) <= rel * scale);
    }
    REQUIRE(std::fabs(blocked.magnitude[s] - loop.magnitude[s]) <=
            rel * std::fabs(loop.magnitude[s]));
  }
  CHECK(nonzero > 0);  // not a vacuous comparison
}

// For each output of `op` and each index set: `oracle(output, index, method)` by both methods.
using OracleFn =
    std::function<OracleSample(const std::string&, std::span<const int64_t>, OracleMethod)>;
inline void check_oracle_methods(const Op& op, const BoundArgs& args, const OracleFn& oracle) {
  for (const TensorDecl& decl : op.outputs(args)) {
    const std::vector<int64_t>& dims = decl.spec.dims;
    const int64_t row = dims.empty() ? 1 : dims.back();
    for (const std::vector<int64_t>& index :
         oracle_index_sets(decl.spec.num_elements(), std::max<int64_t>(row, 1))) {
      CAPTURE(decl.name, index.size());
      check_same_oracle(oracle(decl.name, index, OracleMethod::kBlocked),
                        oracle(decl.name, index, OracleMethod::kLoop));
    }
  }
}

}  // namespace tokamax::testing
