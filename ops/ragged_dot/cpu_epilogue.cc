// ragged_dot: the f32 epilogue of a row's partial sums on the CPU.
//
// Dimensions: as cpu_epilogue.h.
#include "ops/ragged_dot/cpu_epilogue.h"

#include <algorithm>

#include "ops/common/cpu_activation.h"

namespace tokamax {
namespace {

constexpr float kAlpha = static_cast<float>(kSwigluOaiAlpha);
constexpr float kInvAlpha = static_cast<float>(1.0 / kSwigluOaiAlpha);
constexpr float kLimit = static_cast<float>(kSwigluOaiLimit);

}  // namespace

RaggedDotEpilogue::RaggedDotEpilogue(const RaggedDotProblem& p, const Tensor* bias_tensor)
    : N(p.N), out_N(p.out_N()), activation(p.activation), gate_up(p.gate_up) {
  if (bias_tensor == nullptr) return;
  bias.resize(static_cast<size_t>(p.G * p.N));
  for (int64_t i = 0; i < p.G * p.N; ++i) bias[i] = static_cast<float>(bias_tensor->get(i));
}

void RaggedDotEpilogue::row(int64_t group, int64_t col0, int64_t cols, float* gate,
                            float* up) const {
  if (!bias.empty()) {
    const float* b = bias.data() + group * N + col0;
    for (int64_t c = 0; c < cols; ++c) gate[c] += b[c];
    if (up != nullptr) {
      for (int64_t c = 0; c < cols; ++c) up[c] += b[out_N + c];
    }
  }
  switch (gate_up) {
    case GateUp::kNone:
      if (activation != Activation::kNone) cpu_activation_row(activation, gate, cols);
      return;
    case GateUp::kSilu:
    case GateUp::kGelu:
    case GateUp::kGeluErf:
      return cpu_glu_row(gate_activation(gate_up), gate, up, gate, cols);
    case GateUp::kSwigluOai:
      // (clamp(up) + 1) * g sigmoid(alpha g), g = min(gate, limit), as silu(alpha g) / alpha:
      // the vectorized silu, with the clamps and scalings as plain loops the compiler vectorizes.
      for (int64_t c = 0; c < cols; ++c) {
        gate[c] = kAlpha * std::min(gate[c], kLimit);
        up[c] = (std::clamp(up[c], -kLimit, kLimit) + 1.0f) * kInvAlpha;
      }
      return cpu_glu_row(Activation::kSilu, gate, up, gate, cols);
  }
}

}  // namespace tokamax
