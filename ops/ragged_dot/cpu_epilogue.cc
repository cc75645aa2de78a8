// ragged_dot: the f32 epilogue of a row's partial sums on the CPU.
//
// Dimensions: as cpu_epilogue.h.
#include "ops/ragged_dot/cpu_epilogue.h"

#include "ops/common/cpu_activation.h"

namespace tokamax {

RaggedDotEpilogue::RaggedDotEpilogue(const RaggedDotProblem& p, const Tensor* bias_tensor)
    : N(p.N), out_N(p.out_N()), activation(p.activation), gate_up(p.gate_up), situ(p.situ) {
  if (bias_tensor == nullptr) return;
  bias.resize(static_cast<size_t>(p.G * p.N));
  for (int64_t i = 0; i < p.G * p.N; ++i) bias[i] = static_cast<float>(bias_tensor->get(i));
}

void RaggedDotEpilogue::row(int64_t group, int64_t col0, int64_t cols, float* gate,
                            float* up) const {
  const float* gate_bias = bias.empty() ? nullptr : bias.data() + group * N + col0;
  const float* up_bias = gate_bias != nullptr && up != nullptr ? gate_bias + out_N : nullptr;
  if (gate_up == GateUp::kNone) {
    if (gate_bias == nullptr && activation == Activation::kNone) return;
    return cpu_biased_glu_row(activation, GluForm{}, gate, gate_bias, nullptr, nullptr, gate, cols);
  }
  // One pass: the biases, the (clamped) activation and the product.
  cpu_biased_glu_row(gate_activation(gate_up), glu_form(gate_up, situ), gate, gate_bias, up,
                     up_bias, gate, cols);
}

}  // namespace tokamax
