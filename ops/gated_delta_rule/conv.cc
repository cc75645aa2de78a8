// gated_delta_rule: what every implementation shares: the gate activations and the conv with
// silu, rounded as upstream rounds them (base.h).
//
// Dimensions: as base.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/thread_pool.h"
#include "ops/common/delta_rule_rows.h"
#include "ops/framework/dtype_dispatch.h"
#include "ops/gated_delta_rule/base.h"

namespace tokamax {

template <typename Acc>
Acc gdn_log_decay(Acc a, Acc a_log, Acc dt_bias) {
  const Acc x = a + dt_bias;
  const Acc softplus = std::max(x, Acc(0)) + std::log1p(std::exp(-std::fabs(x)));
  return -std::exp(a_log) * softplus;
}
template float gdn_log_decay<float>(float, float, float);
template double gdn_log_decay<double>(double, double, double);

template <typename Acc>
Acc gdn_beta(Acc b) {
  return Acc(1) / (Acc(1) + std::exp(-b));
}
template float gdn_beta<float>(float);
template double gdn_beta<double>(double);

namespace {

// Tokens per conv task: a block's f32 input rows ((64 + W - 1) x C) stay in L2.
constexpr int64_t kConvBlock = 64;

}  // namespace

void gdn_conv_silu(const GdnProblem& p, const TensorMap& inputs, int threads, GdnConvLayout layout,
                   float* mixed, Tensor& conv_state) {
  const Tensor& x = inputs.at("qkv");
  const Tensor& old_state = inputs.at("conv_state");
  const int64_t C = p.C, W = p.W, A = p.active(), rows = W - 1;
  // Slots no active request rewrites are copied through; an active request's rows are written
  // whole by the task holding its last tokens.
  const size_t slot_bytes = static_cast<size_t>(rows * C) * dtype_size(old_state.dtype());
  std::vector<bool> rewritten(static_cast<size_t>(p.NB), false);
  for (int64_t r = 0; r < A; ++r) rewritten[p.state_indices[r]] = true;
  for (int64_t slot = 0; slot < p.NB; ++slot) {
    if (!rewritten[slot]) {
      std::memcpy(static_cast<char*>(conv_state.raw()) + slot * slot_bytes,
                  static_cast<const char*>(old_state.raw()) + slot * slot_bytes, slot_bytes);
    }
  }
  const bool head_major = layout == GdnConvLayout::kHeadMajor;
  if (!head_major) {  // padding tokens' rows are zeros
    const int64_t valid_end = p.query_start_loc[A];
    std::memset(mixed + valid_end * C, 0,
                static_cast<size_t>((p.T - valid_end) * C) * sizeof(float));
  }
  // Where each run of channels goes: the whole row [C] token-major, or head by head (q, k, then
  // v heads) into the head-major rows; token t's row of a run at base + t * stride.
  struct Run {
    int64_t c0, n;
    float* base;
    int64_t stride;
  };
  std::vector<Run> runs;
  if (head_major) {
    const GdnHeadMajor at = p.head_major();
    for (int64_t hk = 0; hk < p.n_kq; ++hk)
      runs.push_back({hk * p.d_k, p.d_k, mixed + at.q(0, hk), p.d_k});
    for (int64_t hk = 0; hk < p.n_kq; ++hk) {
      runs.push_back({(p.n_kq + hk) * p.d_k, p.d_k, mixed + at.k(0, hk), p.d_k});
    }
    for (int64_t h = 0; h < p.n_v; ++h) {
      runs.push_back({2 * p.n_kq * p.d_k + h * p.d_v, p.d_v, mixed + at.v(0, h), p.d_v});
    }
  } else {
    runs.push_back({0, C, mixed, C});
  }
  struct Task {
    int64_t r, j0;
  };
  std::vector<Task> tasks;
  for (int64_t r = 0; r < A; ++r) {
    // A request without tokens gets one empty task: its new state is its old one.
    for (int64_t j0 = 0; j0 == 0 || j0 < p.tokens(r); j0 += kConvBlock) tasks.push_back({r, j0});
  }
  dispatch_float(p.dtype, [&](auto type) {
    using X = decltype(type);
    const X* xs = x.data<X>();
    const X* old = old_state.data<X>();
    X* next = conv_state.data<X>();
    // f32 copies of the weights [W, C] (tap-major: a token's taps stream over contiguous C) and
    // the bias (each in its own dtype).
    std::vector<float> w(static_cast<size_t>(W * C)), bias(static_cast<size_t>(C), 0.0f);
    const Tensor& weight = inputs.at("conv_weight");
    {
      std::vector<float> by_channel(static_cast<size_t>(C * W));  // [C, W] as stored
      delta_rule_load_state(weight.dtype(), weight.raw(), by_channel.data(), C * W);
      for (int64_t c = 0; c < C; ++c) {
        for (int64_t k = 0; k < W; ++k) w[k * C + c] = by_channel[c * W + k];
      }
    }
    if (p.has_conv_bias) {
      const Tensor& b = inputs.at("conv_bias");
      delta_rule_load_state(b.dtype(), b.raw(), bias.data(), C);
    }
    // Row i of request r's input stream: its conv state's W - 1 rows (null: zeros, without an
    // initial state), then its tokens.
    auto stream_row = [&](int64_t r, int64_t i) -> const X* {
      if (i >= rows) return xs + (p.query_start_loc[r] + i - rows) * C;
      return p.conv_from_slot(r) ? old + (p.state_indices[r] * rows + i) * C : nullptr;
    };
    cpu::parallel_for(static_cast<int64_t>(tasks.size()), threads, [&](int64_t index, int) {
      const auto [r, j0] = tasks[index];
      const int64_t n = std::min(kConvBlock, p.tokens(r) - j0);
      thread_local std::vector<float> in;
      if (static_cast<int64_t>(in.size()) < (n + rows) * C) in.resize((n + rows) * C);
      for (int64_t i = 0; i < n + rows; ++i) {
        const X* src = stream_row(r, j0 + i);
        float* dst = in.data() + i * C;
        if (src) {
          delta_rule_load_state(p.dtype, src, dst, C);
        } else {
          std::fill_n(dst, C, 0.0f);
        }
      }
      for (int64_t j = j0; j < j0 + n; ++j) {
        // Token j reads stream rows j .. j + W - 1. The first W - 1 tokens (every token of a
        // decode-only batch) round the sum, then add the bias and round again; the rest add the
        // bias first and round once (upstream's two conv paths).
        const bool boundary = j < rows || p.decode_only();
        const int64_t t = p.query_start_loc[r] + j;
        for (const Run& run : runs) {
          gdn_conv_row(p.dtype, w.data() + run.c0, W, in.data() + (j - j0) * C + run.c0,
                       p.has_conv_bias ? bias.data() + run.c0 : nullptr, boundary,
                       run.base + t * run.stride, run.n, C);
        }
      }
      if (j0 + n < p.tokens(r)) return;
      // The request's new conv state: its stream's last W - 1 rows, copied.
      X* dst = next + p.state_indices[r] * rows * C;
      for (int64_t i = 0; i < rows; ++i) {
        const X* src = stream_row(r, p.tokens(r) + i);
        if (src) {
          std::memcpy(dst + i * C, src, static_cast<size_t>(C) * sizeof(X));
        } else {
          std::fill_n(dst + i * C, C, X{});  // +0 in every dtype
        }
      }
    });
  });
}

}  // namespace tokamax
