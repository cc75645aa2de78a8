// The flash-attention core's problem: the shapes, scalars and masks every attention op's CPU
// kernel hands the shared forward (forward.h) and backward (vjp.h) kernels.
//
// Dimensions.
//   *B     batch dimensions (any number, flattened to B = prod(*B) by the kernels)
//   T      query positions (rows);  t  key/value positions (columns)
//   H      query heads;  h  key/value heads; H = g * h (q heads [g*i, g*i+g) share kv head i)
//   D      q/k head dimension;  d  v head dimension
//
// Layouts the kernels read: q [B, T, H, D], k [B, t, h, D], v [B, t, h, d], out [B, T, H, d]
// (and the backward's dout, dq, dk, dv like them), or with heads_major every one of them with
// heads before positions, q [B, H, T, D] (splash's layout, read in place).
// K and V may instead live in pages (FlashKvPages: ragged_paged_attention's cache), read in place.
// Which keys row r sees is an interval per row (causal, local window, sequence lengths; see
// key_range) narrowed by an optional FlashKeyMask (any set of keys per row of each batch and
// head, built from the op's data), and per element by the optional bool mask tensor.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "ops/framework/dtype.h"
#include "ops/framework/tensor.h"

namespace tokamax {

// Where the element (b, hq, r, j) of a tensor broadcast to [*B, H, T, t] lives: numpy
// broadcasting, right-aligned; size-1 (or missing) dimensions have stride 0.
struct AttentionBroadcast {
  std::vector<int64_t> batch_offset;  // [B] offset of flattened batch b
  int64_t stride_h = 0, stride_T = 0, stride_t = 0;
  int64_t offset(int64_t b, int64_t hq, int64_t r, int64_t j) const {
    return batch_offset[b] + hq * stride_h + r * stride_T + j * stride_t;
  }
};

// How the keys of a block of rows and keys are masked by a FlashKeyMask.
enum class KeyBlock {
  kEmpty,      // no row sees a key of the block: the kernels skip it
  kInterval,   // each row's visible keys in the block are one interval: its key_range clips them
  kScattered,  // some row has holes: mask_row must mark them
};

// A mask of keys built once on the host (from masks the op's args describe, and the data they
// name), read by every task. The kernels ask it per block, so the blocks it calls interval need
// no per-element test. It may differ between batches and heads (alike_for_heads false).
class FlashKeyMask {
 public:
  virtual ~FlashKeyMask() = default;
  // An interval [lo, hi) holding every key row r of batch b sees, in every head (lo >= hi: none).
  virtual std::pair<int64_t, int64_t> key_range(int64_t b, int64_t r) const = 0;
  // The block of rows [r0, r0 + rows) and keys [j0, j0 + n) of batch b, over every head.
  virtual KeyBlock block(int64_t b, int64_t r0, int64_t rows, int64_t j0, int64_t n) const = 0;
  // Sets s[c] = -inf for the masked keys j0 + c of row r of head (b, hq), c in [c_lo, c_hi).
  virtual void mask_row(int64_t b, int64_t hq, int64_t r, int64_t j0, int64_t c_lo, int64_t c_hi,
                        float* s) const = 0;
  // Whether every q head sees the same keys (mask_row may then be asked once for all).
  virtual bool alike_for_heads() const { return true; }
};

// K and V read through a page table (ragged_paged_attention's cache) instead of the layouts above:
// key j of kv head i of batch b is row j % page_size of page pages[b * pages_per_batch + j /
// page_size], at element page * page_stride + (j % page_size) * row_stride + i * head_stride
// (+ value_offset for V) of one buffer that k and v both name. Rows of a page are row_stride
// apart; a run of keys that crosses a page is not one strided block (kv_rows in pack.h).
struct FlashKvPages {
  std::vector<int64_t> pages;
  int64_t pages_per_batch = 0, page_size = 1;
  int64_t page_stride = 0, row_stride = 0, head_stride = 0, value_offset = 0;

  int64_t at(int64_t b, int64_t j, int64_t i) const {
    return pages[b * pages_per_batch + j / page_size] * page_stride + (j % page_size) * row_stride +
           i * head_stride;
  }
};

struct FlashAttentionProblem {
  std::vector<int64_t> batch;  // *B
  int64_t B = 1, T = 0, t = 0, H = 0, h = 0, D = 0, d = 0;
  DType dtype = DType::kF32;  // q, k, v and the output
  double logits_scale = 1.0;
  bool is_causal = false;
  double logits_soft_cap = 0.0;                 // 0: no cap
  std::optional<TensorSpec> bias;               // broadcastable to [*B, H, T, t], any float dtype
  std::optional<TensorSpec> mask;               // bool, broadcastable to [*B, H, T, t], true = keep
  std::vector<int64_t> q_seq_lengths;           // [B] or empty (no limit)
  std::vector<int64_t> kv_seq_lengths;          // [B] or empty (no limit)
  int64_t window_left = -1, window_right = -1;  // local window; -1: unbounded
  // Under is_causal, upstream's CausalMask(offset, window_size): key j is visible from row r
  // iff j <= r + causal_offset and, with a window, j > r + causal_offset - causal_window
  // (is_causal alone: offset 0, no window).
  int64_t causal_offset = 0;
  int64_t causal_window = -1;     // -1: none
  bool return_residuals = false;  // also output lse [*B, H, T] f32
  // Upstream's logits_dtype bf16: the finished logits (scale, bias, cap) rounded to bf16 before
  // the softmax.
  bool bf16_logits = false;
  // false: out = sum_j exp(logit_j - max) v_j, the softmax's numerator without the division
  // (upstream's normalize_output; max the row's largest visible logit).
  bool normalize_output = true;
  // Upstream's dropout: the softmax weights times dropout_mask / (1 - dropout_rate), after
  // normalization (the denominator sums the weights before it; lse is unchanged).
  std::optional<TensorSpec> dropout_mask;  // bool, broadcastable to [*B, H, T, t]
  double dropout_rate = 0.0;
  // Keys masked by data the op was given (null: none). Shared: problems are copied.
  std::shared_ptr<const FlashKeyMask> key_mask;
  // The key mask applies is_causal (and the causal band) itself, on token indices rather than
  // positions: key_range leaves them out.
  bool causal_in_key_mask = false;
  // Attention sinks, [H] logits (empty: none): a term exp(sinks[hq]) in each row's softmax
  // denominator with no value, so rows of head hq sum to less than one.
  std::vector<float> sinks;

  // q, k, v, out (and dout, dq, dk, dv) as [B, heads, positions, X] instead of [B, positions,
  // heads, X].
  bool heads_major = false;
  // K and V in pages (forward only; the backward refuses them).
  std::optional<FlashKvPages> kv_pages;

  int64_t groups() const { return H / h; }  // g
  // The element offset of (b, position, head) in an operand of `positions` x `heads` rows of X
  // elements, and the stride between its positions, under the layout above.
  int64_t offset(int64_t b, int64_t position, int64_t head, int64_t positions, int64_t heads,
                 int64_t X) const {
    return heads_major ? ((b * heads + head) * positions + position) * X
                       : ((b * positions + position) * heads + head) * X;
  }
  int64_t position_stride(int64_t heads, int64_t X) const { return heads_major ? X : heads * X; }
  // Row r of q head hq (q, dq); of out head hq (out, dout); key j of kv head i (k, dk; v, dv).
  int64_t q_at(int64_t b, int64_t r, int64_t hq) const { return offset(b, r, hq, T, H, D); }
  int64_t out_at(int64_t b, int64_t r, int64_t hq) const { return offset(b, r, hq, T, H, d); }
  int64_t k_at(int64_t b, int64_t j, int64_t i) const {
    return kv_pages ? kv_pages->at(b, j, i) : offset(b, j, i, t, h, D);
  }
  int64_t v_at(int64_t b, int64_t j, int64_t i) const {
    return kv_pages ? kv_pages->at(b, j, i) + kv_pages->value_offset : offset(b, j, i, t, h, d);
  }
  int64_t q_stride() const { return position_stride(H, D); }
  int64_t out_stride() const { return position_stride(H, d); }
  // Between keys j and j + 1 (paged: within one page).
  int64_t k_stride() const { return kv_pages ? kv_pages->row_stride : position_stride(h, D); }
  int64_t v_stride() const { return kv_pages ? kv_pages->row_stride : position_stride(h, d); }
  bool has_local_window() const { return window_left >= 0; }
  // A causal mask other than the plain diagonal (an offset or a window).
  bool has_causal_band() const { return is_causal && (causal_offset != 0 || causal_window >= 0); }
  // The keys [lo, hi) row r of batch b may see under causal, local window, sequence lengths and
  // the key mask's interval (each part is one, and they AND together). Causal aligns top-left:
  // key j is visible from row r iff j <= r + causal_offset, also when T != t (upstream
  // Tokamax's convention). Empty (lo >= hi) for rows past q_seq_lengths[b]. The key mask's
  // holes and the bool mask come on top of this.
  std::pair<int64_t, int64_t> key_range(int64_t b, int64_t r) const;
  // Sum over batches and rows of key_range's length: the (b, r, j) entries the structural masks
  // (causal, window, band, sequence lengths, key mask) leave visible, per head.
  double visible_entries() const;
  // How the key mask masks a block (kInterval without one).
  KeyBlock key_block(int64_t b, int64_t r0, int64_t rows, int64_t j0, int64_t n) const {
    return key_mask ? key_mask->block(b, r0, rows, j0, n) : KeyBlock::kInterval;
  }
  // Whether the key mask leaves key j visible from row r of head (b, hq) (true without one;
  // one element at a time: for references and oracles).
  bool key_visible(int64_t b, int64_t hq, int64_t r, int64_t j) const {
    if (!key_mask) return true;
    float s = 0.0f;
    key_mask->mask_row(b, hq, r, j, 0, 1, &s);
    return s == 0.0f;
  }
  // Where the elements of a tensor broadcast to [*B, H, T, t] live.
  AttentionBroadcast broadcast(const TensorSpec& spec) const;
  AttentionBroadcast bias_layout() const;
  AttentionBroadcast mask_layout() const;
  AttentionBroadcast dropout_layout() const;
  // The factor a kept weight is multiplied by, 1 / (1 - dropout_rate).
  double dropout_scale() const { return 1.0 / (1.0 - dropout_rate); }
};

}  // namespace tokamax
