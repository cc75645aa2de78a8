// Tests of splash_attention's masks: every class's runs against upstream's element formulas
// (and, or and segment ids too), the block classes and holes the kernels read against a brute
// force over blocks, .npy masks, and the canonical forms and their errors.
#include "ops/splash_attention/mask.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "ops/framework/errors.h"

using namespace tokamax;
using nlohmann::json;

namespace {

using Predicate = std::function<bool(int64_t, int64_t)>;

void check_against(const json& raw, int64_t T, int64_t t, const Predicate& visible,
                   const int32_t* q_seg = nullptr, const int32_t* kv_seg = nullptr) {
  const SplashMask mask(canonical_splash_mask(raw, T, t, "mask"), T, t, q_seg, kv_seg);
  for (int64_t r = 0; r < T; ++r) {
    for (int64_t j = 0; j < t; ++j) {
      CAPTURE(raw.dump(), r, j);
      const bool want = visible(r, j) && (!q_seg || q_seg[r] == kv_seg[j]);
      REQUIRE(mask.visible(r, j) == want);
    }
  }
  // Every block of a few grids: empty iff no row sees a key, interval iff each row's keys in it
  // fill its hull there, and the holes mask_row marks are exactly the invisible keys.
  for (int64_t rows : {1, 3, 8}) {
    for (int64_t n : {1, 4, 7}) {
      for (int64_t r0 = 0; r0 < T; r0 += rows) {
        for (int64_t j0 = 0; j0 < t; j0 += n) {
          const int64_t R = std::min(rows, T - r0), N = std::min(n, t - j0);
          bool any = false, scattered = false;
          for (int64_t r = r0; r < r0 + R; ++r) {
            const auto [lo, hi] = mask.key_range(r);
            std::vector<float> s(static_cast<size_t>(N), 1.0f);
            const int64_t c_lo = std::clamp<int64_t>(lo - j0, 0, N);
            const int64_t c_hi = std::clamp<int64_t>(hi - j0, c_lo, N);
            mask.mask_row(r, j0, c_lo, c_hi, s.data());
            for (int64_t c = 0; c < N; ++c) {
              const bool vis = mask.visible(r, j0 + c);
              any = any || vis;
              const bool in_hull = c >= c_lo && c < c_hi;
              if (in_hull && !vis) scattered = true;
              if (in_hull) REQUIRE((s[c] == 1.0f) == vis);
              if (!in_hull) REQUIRE(!vis);
            }
          }
          const KeyBlock want = !any        ? KeyBlock::kEmpty
                                : scattered ? KeyBlock::kScattered
                                            : KeyBlock::kInterval;
          CAPTURE(raw.dump(), r0, R, j0, N);
          REQUIRE(mask.block(r0, R, j0, N) == want);
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("splash masks: each class's runs match upstream's formulas", "[splash_attention]") {
  for (const auto& [T, t] : {std::pair<int64_t, int64_t>{13, 13}, {9, 21}, {20, 7}}) {
    check_against(json(), T, t, [](int64_t, int64_t) { return true; });
    for (int64_t o : {-5, 0, 3}) {
      check_against({{"causal_mask", {{"offset", o}}}}, T, t,
                    [&](int64_t r, int64_t j) { return r + o >= j; });
      check_against({{"local_mask", {{"window_size", {2, 1}}, {"offset", o}}}}, T, t,
                    [&](int64_t r, int64_t j) { return r + o - 2 <= j && r + o + 1 >= j; });
      check_against({{"local_mask", {{"window_size", {nullptr, 0}}, {"offset", o}}}}, T, t,
                    [&](int64_t r, int64_t j) { return r + o >= j; });
    }
    check_against({{"chunked_causal_mask", {{"chunk_size", 4}}}}, T, t,
                  [](int64_t r, int64_t j) { return r / 4 == j / 4 && r >= j; });
    const json local = {{"local_mask", {{"window_size", {1, 1}}, {"offset", 0}}}};
    const json chunk = {{"chunked_causal_mask", {{"chunk_size", 5}}}};
    check_against({{"logical_or", {local, chunk}}}, T, t, [](int64_t r, int64_t j) {
      return (r - 1 <= j && r + 1 >= j) || (r / 5 == j / 5 && r >= j);
    });
    check_against({{"logical_and", {"causal", {{"logical_or", {local, chunk}}}}}}, T, t,
                  [](int64_t r, int64_t j) {
                    return r >= j && ((r - 1 <= j && r + 1 >= j) || (r / 5 == j / 5));
                  });
    // Segment ids: documents of 3 on the rows, of 4 on the keys (some ids on one side only).
    std::vector<int32_t> q(static_cast<size_t>(T)), kv(static_cast<size_t>(t));
    for (int64_t r = 0; r < T; ++r) q[r] = static_cast<int32_t>(r / 3);
    for (int64_t j = 0; j < t; ++j) kv[j] = static_cast<int32_t>(j / 4);
    check_against(
        "causal", T, t, [](int64_t r, int64_t j) { return r >= j; }, q.data(), kv.data());
  }
  // A numpy mask of scattered rows (one row empty).
  const std::vector<std::string> rows = {"1010011", "0000000", "1111111", "0110010"};
  check_against({{"numpy_mask", {{"rows", rows}}}}, 4, 7,
                [&](int64_t r, int64_t j) { return rows[r][j] == '1'; });
}

TEST_CASE("splash masks: a .npy file is read, a wrong one named", "[splash_attention]") {
  const std::string path = "splash_mask_test.npy";
  auto write = [&](const std::string& descr, const std::string& shape, const std::string& data) {
    std::string header =
        "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
    header.append(64 - (10 + header.size() + 1) % 64, ' ');
    header += '\n';
    std::ofstream out(path, std::ios::binary);
    out << "\x93NUMPY" << '\x01' << '\x00' << static_cast<char>(header.size() & 0xFF)
        << static_cast<char>(header.size() >> 8) << header << data;
  };
  write("|b1", "(2, 3)", std::string("\x01\x00\x01\x00\x00\x01", 6));
  const json mask = {{"numpy_mask", {{"file", path}}}};
  const SplashMask m(canonical_splash_mask(mask, 2, 3, "mask"), 2, 3);
  CHECK(m.visible(0, 0));
  CHECK_FALSE(m.visible(0, 1));
  CHECK(m.visible(0, 2));
  CHECK(m.visible(1, 2));
  CHECK(m.count(1) == 1);
  CHECK_THROWS_AS(canonical_splash_mask(mask, 3, 3, "mask"), InvalidArgument);  // shape
  write("<f4", "(2, 3)", std::string(24, '\0'));
  CHECK_THROWS_AS(canonical_splash_mask(mask, 2, 3, "mask"), InvalidArgument);  // dtype
  std::remove(path.c_str());
  CHECK_THROWS_AS(canonical_splash_mask(mask, 2, 3, "mask"), InvalidArgument);  // missing
}

TEST_CASE("splash masks: canonical forms, and every malformed mask named", "[splash_attention]") {
  CHECK(canonical_splash_mask("causal", 4, 4, "mask") == json{{"causal_mask", {{"offset", 0}}}});
  CHECK(canonical_splash_mask(nullptr, 4, 4, "mask") == json{{"full_mask", json::object()}});
  CHECK(canonical_splash_mask({{"local_mask", {{"window_size", {3, nullptr}}}}}, 4, 4, "mask") ==
        json{{"local_mask", {{"window_size", {3, nullptr}}, {"offset", 0}}}});
  for (const json& bad :
       {json("diagonal"), json{{"circle_mask", json::object()}},
        json{{"causal_mask", {{"offset", 1.5}}}}, json{{"causal_mask", {{"window", 2}}}},
        json{{"local_mask", {{"window_size", {-1, 2}}}}},
        json{{"local_mask", {{"window_size", {1}}}}},
        json{{"chunked_causal_mask", {{"chunk_size", 0}}}},
        json{{"chunked_causal_mask", json::object()}},
        json{{"numpy_mask", {{"rows", {"1111", "11"}}}}},
        json{{"numpy_mask", {{"rows", {"1111", "1111", "1111", "11x1"}}}}},
        json{{"logical_and", {"causal"}}},
        json{{"logical_or", {"causal", {{"causal_mask", {{"offset", "a"}}}}}}},
        json{{"causal_mask", {}}, {"full_mask", {}}}}) {
    CAPTURE(bad.dump());
    try {
      canonical_splash_mask(bad, 4, 4, "mask");
      FAIL("accepted");
    } catch (const InvalidArgument& e) {
      CHECK(e.field() == "mask");
    }
  }
}
