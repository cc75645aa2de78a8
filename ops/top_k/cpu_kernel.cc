// top_k on CPU: each row selected by a threshold from its lanes' maxima (small k) or by radix
// select (large k), rows in parallel tasks.
//
// Dimensions.
//   b, n, k   as in base.h
//   len       a row's eligible prefix (base.h)
//   N         32-bit lanes of the SIMD target
#include "ops/top_k/cpu_kernel.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "backends/cpu/thread_pool.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/top_k/cpu_kernel.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
// Internal linkage: other ops' Highway files define functions in the same per-target namespaces.
namespace {

namespace hn = hwy::HWY_NAMESPACE;

// What one task selects: rows [begin, end) of the problem.
struct Rows {
  const float* scores;
  const int32_t* row_lengths;
  int32_t* indices;
  int32_t* scores_bits;
  int64_t n, k;
};

// top_k_key (base.h) of N scores at once.
template <class DF, class DI>
hn::Vec<DI> Keys(DF df, DI di, hn::Vec<DF> v) {
  const auto eligible =
      hn::RebindMask(di, hn::Gt(v, hn::Set(df, -std::numeric_limits<float>::infinity())));
  const auto bits = hn::BitCast(di, hn::Add(v, hn::Zero(df)));  // -0.0 + 0.0 = +0.0
  const auto key = hn::Xor(bits, hn::And(hn::ShiftRight<31>(bits), hn::Set(di, 0x7fffffff)));
  return hn::IfThenElse(eligible, key, hn::Set(di, kTopKIneligible));
}

// The row's selection written out: columns, their scores' bits, -1 / -inf padding.
void WriteRow(const Rows& a, int64_t r, const int32_t* columns, int64_t count) {
  const float* row = a.scores + r * a.n;
  int32_t* out = a.indices + r * a.k;
  const int32_t neg_inf_bits = std::bit_cast<int32_t>(-std::numeric_limits<float>::infinity());
  for (int64_t j = 0; j < a.k; ++j) out[j] = j < count ? columns[j] : -1;
  if (a.scores_bits == nullptr) return;
  int32_t* bits = a.scores_bits + r * a.k;
  for (int64_t j = 0; j < a.k; ++j) {
    bits[j] = j < count ? std::bit_cast<int32_t>(row[columns[j]]) : neg_inf_bits;
  }
}

// Candidates threshold select ranks by counting; past it, by a sort.
constexpr int64_t kRankByCountingMax = 256;

// Scratch of threshold select for rows of up to n scores (one per thread, reused across rows).
struct ThresholdScratch {
  std::vector<int32_t> keys, columns, maxima, selected;
  std::vector<uint8_t> bitmap;  // a bit per score, whole 64-bit words
  std::vector<uint64_t> ranks;  // past kRankByCountingMax candidates
  void reserve(int64_t n, int64_t k, int64_t N) {
    const size_t lanes = static_cast<size_t>((n + N - 1) / N * N + 2 * N);
    if (keys.size() < lanes) keys.resize(lanes), columns.resize(lanes);
    const size_t words = static_cast<size_t>((n + N - 1) / N * N + 63) / 64;
    if (bitmap.size() < 8 * words) bitmap.resize(8 * words);
    const size_t sets = static_cast<size_t>((2 * k + N - 1) / N * N);
    if (maxima.size() < sets) maxima.resize(sets);
    if (selected.size() < static_cast<size_t>(k + 1)) selected.resize(static_cast<size_t>(k + 1));
  }
};

// For each of the `count` candidates (keys, columns) from `first` on, a vector at a time: how
// many of all `count` candidates rank above it (a larger key, or an equal key at a lower column).
// Lanes past `count` read the scratch's padding and are not used.
template <class DI>
hn::Vec<DI> RankedAbove(DI di, const int32_t* keys, const int32_t* columns, int64_t count,
                        int64_t first) {
  const auto key = hn::LoadU(di, keys + first);
  const auto column = hn::LoadU(di, columns + first);
  auto above = hn::Zero(di);
  for (int64_t j = 0; j < count; ++j) {
    const auto other_key = hn::Set(di, keys[j]);
    const auto ranked_above =
        hn::Or(hn::Gt(other_key, key),
               hn::And(hn::Eq(other_key, key), hn::Gt(column, hn::Set(di, columns[j]))));
    above = hn::Sub(above, hn::VecFromMask(di, ranked_above));  // a true lane is -1
  }
  return above;
}

// Threshold select: A = ceil(2k / N) running maxima per lane (vector i updates set i % A) are
// A N >= 2k scores of the row, distinct elements, so the k-th largest of the maxima is a lower
// bound t of the row's k-th largest key (with twice k maxima, a tight one). The keys are kept from
// that pass; the scores with key >= t (for small k about k to 2k of them: a lane's maximum is an
// extreme of its lane) are compressed out with their columns, and each one's place is the count of
// those ranked above it. No step branches on the data: a sort of these few random values
// mispredicts about every other compare, which costs more than the counting.
void ThresholdSelectRow(const Rows& a, int64_t r, int64_t len, ThresholdScratch& scratch) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t A = (2 * a.k + N - 1) / N, M = A * N;
  const float* row = a.scores + r * a.n;
  int32_t* keys = scratch.keys.data();
  int32_t* columns = scratch.columns.data();
  int32_t* maxima = scratch.maxima.data();
  // Whole vectors: the tail is padded with ineligible keys.
  const int64_t padded = (len + N - 1) / N * N;
  int64_t c = 0;
  if (A == 1) {
    // One set: the maxima stay in a register (through memory each vector would wait on the
    // previous vector's store).
    auto m = hn::Set(di, kTopKIneligible);
    for (; c + N <= len; c += N) {
      const auto key = Keys(df, di, hn::LoadU(df, row + c));
      hn::StoreU(key, di, keys + c);
      m = hn::Max(m, key);
    }
    hn::StoreU(m, di, maxima);
  } else {
    std::fill_n(maxima, M, kTopKIneligible);
    for (int64_t set = 0; c + N <= len; c += N) {
      const auto key = Keys(df, di, hn::LoadU(df, row + c));
      hn::StoreU(key, di, keys + c);
      hn::StoreU(hn::Max(hn::LoadU(di, maxima + set * N), key), di, maxima + set * N);
      set = set + 1 == A ? 0 : set + 1;
    }
  }
  for (int64_t l = 0; c + l < padded; ++l) {
    const int32_t key = c + l < len ? top_k_key(row[c + l]) : kTopKIneligible;
    keys[c + l] = key;
    maxima[l] = std::max(maxima[l], key);  // into set 0: any lane of any set bounds the same
  }

  // The k-th largest of the maxima: the one with k - 1 of them ranked above it.
  for (int64_t l = 0; l < M; ++l) columns[l] = static_cast<int32_t>(l);
  int32_t kth = kTopKIneligible;
  for (int64_t s = 0; s < M; s += N) {
    const auto above = RankedAbove(di, maxima, columns, M, s);
    const intptr_t lane =
        hn::FindFirstTrue(di, hn::Eq(above, hn::Set(di, static_cast<int32_t>(a.k - 1))));
    if (lane >= 0) kth = maxima[s + lane];
  }
  // Not below the smallest eligible key: lanes without an eligible score select nothing.
  const auto below_threshold = hn::Set(di, std::max(kth, kTopKIneligible + 1) - 1);

  // Which scores are candidates, as a bitmap of the row (each vector's mask bits, in column
  // order, then zeros to the end of the last 64-bit word); then its set bits, lowest first. No
  // branch per vector: about half the vectors hold a candidate, in no pattern a predictor could
  // learn (a branch, or compressing every vector into a running count, costs twice this).
  uint8_t* bitmap = scratch.bitmap.data();
  const size_t words = (static_cast<size_t>(padded) + 63) / 64;
  std::memset(bitmap + padded / 8, 0, words * 8 - static_cast<size_t>(padded / 8));
  if (N >= 8) {
    for (c = 0; c < padded; c += N) {
      hn::StoreMaskBits(di, hn::Gt(hn::LoadU(di, keys + c), below_threshold), bitmap + c / 8);
    }
  } else {
    const int32_t threshold = hn::GetLane(below_threshold) + 1;
    std::memset(bitmap, 0, words * 8);
    for (c = 0; c < padded; ++c) {
      bitmap[c / 8] |= static_cast<uint8_t>((keys[c] >= threshold ? 1u : 0u) << (c % 8));
    }
  }
  int64_t count = 0;
  for (size_t w = 0; w < words; ++w) {
    uint64_t bits;
    std::memcpy(&bits, bitmap + w * 8, sizeof(bits));
    while (bits != 0) {
      const int64_t column =
          static_cast<int64_t>(w * 64 + hwy::Num0BitsBelowLS1Bit_Nonzero64(bits));
      keys[count] = keys[column];  // column >= count: read before anything overwrites it
      columns[count] = static_cast<int32_t>(column);
      ++count;
      bits &= bits - 1;
    }
  }
  const int64_t selected = std::min<int64_t>(a.k, count);
  int32_t* out = scratch.selected.data();  // [k + 1]: slot k takes the candidates past k
  if (count > kRankByCountingMax) {
    // A loose bound (many equal scores at it): counting would cost count^2 / N.
    std::vector<uint64_t>& ranks = scratch.ranks;
    ranks.resize(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
      ranks[i] = (uint64_t{static_cast<uint32_t>(keys[i]) ^ 0x80000000u} << 32) |
                 (0xffffffffu - static_cast<uint32_t>(columns[i]));
    }
    std::partial_sort(ranks.begin(), ranks.begin() + selected, ranks.end(), std::greater<>());
    for (int64_t j = 0; j < selected; ++j) {
      out[j] = static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(ranks[j]));
    }
  } else {
    HWY_ALIGN int32_t places[hn::MaxLanes(di)];
    for (int64_t s = 0; s < count; s += N) {
      hn::Store(RankedAbove(di, keys, columns, count, s), di, places);
      for (int64_t l = 0; l < N && s + l < count; ++l) {
        out[std::min<int64_t>(places[l], a.k)] = columns[s + l];
      }
    }
  }
  WriteRow(a, r, out, selected);
}

// Scratch of radix select for rows of up to n scores (one per thread, reused across rows).
struct RadixScratch {
  std::vector<uint32_t> keys, sorted_keys;
  std::vector<int32_t> columns, sorted_columns;
  void reserve(int64_t n, int64_t N) {
    const size_t lanes = static_cast<size_t>(n + N);
    if (keys.size() < lanes) {
      keys.resize(lanes), sorted_keys.resize(lanes);
      columns.resize(lanes), sorted_columns.resize(lanes);
    }
  }
};

// Radix select: the keys as unsigned (ineligible: 0) and a histogram of their top kBinBits bits;
// walking the bins down from the top finds the bin holding the k-th largest. The scores of that
// bin and above (k and the bin's others: few, unless the scores crowd into one bin) are gathered
// in column order and sorted by key, descending, with a stable LSD radix sort of byte digits, so
// equal keys keep their columns ascending; the first k are the selection. No comparison sort:
// its compares on random keys mispredict about every other time.
constexpr int kBinBits = 11;
void RadixSelectRow(const Rows& a, int64_t r, int64_t len, RadixScratch& scratch) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::RebindToUnsigned<decltype(df)> du;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const float* row = a.scores + r * a.n;
  uint32_t* keys = scratch.keys.data();
  const auto flip = hn::Set(du, 0x80000000u);
  int64_t c = 0;
  for (; c + N <= len; c += N) {
    hn::StoreU(hn::Xor(hn::BitCast(du, Keys(df, di, hn::LoadU(df, row + c))), flip), du, keys + c);
  }
  for (; c < len; ++c) keys[c] = static_cast<uint32_t>(top_k_key(row[c])) ^ 0x80000000u;

  uint32_t bins[size_t{1} << kBinBits] = {};
  for (int64_t i = 0; i < len; ++i) ++bins[keys[i] >> (32 - kBinBits)];
  // Ineligible keys are 0, in bin 0, where no eligible key falls (the smallest, -FLT_MAX's, is
  // 2^23): stop above it, and every eligible score is a candidate when fewer than k are.
  int64_t bin = (int64_t{1} << kBinBits) - 1, at_or_above = 0;
  for (; bin > 0; --bin) {
    at_or_above += bins[bin];
    if (at_or_above >= a.k) break;
  }
  const uint32_t lowest = std::max<uint32_t>(static_cast<uint32_t>(bin) << (32 - kBinBits), 1);
  int32_t* columns = scratch.columns.data();
  int64_t count = 0;
  for (int64_t i = 0; i < len; ++i) {
    // Branch-free gather: every key is written, the count moves past the candidates only.
    keys[count] = keys[i];  // count <= i
    columns[count] = static_cast<int32_t>(i);
    count += keys[i] >= lowest;
  }

  // LSD radix sort by key, descending (digit complemented), stable; digits every candidate
  // shares are skipped.
  uint32_t* sorted_keys = scratch.sorted_keys.data();
  int32_t* sorted_columns = scratch.sorted_columns.data();
  uint32_t histograms[4][256] = {};
  for (int64_t i = 0; i < count; ++i) {
    const uint32_t key = ~keys[i];
    for (int d = 0; d < 4; ++d) ++histograms[d][(key >> (8 * d)) & 0xff];
  }
  for (int d = 0; d < 4; ++d) {
    uint32_t* h = histograms[d];
    if (h[(~keys[0] >> (8 * d)) & 0xff] == static_cast<uint32_t>(count)) continue;
    uint32_t offset = 0;
    for (int digit = 0; digit < 256; ++digit) {
      const uint32_t bucket = h[digit];
      h[digit] = offset;
      offset += bucket;
    }
    for (int64_t i = 0; i < count; ++i) {
      const uint32_t place = h[(~keys[i] >> (8 * d)) & 0xff]++;
      sorted_keys[place] = keys[i];
      sorted_columns[place] = columns[i];
    }
    std::swap(keys, sorted_keys);
    std::swap(columns, sorted_columns);
  }
  WriteRow(a, r, columns, std::min<int64_t>(a.k, count));
}

void SelectRows(const float* scores, const int32_t* row_lengths, int32_t* indices,
                int32_t* scores_bits, int64_t n, int64_t k, int64_t begin, int64_t end,
                bool radix_select) {
  const Rows a{scores, row_lengths, indices, scores_bits, n, k};
  // Per-thread scratch that only grows: pool threads are persistent.
  thread_local ThresholdScratch threshold;
  thread_local RadixScratch radix;
  const int64_t N = static_cast<int64_t>(hn::Lanes(hn::ScalableTag<float>()));
  if (radix_select) {
    radix.reserve(n, N);
  } else {
    threshold.reserve(n, k, N);
  }
  for (int64_t r = begin; r < end; ++r) {
    int64_t len = a.n;
    if (a.row_lengths != nullptr) len = std::clamp<int64_t>(a.row_lengths[r], 0, a.n);
    if (radix_select) {
      RadixSelectRow(a, r, len, radix);
    } else {
      ThresholdSelectRow(a, r, len, threshold);
    }
  }
}

}  // namespace
}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tokamax {
namespace {

HWY_EXPORT(SelectRows);

}  // namespace

void top_k_cpu_kernel(const TopKProblem& p, const CpuTopKLaunch& launch, const float* scores,
                      const int32_t* row_lengths, int32_t* indices, int32_t* scores_bits) {
  const int64_t per_task = std::max<int64_t>(launch.rows_per_task, 1);
  const int64_t tasks = (p.b + per_task - 1) / per_task;
  cpu::parallel_for(tasks, launch.num_threads, [&](int64_t task, int) {
    const int64_t begin = task * per_task, end = std::min(p.b, begin + per_task);
    HWY_DYNAMIC_DISPATCH(SelectRows)
    (scores, row_lengths, indices, scores_bits, p.n, p.k, begin, end, launch.radix_select);
  });
}

}  // namespace tokamax
#endif  // HWY_ONCE
