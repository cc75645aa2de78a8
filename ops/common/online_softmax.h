// The online softmax (Milakov & Gimelshein 2018): a running maximum and a running sum of
// exponentials for a row that is streamed in blocks, so softmax(x), log-sum-exp(x) and
// softmax(x) @ V can be computed without materialising the row. Shared by the references (at
// double) and the CPU kernels' bookkeeping (at float) of dot_product_attention and
// linear_softmax_cross_entropy_loss.
//
// Masked entries are -inf. A row whose entries are all -inf keeps max = -inf and sum = 0; callers
// turn that into zeros (attention) rather than NaN.
#pragma once

#include <cmath>
#include <limits>

namespace tokamax {

template <typename T>
struct OnlineSoftmax {
  T max = -std::numeric_limits<T>::infinity();
  T sum = T(0);  // sum of exp(x - max) over the entries seen

  bool empty() const { return max == -std::numeric_limits<T>::infinity(); }

  // Folds in one entry.
  void add(T x) {
    if (x == -std::numeric_limits<T>::infinity()) return;
    if (x > max) {
      sum = sum * std::exp(max - x) + T(1);
      max = x;
    } else {
      sum += std::exp(x - max);
    }
  }

  // Folds in a block already reduced to (block_max, sum of exp(x - block_max)). Returns the
  // factor, exp(old max - new max), by which anything accumulated against the old maximum
  // (attention's output row) must be rescaled; 1 when the maximum did not move.
  T merge(T block_max, T block_sum) {
    if (block_max == -std::numeric_limits<T>::infinity()) return T(1);
    if (block_max <= max) {
      sum += block_sum * std::exp(block_max - max);
      return T(1);
    }
    const T rescale = empty() ? T(0) : std::exp(max - block_max);
    sum = sum * rescale + block_sum;
    max = block_max;
    return rescale;
  }

  // log(sum exp(x)); -inf for an empty row.
  T log_sum_exp() const { return empty() ? max : max + std::log(sum); }
};

}  // namespace tokamax
