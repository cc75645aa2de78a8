// CPU row selection by radix select (large k): a histogram of the keys' top bits finds the bin
// of the k-th largest; a stable radix sort ranks that bin and those above.
//
// Dimensions.
//   b, n, k   as in row_select.h
//   len       a row's eligible prefix
//   N         32-bit lanes of the SIMD target
//
// A Highway "-inl" header of row_select.cc (compiled once per target): the toggle guard lets
// foreach_target.h re-include it per target, and its definitions sit in an anonymous namespace.
#if defined(TOKAMAX_OPS_COMMON_ROW_SELECT_RADIX_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TOKAMAX_OPS_COMMON_ROW_SELECT_RADIX_INL_H_
#undef TOKAMAX_OPS_COMMON_ROW_SELECT_RADIX_INL_H_
#else
#define TOKAMAX_OPS_COMMON_ROW_SELECT_RADIX_INL_H_
#endif

#include <hwy/highway.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ops/common/row_select-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;

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

}  // namespace
}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // TOKAMAX_OPS_COMMON_ROW_SELECT_RADIX_INL_H_ toggle
