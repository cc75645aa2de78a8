// `precision`: names, plans and the operand expansion (precision.h).
#include "ops/common/precision.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>
#include <type_traits>

#include "backends/cpu/thread_pool.h"
#include "ops/framework/dtype_dispatch.h"
#include "ops/framework/errors.h"

namespace tokamax {
namespace {

constexpr DotPrecision kAll[] = {
    DotPrecision::kDefault,       DotPrecision::kHigh,          DotPrecision::kHighest,
    DotPrecision::kF16F16F32,     DotPrecision::kBf16Bf16F32,   DotPrecision::kBf16Bf16F32X3,
    DotPrecision::kBf16Bf16F32X6, DotPrecision::kBf16Bf16F32X9, DotPrecision::kTf32Tf32F32,
    DotPrecision::kTf32Tf32F32X3, DotPrecision::kF32F32F32,
};

// A preset's input type and products.
struct Preset {
  enum class Piece { kNone, kBf16, kF16, kTf32 } piece = Piece::kNone;
  std::vector<std::pair<int, int>> pairs = {{0, 0}};
  // Each term's relative error when the operands are f32 (the widest they may be). One rounding
  // of both operands to a type of unit roundoff u: (1 + u)^2 - 1 = 2u + u^2. The splits keep the
  // pieces' products that are not much smaller than the dropped ones: with pieces of u = 2^-8,
  // a = a0 + a1 + r with |a1| <= 2^-8 |a| and |r| <= 2^-16 |a|, _x3 drops a1 b1 and the r terms,
  // about 3 * 2^-16 |ab| (bounded by 2^-14); _x6 drops a1 b2, a2 b1, a2 b2 and r (now 2^-24 |a|)
  // terms, about 4 * 2^-24 (2^-21); _x9 only the r terms, 2 * 2^-24 (2^-22); tf32_x3 (u = 2^-11)
  // a1 b1 and r terms, about 3 * 2^-22 (2^-20).
  double roundoff = 0.0;
};

Preset preset_of(DotPrecision precision) {
  using Piece = Preset::Piece;
  const std::vector<std::pair<int, int>> x3 = {{0, 0}, {0, 1}, {1, 0}};
  std::vector<std::pair<int, int>> x6 = x3;
  x6.insert(x6.end(), {{0, 2}, {1, 1}, {2, 0}});
  std::vector<std::pair<int, int>> x9 = x6;
  x9.insert(x9.end(), {{1, 2}, {2, 1}, {2, 2}});
  switch (precision) {
    case DotPrecision::kF16F16F32:
      return {Piece::kF16, {{0, 0}}, 0x1p-10 + 0x1p-22};
    case DotPrecision::kBf16Bf16F32:
      return {Piece::kBf16, {{0, 0}}, 0x1p-7 + 0x1p-16};
    case DotPrecision::kBf16Bf16F32X3:
      return {Piece::kBf16, x3, 0x1p-14};
    case DotPrecision::kBf16Bf16F32X6:
      return {Piece::kBf16, x6, 0x1p-21};
    case DotPrecision::kBf16Bf16F32X9:
      return {Piece::kBf16, x9, 0x1p-22};
    case DotPrecision::kTf32Tf32F32:
      return {Piece::kTf32, {{0, 0}}, 0x1p-10 + 0x1p-22};
    case DotPrecision::kTf32Tf32F32X3:
      return {Piece::kTf32, x3, 0x1p-20};
    default:
      return {};
  }
}

// Significand bits (the implicit one included).
int significand_bits(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 24;
    case DType::kF16:
      return 11;
    case DType::kBF16:
      return 8;
    default:
      return 53;
  }
}

// Round to nearest even at tf32's 10 stored mantissa bits, in f32 storage; NaN and inf stay.
float round_to_tf32(float x) {
  uint32_t bits = std::bit_cast<uint32_t>(x);
  if ((bits & 0x7f800000u) == 0x7f800000u) return x;
  bits += 0xfffu + ((bits >> 13) & 1u);
  return std::bit_cast<float>(bits & ~0x1fffu);
}

// Round to nearest even at bf16's 7 stored mantissa bits, in f32 storage; finite values only
// (the callers keep inf and NaN out), inline so that the expansion loop stays call-free.
inline float round_to_bf16_finite(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  return std::bit_cast<float>((bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u);
}

// Below this many source elements the expansion runs on the calling thread.
constexpr int64_t kSerialElements = int64_t{1} << 17;

float round_to_piece(Preset::Piece piece, float x) {
  switch (piece) {
    case Preset::Piece::kBf16:
      return std::isfinite(x) ? round_to_bf16_finite(x) : bf16_to_float(float_to_bf16(x));
    case Preset::Piece::kF16:
      return f16_to_float(float_to_f16(x));
    case Preset::Piece::kTf32:
      return round_to_tf32(x);
    case Preset::Piece::kNone:
      break;
  }
  return x;
}

// Pieces 0..count-1 of x into `pieces`: piece 0 is x rounded to the piece type, piece i the
// rounding of what the earlier ones left; inf and NaN are all in piece 0.
void split_value(Preset::Piece piece, float x, int count, float* pieces) {
  if (!std::isfinite(x)) {
    pieces[0] = round_to_piece(piece, x);
    for (int i = 1; i < count; ++i) pieces[i] = 0.0f;
    return;
  }
  float rest = x;
  for (int i = 0; i < count; ++i) {
    pieces[i] = round_to_piece(piece, rest);
    rest -= pieces[i];  // exact: the piece is rest rounded to fewer bits
  }
}

// Stores a piece (exactly representable in Out).
template <typename Out>
inline Out store_piece(float value) {
  if constexpr (std::is_same_v<Out, bf16>) {
    return bf16{static_cast<uint16_t>(std::bit_cast<uint32_t>(value) >> 16)};
  } else {
    return from_double<Out>(value);
  }
}

Preset::Piece piece_kind(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return Preset::Piece::kBf16;
    case DType::kF16:
      return Preset::Piece::kF16;
    default:
      return Preset::Piece::kTf32;
  }
}

// Whether an operand of `dtype` changes when rounded to the piece type, and how many pieces
// represent it (the pieces beyond are zero).
bool rounds(DType dtype, Preset::Piece piece) {
  if (piece == Preset::Piece::kNone) return false;
  // bf16 into f16: the significand fits, but not bf16's exponent range.
  if (dtype == DType::kBF16) return piece == Preset::Piece::kF16;
  if (dtype == DType::kF16) return piece == Preset::Piece::kBf16;
  return true;  // f32
}
int pieces_needed(DType dtype, Preset::Piece piece) {
  const int piece_bits = piece == Preset::Piece::kBf16 ? 8 : 11;
  return std::min(3, (significand_bits(dtype) + piece_bits - 1) / piece_bits);
}

// Piece `kIndex` of finite-or-not f32 values as bf16 bits, branch-free so that the loop over a
// row vectorizes: the same values as split_value (non-finite values: piece 0 holds them as
// float_to_bf16 does, quiet; later pieces are zero).
template <int kIndex>
inline uint16_t bf16_piece_bits(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const bool finite = (bits & 0x7f800000u) != 0x7f800000u;
  float rest = finite ? x : 0.0f;
  uint32_t rounded = 0;
  for (int t = 0; t <= kIndex; ++t) {
    const uint32_t rest_bits = std::bit_cast<uint32_t>(rest);
    rounded = (rest_bits + 0x7fffu + ((rest_bits >> 16) & 1u)) & 0xffff0000u;
    rest -= std::bit_cast<float>(rounded);
  }
  if (kIndex == 0 && !finite) {
    const bool nan = (bits & 0x007fffffu) != 0;
    rounded = (bits & 0xffff0000u) | (nan ? 0x00400000u : 0u);
  }
  return static_cast<uint16_t>(rounded >> 16);
}

// One row of `count` f32 values into bf16 piece `index`.
void bf16_piece_row(const float* from, int64_t count, int index, bf16* to) {
  uint16_t* out = reinterpret_cast<uint16_t*>(to);
  switch (index) {
    case 0:
      for (int64_t i = 0; i < count; ++i) out[i] = bf16_piece_bits<0>(from[i]);
      break;
    case 1:
      for (int64_t i = 0; i < count; ++i) out[i] = bf16_piece_bits<1>(from[i]);
      break;
    default:
      for (int64_t i = 0; i < count; ++i) out[i] = bf16_piece_bits<2>(from[i]);
      break;
  }
}

}  // namespace

std::string_view precision_name(DotPrecision precision) {
  switch (precision) {
    case DotPrecision::kDefault:
      return "default";
    case DotPrecision::kHigh:
      return "high";
    case DotPrecision::kHighest:
      return "highest";
    case DotPrecision::kF16F16F32:
      return "f16_f16_f32";
    case DotPrecision::kBf16Bf16F32:
      return "bf16_bf16_f32";
    case DotPrecision::kBf16Bf16F32X3:
      return "bf16_bf16_f32_x3";
    case DotPrecision::kBf16Bf16F32X6:
      return "bf16_bf16_f32_x6";
    case DotPrecision::kBf16Bf16F32X9:
      return "bf16_bf16_f32_x9";
    case DotPrecision::kTf32Tf32F32:
      return "tf32_tf32_f32";
    case DotPrecision::kTf32Tf32F32X3:
      return "tf32_tf32_f32_x3";
    case DotPrecision::kF32F32F32:
      return "f32_f32_f32";
  }
  return "?";
}

DotPrecision parse_precision(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  // jax.lax.Precision's aliases.
  if (lower == "fastest") lower = "default";
  if (lower == "float32") lower = "highest";
  std::string known;
  for (DotPrecision precision : kAll) {
    if (precision_name(precision) == lower) return precision;
    known += (known.empty() ? "" : ", ") + std::string(precision_name(precision));
  }
  throw InvalidArgument(
      "unknown precision '" + std::string(name) + "' (expected one of " + known + ")", "precision");
}

PrecisionPlan plan_precision(DotPrecision precision, DType lhs, DType rhs) {
  PrecisionPlan plan;
  plan.precision = precision;
  const Preset preset = preset_of(precision);
  const bool is_preset = precision != DotPrecision::kDefault && precision != DotPrecision::kHigh &&
                         precision != DotPrecision::kHighest;
  for (DType dtype : {lhs, rhs}) {
    if (is_preset && !(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16)) {
      throw InvalidArgument("precision=" + std::string(precision_name(precision)) +
                                " takes f32, bf16 or f16 operands, not " +
                                std::string(dtype_name(dtype)) +
                                " (default, high and highest keep any operand as it is)",
                            "precision");
    }
  }
  plan.round_lhs = rounds(lhs, preset.piece);
  plan.round_rhs = rounds(rhs, preset.piece);
  if (plan.identity()) {
    plan.piece_dtype = lhs == rhs ? lhs : DType::kF32;
    return plan;
  }
  plan.piece_dtype = preset.piece == Preset::Piece::kBf16  ? DType::kBF16
                     : preset.piece == Preset::Piece::kF16 ? DType::kF16
                                                           : DType::kF32;
  const int lhs_pieces = pieces_needed(lhs, preset.piece);
  const int rhs_pieces = pieces_needed(rhs, preset.piece);
  plan.pairs.clear();
  for (const auto& [i, j] : preset.pairs) {
    if (i < lhs_pieces && j < rhs_pieces) plan.pairs.push_back({i, j});
  }
  plan.operand_roundoff = preset.roundoff;
  return plan;
}

DotPrecision bind_precision(const nlohmann::json& args, const std::string& op_prefix, DType lhs,
                            DType rhs) {
  if (!args.contains("precision") || args.at("precision").is_null()) {
    return DotPrecision::kDefault;
  }
  const nlohmann::json& value = args.at("precision");
  if (!value.is_string()) {
    throw InvalidArgument(op_prefix + "precision must be a name (a string), got " + value.dump(),
                          "precision");
  }
  try {
    const DotPrecision precision = parse_precision(value.get<std::string>());
    plan_precision(precision, lhs, rhs);
    return precision;
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(op_prefix + e.what(), "precision");
  }
}

float precision_piece(const PrecisionPlan& plan, float x, int index) {
  if (plan.identity()) return index == 0 ? x : 0.0f;
  float pieces[3];
  split_value(piece_kind(plan.piece_dtype), x, index + 1, pieces);
  return pieces[index];
}

Tensor expand_operand(const Tensor& source, int axis, const PrecisionPlan& plan, bool is_lhs,
                      const std::vector<bool>& outer_used) {
  const std::vector<int64_t>& dims = source.dims();
  if (axis < 0 || axis >= static_cast<int>(dims.size())) {
    throw InvalidArgument("expand_operand: axis " + std::to_string(axis) + " of a rank-" +
                          std::to_string(dims.size()) + " tensor");
  }
  const int64_t P = plan.passes(), K = dims[axis];
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= dims[d];
  for (size_t d = axis + 1; d < dims.size(); ++d) inner *= dims[d];
  if (!outer_used.empty() && static_cast<int64_t>(outer_used.size()) != outer) {
    throw InvalidArgument("expand_operand: outer_used has " + std::to_string(outer_used.size()) +
                          " entries for " + std::to_string(outer) + " outer indices");
  }
  TensorSpec spec{plan.piece_dtype, dims};
  spec.dims[axis] = P * K;
  Tensor out(spec);
  std::vector<int> piece_of(static_cast<size_t>(P));
  for (int64_t j = 0; j < P; ++j) piece_of[j] = is_lhs ? plan.pairs[j].first : plan.pairs[j].second;
  int num_pieces = 1;
  for (int piece : piece_of) num_pieces = std::max(num_pieces, piece + 1);
  // Tasks of about 64K source elements: (outer index, a range of k); each element is split once
  // and its pieces written to every block that takes one.
  const int64_t k_chunk = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(inner, 1));
  const int64_t k_chunks = (K + k_chunk - 1) / k_chunk;
  const Preset::Piece kind = piece_kind(plan.piece_dtype);
  dispatch_float(source.dtype(), [&](auto in_type) {
    using In = decltype(in_type);
    const In* src = source.data<In>();
    dispatch_float(plan.piece_dtype, [&](auto out_type) {
      using Out = decltype(out_type);
      Out* dst = out.data<Out>();
      // Operands of a few tasks' worth are split on the calling thread: waking the pool costs
      // more than the work.
      const int threads = outer * K * inner <= kSerialElements ? 1 : 0;
      cpu::parallel_for(outer * k_chunks, threads, [&](int64_t task, int) {
        const int64_t o = task / k_chunks;
        if (!outer_used.empty() && !outer_used[o]) return;
        const int64_t k0 = task % k_chunks * k_chunk, k1 = std::min(K, k0 + k_chunk);
        if constexpr (std::is_same_v<In, float> && std::is_same_v<Out, bf16>) {
          // The common case (f32 operands, bf16 pieces): vectorized passes over contiguous
          // runs, the k range when the contraction is the last axis (inner = 1), else rows.
          const int64_t runs = inner == 1 ? 1 : k1 - k0, run = inner == 1 ? k1 - k0 : inner;
          for (int64_t r = 0; r < runs; ++r) {
            const int64_t k = inner == 1 ? k0 : k0 + r;
            for (int64_t j = 0; j < P; ++j) {
              bf16_piece_row(src + (o * K + k) * inner, run, piece_of[j],
                             dst + ((o * P + j) * K + k) * inner);
            }
          }
          return;
        }
        float pieces[3];
        for (int64_t k = k0; k < k1; ++k) {
          const In* from = src + (o * K + k) * inner;
          for (int64_t i = 0; i < inner; ++i) {
            split_value(kind, static_cast<float>(to_double(from[i])), num_pieces, pieces);
            for (int64_t j = 0; j < P; ++j) {
              dst[((o * P + j) * K + k) * inner + i] = store_piece<Out>(pieces[piece_of[j]]);
            }
          }
        }
      });
    });
  });
  return out;
}

}  // namespace tokamax
