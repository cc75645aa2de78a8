// splash_attention's masks (upstream's splash_attention_mask.py): the mask objects a catalog
// names, canonicalized at bind, and the host-built form the kernels read: each query row's
// visible keys as sorted, disjoint runs [lo, hi).
//
// Dimensions.
//   T      query positions (rows);  t  key/value positions (columns)
//
// Catalog forms (JSON / YAML objects with one key), upstream's classes:
//   {full_mask: {}}                                       FullMask: every key
//   {causal_mask: {offset: o}}                            CausalMask: j <= r + o
//   {local_mask: {window_size: [l, r], offset: o}}        LocalMask: r + o - l <= j <= r + o + r
//                                                         (null: that side unbounded)
//   {chunked_causal_mask: {chunk_size: c}}                ChunkedCausalMask: same chunk, j <= r
//   {numpy_mask: {rows: ["0110", ...]}}                   NumpyMask: a [T, t] boolean matrix,
//   {numpy_mask: {file: "mask.npy"}}                      one '0'/'1' string per row, or a .npy
//                                                         bool / uint8 file of shape (T, t)
//   {logical_and: [m1, m2, ...]}, {logical_or: [...]}     LogicalAnd / LogicalOr
// The strings "full" and "causal" are accepted for the first two.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ops/common/flash_attention/problem.h"
#include "ops/framework/tensor.h"

namespace tokamax {

// Checks and canonicalizes a mask argument for a [T, t] attention matrix: every class and field
// spelled out ({causal_mask: {offset: 0}}), numbers checked. Throws InvalidArgument naming
// `field` (and the path inside the mask) on anything else.
nlohmann::json canonical_splash_mask(const nlohmann::json& mask, int64_t T, int64_t t,
                                     const std::string& field);

// The visible keys of every row, built once from a canonical mask (and, when given, the segment
// ids: only keys of the row's segment stay visible). A FlashKeyMask for the kernels.
class SplashMask final : public FlashKeyMask {
 public:
  SplashMask(const nlohmann::json& canonical, int64_t T, int64_t t,
             // Inputs (null: no segments).
             const int32_t* q_segment_ids = nullptr,    // [T]
             const int32_t* kv_segment_ids = nullptr);  // [t]

  int64_t rows() const { return T_; }
  // Row r's runs [lo, hi), sorted and disjoint (none: the row sees no key).
  std::span<const std::pair<int64_t, int64_t>> runs(int64_t r) const {
    return {runs_.data() + start_[r], runs_.data() + start_[r + 1]};
  }
  // The mask of a call: segment ids from `inputs` when they hold q_segment_ids and
  // kv_segment_ids.
  static SplashMask of(const nlohmann::json& canonical, int64_t T, int64_t t,
                       const TensorMap& inputs);

  bool visible(int64_t r, int64_t j) const;
  // Keys row r sees.
  int64_t count(int64_t r) const;

  // The same for every batch and head: FlashKeyMask's queries without them.
  std::pair<int64_t, int64_t> key_range(int64_t r) const;
  KeyBlock block(int64_t r0, int64_t rows, int64_t j0, int64_t n) const;
  void mask_row(int64_t r, int64_t j0, int64_t c_lo, int64_t c_hi, float* s) const;

  std::pair<int64_t, int64_t> key_range(int64_t, int64_t r) const override { return key_range(r); }
  KeyBlock block(int64_t, int64_t r0, int64_t rows, int64_t j0, int64_t n) const override {
    return block(r0, rows, j0, n);
  }
  void mask_row(int64_t, int64_t, int64_t r, int64_t j0, int64_t c_lo, int64_t c_hi,
                float* s) const override {
    mask_row(r, j0, c_lo, c_hi, s);
  }

 private:
  int64_t T_ = 0;
  std::vector<int64_t> start_;                     // [T + 1] row r's runs in runs_
  std::vector<std::pair<int64_t, int64_t>> runs_;  // every row's runs, row after row
};

}  // namespace tokamax
