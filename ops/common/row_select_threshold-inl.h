// CPU row selection by threshold select (small k): lane maxima bound the k-th largest, the few
// scores above the bound are ranked.
//
// Dimensions.
//   b, n, k   as in row_select.h
//   len       a row's eligible prefix
//   N         32-bit lanes of the SIMD target
//
// A Highway "-inl" header of row_select.cc (compiled once per target): the toggle guard lets
// foreach_target.h re-include it per target, and its definitions sit in an anonymous namespace.
#if defined(TOKAMAX_OPS_COMMON_ROW_SELECT_THRESHOLD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TOKAMAX_OPS_COMMON_ROW_SELECT_THRESHOLD_INL_H_
#undef TOKAMAX_OPS_COMMON_ROW_SELECT_THRESHOLD_INL_H_
#else
#define TOKAMAX_OPS_COMMON_ROW_SELECT_THRESHOLD_INL_H_
#endif

#include <hwy/highway.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ops/common/row_select-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;

// Candidates above the bound threshold select ranks by counting (count^2 / N compares, no branch
// on the data); past it, by a partial sort (about count log k compares, mispredicting), which
// wins from about this many (a large k).
constexpr int64_t kRankByCountingMax = 64;

// Scratch of threshold select for rows of up to n scores (one per thread, reused across rows).
struct ThresholdScratch {
  std::vector<int32_t> keys, columns, ties, maxima, selected;
  std::vector<uint8_t> bitmap;  // a bit per score, whole 64-bit words
  std::vector<uint64_t> ranks;  // past kRankByCountingMax candidates
  void reserve(int64_t n, int64_t k, int64_t N) {
    // The maxima: A N of them. `columns` numbers them too, which can outnumber a short row's
    // scores (k near n).
    const size_t sets = static_cast<size_t>((2 * k + N - 1) / N * N);
    if (maxima.size() < sets) maxima.resize(sets);
    const size_t lanes = std::max(static_cast<size_t>((n + N - 1) / N * N + 2 * N), sets);
    if (keys.size() < lanes) keys.resize(lanes), columns.resize(lanes), ties.resize(lanes);
    const size_t words = static_cast<size_t>((n + N - 1) / N * N + 63) / 64;
    if (bitmap.size() < 8 * words) bitmap.resize(8 * words);
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
void ThresholdSelectRow(const Rows& a, int64_t r, const float* row, int64_t len,
                        ThresholdScratch& scratch) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t A = (2 * a.k + N - 1) / N, M = A * N;
  int32_t* keys = scratch.keys.data();
  int32_t* columns = scratch.columns.data();
  int32_t* maxima = scratch.maxima.data();
  // Whole vectors: the tail is padded with ineligible keys.
  const int64_t padded = (len + N - 1) / N * N;
  int64_t c = 0;
  if (A == 1) {
    // One set: the maxima stay in a register (through memory each vector would wait on the
    // previous vector's store).
    auto m = hn::Set(di, kRowSelectIneligible);
    for (; c + N <= len; c += N) {
      const auto key = Keys(df, di, hn::LoadU(df, row + c), a);
      hn::StoreU(key, di, keys + c);
      m = hn::Max(m, key);
    }
    hn::StoreU(m, di, maxima);
  } else {
    std::fill_n(maxima, M, kRowSelectIneligible);
    for (int64_t set = 0; c + N <= len; c += N) {
      const auto key = Keys(df, di, hn::LoadU(df, row + c), a);
      hn::StoreU(key, di, keys + c);
      hn::StoreU(hn::Max(hn::LoadU(di, maxima + set * N), key), di, maxima + set * N);
      set = set + 1 == A ? 0 : set + 1;
    }
  }
  for (int64_t l = 0; c + l < padded; ++l) {
    const int32_t key =
        c + l < len ? row_select_key(row[c + l], a.rule, a.floor) : kRowSelectIneligible;
    keys[c + l] = key;
    maxima[l] = std::max(maxima[l], key);  // into set 0: any lane of any set bounds the same
  }

  // The k-th largest of the maxima: the one with k - 1 of them ranked above it.
  for (int64_t l = 0; l < M; ++l) columns[l] = static_cast<int32_t>(l);
  int32_t kth = kRowSelectIneligible;
  for (int64_t s = 0; s < M; s += N) {
    const auto above = RankedAbove(di, maxima, columns, M, s);
    const intptr_t lane =
        hn::FindFirstTrue(di, hn::Eq(above, hn::Set(di, static_cast<int32_t>(a.k - 1))));
    if (lane >= 0) kth = maxima[s + lane];
  }
  // Not below the smallest eligible key: lanes without an eligible score select nothing.
  const int32_t threshold = std::max(kth, kRowSelectIneligible + 1);
  const auto below_threshold = hn::Set(di, threshold - 1);

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
  // The candidates above the bound first, those equal to it after, each in column order: only
  // the first are ranked (usually fewer than 2k; a row whose scores mostly tie at the bound has
  // few), the ties follow them as they are. Branch-free: both lists are written every time.
  int32_t* ties = scratch.ties.data();
  int64_t above = 0, tied = 0;
  for (int64_t i = 0; i < count; ++i) {
    const int32_t key = keys[i], column = columns[i];
    const bool is_above = key > threshold;
    keys[above] = key;  // above <= i
    columns[above] = column;
    ties[tied] = column;
    above += is_above;
    tied += !is_above;
  }
  int32_t* out = scratch.selected.data();  // [k + 1]: slot k takes the candidates past k
  if (above > kRankByCountingMax) {
    std::vector<uint64_t>& ranks = scratch.ranks;
    ranks.resize(static_cast<size_t>(above));
    for (int64_t i = 0; i < above; ++i) {
      ranks[i] = (uint64_t{static_cast<uint32_t>(keys[i]) ^ 0x80000000u} << 32) |
                 (0xffffffffu - static_cast<uint32_t>(columns[i]));
    }
    const int64_t ranked = std::min<int64_t>(a.k, above);
    std::partial_sort(ranks.begin(), ranks.begin() + ranked, ranks.end(), std::greater<>());
    for (int64_t j = 0; j < ranked; ++j) {
      out[j] = static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(ranks[j]));
    }
  } else {
    HWY_ALIGN int32_t places[hn::MaxLanes(di)];
    for (int64_t s = 0; s < above; s += N) {
      hn::Store(RankedAbove(di, keys, columns, above, s), di, places);
      for (int64_t l = 0; l < N && s + l < above; ++l) {
        out[std::min<int64_t>(places[l], a.k)] = columns[s + l];
      }
    }
  }
  const int64_t selected = std::min<int64_t>(a.k, count);
  for (int64_t j = above; j < selected; ++j) out[j] = ties[j - above];
  WriteRow(a, r, row, out, selected);
}

}  // namespace
}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // TOKAMAX_OPS_COMMON_ROW_SELECT_THRESHOLD_INL_H_ toggle
