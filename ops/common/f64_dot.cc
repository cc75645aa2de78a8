// Float64 dot rows for the oracles: points bucketed into tiles, dense tiles packed for the
// micro-kernel, sparse ones dotted point by point, every tile a task of the thread pool.
//
// Dimensions: as f64_dot.h (K, Ra, Rb, S, tm, tn); kc the K block, mr, nr the micro-tile.
#include "ops/common/f64_dot.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backends/cpu/thread_pool.h"
#include "ops/common/f64_dot_kernel.h"
#include "ops/framework/errors.h"

namespace tokamax {
namespace {

// K block of a dense tile: one b strip block (kc nr doubles: 16 KB at nr = 16) stays in L1
// while the tile's a panels (tm kc 2 doubles: 64 KB at tm = 32) stream from L2.
constexpr int64_t kKc = 128;
constexpr int64_t kPanelsPerTile = 8;
constexpr int64_t kTileColumns = 256;  // tn, rounded to whole strips
// A tile is dense when at least this fraction of its products are requested: a micro-kernel
// product costs about an eighth of a per-point dot (scattered points read their b rows from L3
// or memory; measured: docs/measurement_log.md, "f64 oracle: dense tiles against scattered
// points"), and packing the tile's a rows costs little next to its products.
constexpr double kDenseFraction = 0.125;

struct Tiling {
  F64TileShape shape;
  int64_t tm = 0, tn = 0;  // tile extents: whole panels and strips
  int64_t row_tiles = 0, col_tiles = 0;
  int64_t K = 0;

  Tiling(const F64Rows& a, const F64Rows& b) : shape(f64_tile_shape()), K(a.depth) {
    tm = kPanelsPerTile * shape.mr;
    tn = std::max<int64_t>(1, kTileColumns / shape.nr) * shape.nr;
    row_tiles = (a.rows + tm - 1) / tm;
    col_tiles = (b.rows + tn - 1) / tn;
  }
  int64_t strips() const { return tn / shape.nr; }
};

// b rows [j0, j0 + cols) -> strips [K][nr] (zero rows past cols): each source row is read once,
// contiguously.
void pack_strips(const F64Rows& b, int64_t j0, int64_t cols, int64_t nr, double* out) {
  const int64_t K = b.depth;
  for (int64_t s = 0; s * nr < cols; ++s) {
    double* strip = out + s * K * nr;
    for (int64_t c = 0; c < nr; ++c) {
      const int64_t j = s * nr + c;
      if (j >= cols) {
        for (int64_t k = 0; k < K; ++k) strip[k * nr + c] = 0.0;
        continue;
      }
      const double* src = b.row(j0 + j);
      for (int64_t k = 0; k < K; ++k) strip[k * nr + c] = src[k];
    }
  }
}

// a rows [i0, i0 + rows), K block [k0, k0 + kc) -> panels [kc][2 mr]: values, then |values|.
void pack_panels(const F64Rows& a, int64_t i0, int64_t rows, int64_t k0, int64_t kc, int64_t mr,
                 double* out) {
  for (int64_t p = 0; p * mr < rows; ++p) {
    double* panel = out + p * kc * 2 * mr;
    for (int64_t r = 0; r < mr; ++r) {
      const int64_t i = p * mr + r;
      if (i >= rows) {
        for (int64_t k = 0; k < kc; ++k) panel[k * 2 * mr + r] = panel[k * 2 * mr + mr + r] = 0.0;
        continue;
      }
      const double* src = a.row(i0 + i) + k0;
      for (int64_t k = 0; k < kc; ++k) {
        panel[k * 2 * mr + r] = src[k];
        panel[k * 2 * mr + mr + r] = std::fabs(src[k]);
      }
    }
  }
}

// Every product of a tile ([i0, i0 + rows) x [j0, j0 + cols)) into value / magnitude (row
// stride ldc) from b's packed strips of that column tile; `panels` is scratch of tm kc 2.
void dense_tile(const Tiling& t, const F64Rows& a, int64_t i0, int64_t rows, const double* strips,
                int64_t cols, double* value, double* magnitude, int64_t ldc, double* panels) {
  const int64_t mr = t.shape.mr, nr = t.shape.nr;
  if (t.K == 0) {
    for (int64_t r = 0; r < rows; ++r) {
      std::fill(value + r * ldc, value + r * ldc + cols, 0.0);
      if (magnitude) std::fill(magnitude + r * ldc, magnitude + r * ldc + cols, 0.0);
    }
    return;
  }
  for (int64_t k0 = 0; k0 < t.K; k0 += kKc) {
    const int64_t kc = std::min(kKc, t.K - k0);
    pack_panels(a, i0, rows, k0, kc, mr, panels);
    F64BlockArgs args;
    args.a_panels = panels;
    args.a_stride = kc * 2 * mr;
    args.rows = rows;
    args.b_strips = strips + k0 * nr;
    args.b_stride = t.K * nr;
    args.cols = cols;
    args.kc = kc;
    args.value = value;
    args.magnitude = magnitude;
    args.ldc = ldc;
    args.accumulate = k0 > 0;
    f64_block_product(args);
  }
}

void check_operands(const F64Rows& a, const F64Rows& b) {
  if (a.depth != b.depth) {
    throw InvalidArgument("f64_dot_rows: the operands' depths differ (" + std::to_string(a.depth) +
                          " and " + std::to_string(b.depth) + ")");
  }
  if (a.rows < 0 || b.rows < 0 || a.depth < 0 || a.ld < a.depth || b.ld < b.depth) {
    throw InvalidArgument("f64_dot_rows: negative extents or a row stride below the depth");
  }
}

}  // namespace

void f64_dot_rows_all(const F64Rows& a, const F64Rows& b, double* value, double* magnitude,
                      int64_t ldc) {
  check_operands(a, b);
  if (a.rows == 0 || b.rows == 0) return;
  const Tiling t(a, b);
  std::vector<double> strips(static_cast<size_t>(t.col_tiles * t.tn * t.K));
  cpu::parallel_for(t.col_tiles, 0, [&](int64_t c, int) {
    pack_strips(b, c * t.tn, std::min(t.tn, b.rows - c * t.tn), t.shape.nr,
                strips.data() + c * t.tn * t.K);
  });
  std::vector<std::vector<double>> scratch(static_cast<size_t>(cpu::thread_pool().size()));
  cpu::parallel_for(t.row_tiles * t.col_tiles, 0, [&](int64_t tile, int thread) {
    const int64_t i0 = tile / t.col_tiles * t.tm, j0 = tile % t.col_tiles * t.tn;
    std::vector<double>& panels = scratch[thread];
    panels.resize(static_cast<size_t>(t.tm * kKc * 2));
    dense_tile(t, a, i0, std::min(t.tm, a.rows - i0), strips.data() + j0 * t.K,
               std::min(t.tn, b.rows - j0), value + i0 * ldc + j0,
               magnitude ? magnitude + i0 * ldc + j0 : nullptr, ldc, panels.data());
  });
}

void f64_dot_rows(const F64Rows& a, const F64Rows& b, std::span<const DotPoint> points,
                  std::span<double> value, std::span<double> magnitude) {
  check_operands(a, b);
  const int64_t S = static_cast<int64_t>(points.size());
  const bool with_magnitude = !magnitude.empty();
  if (static_cast<int64_t>(value.size()) < S ||
      (with_magnitude && static_cast<int64_t>(magnitude.size()) < S)) {
    throw InvalidArgument("f64_dot_rows: " + std::to_string(S) + " points but shorter outputs");
  }
  for (const DotPoint& p : points) {
    if (p.a < 0 || p.a >= a.rows || p.b < 0 || p.b >= b.rows) {
      throw InvalidArgument("f64_dot_rows: point (" + std::to_string(p.a) + ", " +
                            std::to_string(p.b) + ") outside " + std::to_string(a.rows) + " x " +
                            std::to_string(b.rows));
    }
  }
  if (S == 0) return;
  const Tiling t(a, b);
  // Bucket the points by tile: a counting sort, or a sort of the keys when the tiles far
  // outnumber the points.
  const int64_t tiles = t.row_tiles * t.col_tiles;
  std::vector<int64_t> key(static_cast<size_t>(S)), order(static_cast<size_t>(S));
  for (int64_t s = 0; s < S; ++s) key[s] = points[s].a / t.tm * t.col_tiles + points[s].b / t.tn;
  if (tiles <= 4 * S + 65536) {
    std::vector<int64_t> next(static_cast<size_t>(tiles) + 1, 0);
    for (int64_t s = 0; s < S; ++s) ++next[key[s] + 1];
    for (int64_t tile = 0; tile < tiles; ++tile) next[tile + 1] += next[tile];
    for (int64_t s = 0; s < S; ++s) order[next[key[s]]++] = s;
  } else {
    for (int64_t s = 0; s < S; ++s) order[s] = s;
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t x, int64_t y) { return key[x] < key[y]; });
  }
  struct Bucket {
    int64_t tile, begin, end;
    bool dense;
  };
  std::vector<Bucket> buckets;
  std::vector<char> dense_columns(static_cast<size_t>(t.col_tiles), 0);
  for (int64_t s = 0; s < S;) {
    const int64_t tile = key[order[s]];
    int64_t e = s;
    while (e < S && key[order[e]] == tile) ++e;
    const int64_t i0 = tile / t.col_tiles * t.tm, j0 = tile % t.col_tiles * t.tn;
    const double area = static_cast<double>(std::min(t.tm, a.rows - i0)) *
                        static_cast<double>(std::min(t.tn, b.rows - j0));
    const bool dense = static_cast<double>(e - s) >= kDenseFraction * area;
    if (dense) dense_columns[tile % t.col_tiles] = 1;
    buckets.push_back({tile, s, e, dense});
    s = e;
  }
  // Strips of the column tiles some dense tile needs, each packed once.
  std::vector<int64_t> strip_at(static_cast<size_t>(t.col_tiles), -1);
  int64_t packed = 0;
  for (int64_t c = 0; c < t.col_tiles; ++c) {
    if (dense_columns[c]) strip_at[c] = packed++;
  }
  std::vector<double> strips(static_cast<size_t>(packed * t.tn * t.K));
  cpu::parallel_for(t.col_tiles, 0, [&](int64_t c, int) {
    if (strip_at[c] < 0) return;
    pack_strips(b, c * t.tn, std::min(t.tn, b.rows - c * t.tn), t.shape.nr,
                strips.data() + strip_at[c] * t.tn * t.K);
  });
  struct Scratch {
    std::vector<double> panels, value, magnitude;
  };
  std::vector<Scratch> scratch(static_cast<size_t>(cpu::thread_pool().size()));
  cpu::parallel_for(static_cast<int64_t>(buckets.size()), 0, [&](int64_t task, int thread) {
    const Bucket& bucket = buckets[task];
    if (!bucket.dense) {
      // By b row, then a row: each b row is read once per tile while the tile's a rows stay in
      // L2 (tasks sort disjoint ranges of `order`).
      std::sort(order.begin() + bucket.begin, order.begin() + bucket.end,
                [&](int64_t x, int64_t y) {
                  return points[x].b != points[y].b ? points[x].b < points[y].b
                                                    : points[x].a < points[y].a;
                });
      for (int64_t s = bucket.begin; s < bucket.end; ++s) {
        const int64_t at = order[s];
        f64_dot(a.row(points[at].a), b.row(points[at].b), t.K, &value[at],
                with_magnitude ? &magnitude[at] : nullptr);
      }
      return;
    }
    Scratch& mine = scratch[thread];
    mine.panels.resize(static_cast<size_t>(t.tm * kKc * 2));
    mine.value.resize(static_cast<size_t>(t.tm * t.tn));
    if (with_magnitude) mine.magnitude.resize(static_cast<size_t>(t.tm * t.tn));
    const int64_t c = bucket.tile % t.col_tiles;
    const int64_t i0 = bucket.tile / t.col_tiles * t.tm, j0 = c * t.tn;
    dense_tile(t, a, i0, std::min(t.tm, a.rows - i0), strips.data() + strip_at[c] * t.tn * t.K,
               std::min(t.tn, b.rows - j0), mine.value.data(),
               with_magnitude ? mine.magnitude.data() : nullptr, t.tn, mine.panels.data());
    for (int64_t s = bucket.begin; s < bucket.end; ++s) {
      const int64_t at = order[s];
      const int64_t local = (points[at].a - i0) * t.tn + (points[at].b - j0);
      value[at] = mine.value[local];
      if (with_magnitude) magnitude[at] = mine.magnitude[local];
    }
  });
}

}  // namespace tokamax
