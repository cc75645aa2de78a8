// The flash-attention core's problem: key ranges and broadcast layouts.
//
// Dimensions: as problem.h (*B, B, T, t, H, h).
#include "ops/common/flash_attention/problem.h"

#include <algorithm>

namespace tokamax {
namespace {

AttentionBroadcast broadcast_layout(const TensorSpec& spec, const FlashAttentionProblem& p) {
  // Row-major strides of the stored tensor, then right-aligned onto [*B, H, T, t].
  const int rank = spec.rank();
  const int full_rank = static_cast<int>(p.batch.size()) + 3;
  std::vector<int64_t> stride(static_cast<size_t>(full_rank), 0);
  int64_t running = 1;
  for (int i = rank - 1; i >= 0; --i) {
    const int full_i = full_rank - rank + i;
    stride[full_i] = spec.dims[i] == 1 ? 0 : running;
    running *= spec.dims[i];
  }
  AttentionBroadcast layout;
  const int nb = static_cast<int>(p.batch.size());
  layout.stride_h = stride[nb];
  layout.stride_T = stride[nb + 1];
  layout.stride_t = stride[nb + 2];
  layout.batch_offset.assign(static_cast<size_t>(p.B), 0);
  for (int64_t b = 0; b < p.B; ++b) {
    int64_t rest = b, offset = 0;
    for (int i = nb - 1; i >= 0; --i) {
      offset += (rest % p.batch[i]) * stride[i];
      rest /= p.batch[i];
    }
    layout.batch_offset[b] = offset;
  }
  return layout;
}

}  // namespace

std::pair<int64_t, int64_t> FlashAttentionProblem::key_range(int64_t b, int64_t r) const {
  if (!q_seq_lengths.empty() && r >= q_seq_lengths[b]) return {0, 0};
  const int64_t keys = kv_seq_lengths.empty() ? t : kv_seq_lengths[b];
  int64_t lo = 0, hi = keys;
  if (is_causal && !causal_in_key_mask) hi = std::min(hi, r + causal_offset + 1);
  if (is_causal && !causal_in_key_mask && causal_window >= 0) {
    lo = std::max(lo, r + causal_offset - causal_window + 1);
  }
  if (window_left >= 0) lo = std::max(lo, r - window_left);
  if (window_right >= 0) hi = std::min(hi, r + window_right + 1);
  if (key_mask) {
    const auto [mask_lo, mask_hi] = key_mask->key_range(b, r);
    lo = std::max(lo, mask_lo);
    hi = std::min(hi, mask_hi);
  }
  lo = std::clamp<int64_t>(lo, 0, keys);  // an empty range never starts past the keys
  return {lo, std::max(lo, hi)};
}

double FlashAttentionProblem::visible_entries() const {
  double total = 0.0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t r = 0; r < T; ++r) {
      const auto [lo, hi] = key_range(b, r);
      total += static_cast<double>(hi - lo);
    }
  }
  return total;
}

AttentionBroadcast FlashAttentionProblem::broadcast(const TensorSpec& spec) const {
  return broadcast_layout(spec, *this);
}

AttentionBroadcast FlashAttentionProblem::bias_layout() const {
  return broadcast_layout(*bias, *this);
}
AttentionBroadcast FlashAttentionProblem::mask_layout() const {
  return broadcast_layout(*mask, *this);
}
AttentionBroadcast FlashAttentionProblem::dropout_layout() const {
  return broadcast_layout(*dropout_mask, *this);
}

}  // namespace tokamax
