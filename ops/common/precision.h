// `precision`, upstream's argument of its matmul ops (tokamax/_src/precision.py): how the
// operands of a contraction are multiplied. `default`, `high` and `highest` are jax.lax.Precision
// and keep the operands as they are (upstream's CPU map: f32 -> f32_f32_f32, bf16 ->
// bf16_bf16_f32, f16 -> f16_f16_f32). The presets (jax.lax.DotAlgorithmPreset, lower case) round
// wider operands to their input type, and the _x3 / _x6 / _x9 ones split each operand into 2-3
// pieces of that type and sum 3, 6 or 9 products of pieces in f32, as MKL's BF16X3 compute mode
// and XLA's TPU emulation of f32 do.
//
// Every op runs a preset the same way (plan_precision, expand_operand): the pieces go side by side
// along the contraction, lhs [a0 | a0 | a1] against rhs [b0 | b1 | b0] for _x3, so a product of
// the expanded operands is the preset's sum of piece products, computed by the kernels that
// multiply that piece type (bf16 dot, AMX tiles, f32 FMA on tf32 values).
//
// Dimensions.
//   K      contraction extent of the operands as given
//   P      products summed per term (passes): 1, 3, 6 or 9; the expanded contraction is P K
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ops/framework/dtype.h"
#include "ops/framework/tensor.h"

namespace tokamax {

enum class DotPrecision {
  kDefault,
  kHigh,
  kHighest,
  kF16F16F32,
  kBf16Bf16F32,
  kBf16Bf16F32X3,
  kBf16Bf16F32X6,
  kBf16Bf16F32X9,
  kTf32Tf32F32,
  kTf32Tf32F32X3,
  kF32F32F32,
};

// "default", "high", "highest", "f16_f16_f32", "bf16_bf16_f32", "bf16_bf16_f32_x3", ...
std::string_view precision_name(DotPrecision precision);
// Accepts the names above and upstream's upper-case preset names; throws InvalidArgument listing
// the accepted names.
DotPrecision parse_precision(std::string_view name);

// The `precision` argument of a matmul op's bind: kDefault when absent or null, else a name the
// operands can take. Throws InvalidArgument prefixed with `op_prefix` ("ragged_dot: "), field
// "precision", for a non-string, an unknown name, or a preset the operands cannot take.
DotPrecision bind_precision(const nlohmann::json& args, const std::string& op_prefix, DType lhs,
                            DType rhs);

// How a product with `precision` runs on operands of the given dtypes.
struct PrecisionPlan {
  DotPrecision precision = DotPrecision::kDefault;
  // The type the pieces are stored in: bf16, f16, or f32 (holding tf32 values); the operands'
  // own dtypes when identity().
  DType piece_dtype = DType::kF32;
  // The products summed, as (lhs piece, rhs piece); pieces an operand does not need (a bf16
  // operand's second bf16 piece is zero) are left out.
  std::vector<std::pair<int, int>> pairs = {{0, 0}};
  bool round_lhs = false, round_rhs = false;  // whether each operand changes at all
  // The relative error of each term a_k b_k from rounding or splitting the operands (0 when
  // identity()): the error model adds it to the accumulation's (ErrorModel::operand_roundoff).
  double operand_roundoff = 0.0;

  // The operands are multiplied as given (no expansion, today's numerics).
  bool identity() const { return !round_lhs && !round_rhs; }
  int64_t passes() const { return static_cast<int64_t>(pairs.size()); }
  // Whether the lhs (or rhs) operand is expanded: it rounds, or the other one's pieces need it
  // repeated. One that is not (a bf16 head under bf16_bf16_f32) is used as given.
  bool expands(bool is_lhs) const { return (is_lhs ? round_lhs : round_rhs) || passes() > 1; }
  // The operand's dtype in the computed problem: the pieces' where it expands, else `given`.
  DType operand_dtype(bool is_lhs, DType given) const {
    return expands(is_lhs) ? piece_dtype : given;
  }
};

// Throws InvalidArgument (field "precision") for a preset on operands it cannot take: f64, or
// the quantized storage types (their scales are applied in f32 by every path).
PrecisionPlan plan_precision(DotPrecision precision, DType lhs, DType rhs);

// Piece `index` (0-2) of x in the plan's piece type: piece 0 is x rounded to it, piece i the
// rounding of what the earlier pieces left (x - p0 - ... - p(i-1), exact in f32). Returned as
// float (exact: every piece type is a subset of f32).
float precision_piece(const PrecisionPlan& plan, float x, int index);

// The operand expanded for the plan: `source` with its `axis` (the contraction, extent K) made
// P K long, block j (elements [j K, (j + 1) K)) holding the piece pairs[j].first (lhs) or
// pairs[j].second (rhs) of each element, in plan.piece_dtype. `outer_used` (empty: all) marks
// the indices of the dimensions before `axis` (flattened) that are read: the others stay zero
// (ragged_dot's empty groups). Threaded on the CPU pool; host tensors only.
Tensor expand_operand(const Tensor& source, int axis, const PrecisionPlan& plan, bool is_lhs,
                      const std::vector<bool>& outer_used = {});

}  // namespace tokamax
