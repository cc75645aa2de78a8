// Tests of numpy's Generator reproduced in C++: draws equal to numpy 2.5's (values printed by
// numpy.random.default_rng in Python, for seeds of one and two 32-bit words).
#include "ops/common/numpy_random.h"

#include <catch2/catch.hpp>
#include <vector>

using namespace tokamax;

TEST_CASE("NumpyGenerator draws numpy's doubles and bounded integers", "[numpy_random]") {
  // default_rng(0).random(3)
  NumpyGenerator doubles(0);
  CHECK(doubles.random() == 0x1.461fd79fb3850p-1);
  CHECK(doubles.random() == 0x1.1442f7e20b674p-2);
  CHECK(doubles.random() == 0x1.4fa7b529d9bd0p-5);
  // default_rng(123).integers(0, 5, 10): 32-bit halves, the low one first.
  NumpyGenerator small(123);
  std::vector<int64_t> drawn;
  for (int i = 0; i < 10; ++i) drawn.push_back(small.integers(5));
  CHECK(drawn == std::vector<int64_t>{0, 3, 2, 0, 4, 1, 1, 0, 1, 0});
  // default_rng(2**40 + 7).integers(0, 1000, 5): a seed of two 32-bit words.
  NumpyGenerator wide((uint64_t{1} << 40) + 7);
  drawn.clear();
  for (int i = 0; i < 5; ++i) drawn.push_back(wide.integers(1000));
  CHECK(drawn == std::vector<int64_t>{206, 829, 609, 255, 17});
}

TEST_CASE("numpy_choice_counts is upstream's generate_group_sizes", "[numpy_random]") {
  // np.bincount(default_rng(0).choice(8, (100,), replace=True), minlength=8)
  CHECK(numpy_choice_counts(8, 100, nullptr, 0) ==
        std::vector<int64_t>{15, 4, 12, 13, 16, 17, 13, 10});
  // ... choice(4, (1000,), p=[0.5, 0.25, 0.125, 0.125], replace=True)
  const std::vector<double> p = {0.5, 0.25, 0.125, 0.125};
  CHECK(numpy_choice_counts(4, 1000, &p, 0) == std::vector<int64_t>{473, 260, 142, 125});
  // ... choice(256, (131072,)): the first 8 of upstream's 256-expert catalog shape.
  const std::vector<int64_t> experts = numpy_choice_counts(256, 131072, nullptr, 0);
  CHECK(std::vector<int64_t>(experts.begin(), experts.begin() + 8) ==
        std::vector<int64_t>{531, 507, 504, 519, 495, 533, 501, 534});
}
