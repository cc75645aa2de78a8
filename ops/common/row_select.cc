// Selecting the k largest scores of each row on CPU: threshold select (small k) or radix select
// (large k), rows in parallel tasks.
//
// Dimensions.
//   b, n, k   as in row_select.h
//   len       a row's eligible prefix
//   N         32-bit lanes of the SIMD target
#include "ops/common/row_select.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/thread_pool.h"
#include "ops/framework/errors.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/common/row_select.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
// Internal linkage: other Highway files define functions in the same per-target namespaces.
namespace {

namespace hn = hwy::HWY_NAMESPACE;

// What a row is selected by, and where its selection goes.
struct Rows {
  int64_t n, k;
  RowSelectRule rule;
  float floor;
  int32_t* columns;  // [b, k]
  float* values;     // [b, k] or null
};

// row_select_key (row_select.h) of N scores at once.
template <class DF, class DI>
hn::Vec<DI> Keys(DF df, DI di, hn::Vec<DF> v, const Rows& a) {
  if (a.rule == RowSelectRule::kClampToFloor) {
    const auto floor = hn::Set(df, a.floor);
    v = hn::IfThenElse(hn::Gt(v, floor), v, floor);  // NaN too
    v = hn::Add(v, hn::Zero(df));                    // -0.0 + 0.0 = +0.0
  }
  const auto bits = hn::BitCast(di, v);
  const auto key = hn::Xor(bits, hn::And(hn::ShiftRight<31>(bits), hn::Set(di, 0x7fffffff)));
  if (a.rule == RowSelectRule::kClampToFloor) return key;
  const auto eligible =
      hn::RebindMask(di, hn::Gt(v, hn::Set(df, -std::numeric_limits<float>::infinity())));
  return hn::IfThenElse(eligible, key, hn::Set(di, kRowSelectIneligible));
}

// The row's selection written out, -1 past `count`; with values, the selected scores (as f32),
// -inf past `count`.
void WriteRow(const Rows& a, int64_t r, const float* row, const int32_t* columns, int64_t count) {
  int32_t* out = a.columns + r * a.k;
  for (int64_t j = 0; j < a.k; ++j) out[j] = j < count ? columns[j] : -1;
  if (a.values == nullptr) return;
  float* values = a.values + r * a.k;
  for (int64_t j = 0; j < a.k; ++j) {
    values[j] = j < count ? row[columns[j]] : -std::numeric_limits<float>::infinity();
  }
}

// The first `len` 16-bit floats of a row (Highway's T, stored as the project's Storage) as f32.
template <typename T, typename Storage, class DF>
void WidenRow(DF df, const Storage* in, int64_t len, float* out) {
  int64_t c = 0;
#if HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
  // Not on the portable targets: their f16 widening (Highway 1.0) turns infinities and NaN into
  // finite numbers.
  const hn::Rebind<T, DF> d16;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const T* lanes = reinterpret_cast<const T*>(in);
  for (; c + N <= len; c += N) {
    hn::StoreU(hn::PromoteTo(df, hn::LoadU(d16, lanes + c)), df, out + c);
  }
#else
  (void)df;
#endif
  for (; c < len; ++c) out[c] = to_float(in[c]);
}

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
void RadixSelectRow(const Rows& a, int64_t r, const float* row, int64_t len,
                    RadixScratch& scratch) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::RebindToUnsigned<decltype(df)> du;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  uint32_t* keys = scratch.keys.data();
  const auto flip = hn::Set(du, 0x80000000u);
  int64_t c = 0;
  for (; c + N <= len; c += N) {
    hn::StoreU(hn::Xor(hn::BitCast(du, Keys(df, di, hn::LoadU(df, row + c), a)), flip), du,
               keys + c);
  }
  for (; c < len; ++c)
    keys[c] = static_cast<uint32_t>(row_select_key(row[c], a.rule, a.floor)) ^ 0x80000000u;

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
  WriteRow(a, r, row, columns, std::min<int64_t>(a.k, count));
}

// Rows [begin, end) of a problem whose scores are `dtype` (f32, or bf16 / f16 widened to f32 a
// row at a time, in scratch).
void SelectRows(const void* scores, DType dtype, const int32_t* row_lengths, RowSelectRule rule,
                float floor, int64_t n, int64_t k, int32_t* columns, float* values, int64_t begin,
                int64_t end, bool radix_select) {
  const Rows a{n, k, rule, floor, columns, values};
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  // Per-thread scratch that only grows: pool threads are persistent.
  thread_local ThresholdScratch threshold;
  thread_local RadixScratch radix;
  thread_local std::vector<float> widened;
  if (radix_select) {
    radix.reserve(n, N);
  } else {
    threshold.reserve(n, k, N);
  }
  if (dtype != DType::kF32 && widened.size() < static_cast<size_t>(n)) {
    widened.resize(static_cast<size_t>(n));
  }
  for (int64_t r = begin; r < end; ++r) {
    const int64_t len = row_select_length(row_lengths, r, n);
    const float* row = static_cast<const float*>(scores) + r * n;
    if (dtype == DType::kBF16) {
      WidenRow<hwy::bfloat16_t>(df, static_cast<const bf16*>(scores) + r * n, len, widened.data());
      row = widened.data();
    } else if (dtype == DType::kF16) {
      WidenRow<hwy::float16_t>(df, static_cast<const f16*>(scores) + r * n, len, widened.data());
      row = widened.data();
    }
    if (radix_select) {
      RadixSelectRow(a, r, row, len, radix);
    } else {
      ThresholdSelectRow(a, r, row, len, threshold);
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

void row_select_cpu(const RowSelectProblem& p, const RowSelectConfig& config, const void* scores,
                    int32_t* columns, float* values) {
  if (p.dtype != DType::kF32 && p.dtype != DType::kBF16 && p.dtype != DType::kF16) {
    throw NotImplemented("cpu row selection: scores of dtype " + std::string(dtype_name(p.dtype)) +
                         " (f32, bf16 and f16 only)");
  }
  const int64_t per_task = std::max<int64_t>(config.rows_per_task, 1);
  const int64_t tasks = (p.b + per_task - 1) / per_task;
  cpu::parallel_for(tasks, config.num_threads, [&](int64_t task, int) {
    const int64_t begin = task * per_task, end = std::min(p.b, begin + per_task);
    HWY_DYNAMIC_DISPATCH(SelectRows)
    (scores, p.dtype, p.row_lengths, p.rule, p.floor, p.n, p.k, columns, values, begin, end,
     config.radix_select);
  });
}

}  // namespace tokamax
#endif  // HWY_ONCE
