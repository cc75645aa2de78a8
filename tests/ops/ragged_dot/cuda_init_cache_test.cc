// Tests for the cache of initialized CUTLASS GEMMs (ops/ragged_dot/cuda_init_cache.h), on the
// CPU: which launches share an initialization, the eviction order, and that a failure is never
// kept.
#include "ops/ragged_dot/cuda_init_cache.h"

#include <catch2/catch.hpp>
#include <functional>
#include <stdexcept>
#include <vector>

using namespace tokamax;
using namespace tokamax::ragged_cuda;

namespace {

// A stand-in GEMM: records the key it was initialized for.
struct FakeGemm {
  int initialized_for_g = -1;
};

CudaRaggedDotLaunch base_launch() {
  static char workspace[16];
  CudaRaggedDotLaunch l;
  l.G = 8;
  l.M = 128;
  l.K = 64;
  l.N = 256;
  l.workspace = workspace;
  l.raster_along_n = 0;
  l.swizzle = 1;
  l.device = 0;
  l.sm_count = 132;
  return l;
}

}  // namespace

TEST_CASE(
    "ragged_dot cuda: launches that differ only in shapes, operands and stream share one "
    "initialized GEMM",
    "[cuda][ragged_dot]") {
  static int a, b, c;
  static int32_t sizes[8];
  const std::vector<std::function<void(CudaRaggedDotLaunch&)>> same = {
      [](CudaRaggedDotLaunch& l) { l.M = 4096; },
      [](CudaRaggedDotLaunch& l) { l.K = 2048; },
      [](CudaRaggedDotLaunch& l) { l.N = 7168; },
      [](CudaRaggedDotLaunch& l) { l.lhs = &a; },
      [](CudaRaggedDotLaunch& l) { l.rhs = &b; },
      [](CudaRaggedDotLaunch& l) { l.out = &c; },
      [](CudaRaggedDotLaunch& l) { l.group_sizes = sizes; },
      [](CudaRaggedDotLaunch& l) { l.stream = &a; },
  };
  for (size_t i = 0; i < same.size(); ++i) {
    CAPTURE(i);
    CudaRaggedDotLaunch l = base_launch();
    same[i](l);
    CHECK(init_key(l) == init_key(base_launch()));
  }
}

TEST_CASE("ragged_dot cuda: every input of CUTLASS's arguments gets its own initialized GEMM",
          "[cuda][ragged_dot]") {
  static char other_workspace[16];
  const std::vector<std::function<void(CudaRaggedDotLaunch&)>> differ = {
      [](CudaRaggedDotLaunch& l) { l.workspace = other_workspace; },
      [](CudaRaggedDotLaunch& l) { l.G = 9; },
      [](CudaRaggedDotLaunch& l) { l.device = 1; },
      [](CudaRaggedDotLaunch& l) { l.sm_count = 114; },
      [](CudaRaggedDotLaunch& l) { l.raster_along_n = 1; },
      [](CudaRaggedDotLaunch& l) { l.swizzle = 2; },
  };
  for (size_t i = 0; i < differ.size(); ++i) {
    CAPTURE(i);
    CudaRaggedDotLaunch l = base_launch();
    differ[i](l);
    CHECK_FALSE(init_key(l) == init_key(base_launch()));
  }
}

TEST_CASE("ragged_dot cuda: the init cache initializes once per key and keeps the most recent",
          "[cuda][ragged_dot]") {
  InitCache<FakeGemm> cache(2);
  int uses = 0;
  auto call = [&](int G) {
    CudaRaggedDotLaunch l = base_launch();
    l.G = G;
    cache.with(
        init_key(l), [&](FakeGemm& gemm) { gemm.initialized_for_g = G; },
        [&](FakeGemm& gemm) {
          CHECK(gemm.initialized_for_g == G);
          ++uses;
        });
  };
  for (int i = 0; i < 5; ++i) call(8);
  CHECK(cache.initializations() == 1);
  call(16);
  call(8);  // 8 is now the most recent, 16 the older
  CHECK(cache.initializations() == 2);
  call(32);  // evicts 16
  CHECK(cache.size() == 2);
  call(8);
  CHECK(cache.initializations() == 3);
  call(16);
  CHECK(cache.initializations() == 4);
  CHECK(uses == 10);
}

TEST_CASE("ragged_dot cuda: a GEMM whose initialization or launch failed is not kept",
          "[cuda][ragged_dot]") {
  InitCache<FakeGemm> cache(4);
  const InitKey key = init_key(base_launch());
  auto noop = [](FakeGemm&) {};
  CHECK_THROWS_AS(cache.with(
                      key, [](FakeGemm&) { throw std::runtime_error("initialize"); }, noop),
                  std::runtime_error);
  CHECK(cache.size() == 0);
  cache.with(key, noop, noop);
  CHECK(cache.initializations() == 1);
  CHECK_THROWS_AS(cache.with(key, noop, [](FakeGemm&) { throw std::runtime_error("run"); }),
                  std::runtime_error);
  CHECK(cache.size() == 0);
  cache.with(key, noop, noop);
  CHECK(cache.initializations() == 2);
}
