// triangle_multiplication: the oracle in double from the inputs' stored values (Tensor::get):
// per sampled output, the projections of the positions its triangle product reads (cached
// across samples), the product, the output norm and the gated output projection.
//
// The magnitude carries, in one unit (error_model: gamma of the longest sum plus one rounding to
// x's dtype), the error each stage of an f32 implementation may make and pass on:
//   a = layer_norm(x):   Ma = |s| (2 |y^| + 2 + |mean| / sigma) + |offset|   (its own rounding)
//   g, p = a W:          Mg = sum |W| (|a| + Ma)
//   v = sigmoid(g) p:    gated_product_magnitude (ops/common/activation.h) + |v|, 0 if masked
//   act = sum_k l r:     sum_k |l| Mr + Ml |r| + |l r|
//   b = layer_norm(act): |s| ((Mact_h + mean Mact + |y^_h| mean(|y^| Mact)) / sigma + 2 |y^_h| +
//                        2 + |mean| / sigma) + |offset|   (first order in the input's error)
//   o = b W_out, q = a W_gate_out, out = o sigmoid(q): as above, + |out|.
#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/common/activation.h"
#include "ops/framework/errors.h"
#include "ops/triangle_multiplication/base.h"

namespace tokamax {
namespace {

// Positions cached at once before the cache starts over (about 3 KB each at H = C = 128).
constexpr size_t kMaxCachedPositions = 1 << 15;

struct Weights {
  std::vector<double> proj, gate, out, gate_out, in_scale, in_offset, out_scale, out_offset;
};

std::vector<double> doubles(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.num_elements()));
  for (int64_t i = 0; i < t.num_elements(); ++i) v[i] = t.get(i);
  return v;
}

// A layer norm of row[0, n) in double with each element's error magnitude (`incoming`: the
// input's, null for exact inputs), as the header says.
void normalize(const std::vector<double>& row, const std::vector<double>* incoming,
               const double* scale, const double* offset, double epsilon,
               std::vector<double>& value, std::vector<double>& magnitude) {
  const size_t n = row.size();
  double mean = 0.0, var = 0.0;
  for (double v : row) mean += v;
  mean /= static_cast<double>(n);
  for (double v : row) var += (v - mean) * (v - mean);
  var /= static_cast<double>(n);
  const double sigma = std::sqrt(var + epsilon);
  value.resize(n);
  magnitude.resize(n);
  double mean_in = 0.0, mean_weighted = 0.0;
  std::vector<double> y(n);
  for (size_t c = 0; c < n; ++c) {
    y[c] = (row[c] - mean) / sigma;
    if (incoming) {
      mean_in += (*incoming)[c] / static_cast<double>(n);
      mean_weighted += std::fabs(y[c]) * (*incoming)[c] / static_cast<double>(n);
    }
  }
  for (size_t c = 0; c < n; ++c) {
    const double passed =
        incoming ? ((*incoming)[c] + mean_in + std::fabs(y[c]) * mean_weighted) / sigma : 0.0;
    value[c] = y[c] * scale[c] + offset[c];
    magnitude[c] =
        std::fabs(scale[c]) * (passed + 2.0 * std::fabs(y[c]) + 2.0 + std::fabs(mean) / sigma) +
        std::fabs(offset[c]);
  }
}

struct Position {
  std::vector<double> a, Ma;  // [C]
  std::vector<double> v, Mv;  // [2H]: left then right halves
};

class Oracle {
 public:
  Oracle(const TriangleMultiplicationProblem& p, const TensorMap& inputs, double unit, double n)
      : p_(p), x_(inputs.at("x")), mask_(inputs.at("mask").data<bool>()), unit_(unit), n_(n) {
    w_.proj = doubles(inputs.at("projection_in_weights"));
    w_.gate = doubles(inputs.at("gate_in_weights"));
    w_.out = doubles(inputs.at("projection_out_weights"));
    w_.gate_out = doubles(inputs.at("gate_out_weights"));
    w_.in_scale = doubles(inputs.at("layernorm_in_scale"));
    w_.in_offset = doubles(inputs.at("layernorm_in_offset"));
    w_.out_scale = doubles(inputs.at("layernorm_out_scale"));
    w_.out_offset = doubles(inputs.at("layernorm_out_offset"));
  }

  const Position& position(int64_t q) {
    if (auto it = cache_.find(q); it != cache_.end()) return it->second;
    if (cache_.size() >= kMaxCachedPositions) cache_.clear();
    Position& pos = cache_[q];
    const int64_t C = p_.C, H2 = 2 * p_.H;
    std::vector<double> row(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) row[c] = x_.get(q * C + c);
    normalize(row, nullptr, w_.in_scale.data(), w_.in_offset.data(), p_.epsilon, pos.a, pos.Ma);
    pos.v.assign(static_cast<size_t>(H2), 0.0);
    pos.Mv.assign(static_cast<size_t>(H2), 0.0);
    if (!mask_[q]) return pos;
    for (int64_t t = 0; t < H2; ++t) {
      double g = 0.0, Mg = 0.0, pr = 0.0, Mp = 0.0;
      for (int64_t c = 0; c < C; ++c) {
        const double wg = w_.gate[c * H2 + t], wp = w_.proj[c * H2 + t];
        const double carried = std::fabs(pos.a[c]) + pos.Ma[c];
        g += pos.a[c] * wg;
        Mg += std::fabs(wg) * carried;
        pr += pos.a[c] * wp;
        Mp += std::fabs(wp) * carried;
      }
      const double s = sigmoid(g);
      pos.v[t] = s * pr;
      pos.Mv[t] = gated_product_magnitude(g, s, pr, Mg, Mp, 0.25, unit_, n_) + std::fabs(s * pr);
    }
    return pos;
  }

  // out[i, j, :] and its magnitudes.
  void pair(int64_t i, int64_t j, std::vector<double>& out, std::vector<double>& magnitude) {
    const int64_t N = p_.N, H = p_.H, C = p_.C, D = p_.D;
    std::vector<double> act(static_cast<size_t>(H), 0.0), Mact(static_cast<size_t>(H), 0.0);
    for (int64_t k = 0; k < N; ++k) {
      const Position& l = position(p_.outgoing ? i * N + k : k * N + j);
      const std::vector<double> lv = l.v, lM = l.Mv;  // copies: the next lookup may evict
      const Position& r = position(p_.outgoing ? j * N + k : k * N + i);
      for (int64_t h = 0; h < H; ++h) {
        const double lh = lv[h], rh = r.v[H + h];
        act[h] += lh * rh;
        Mact[h] += std::fabs(lh) * r.Mv[H + h] + lM[h] * std::fabs(rh) + std::fabs(lh * rh);
      }
    }
    std::vector<double> b, Mb;
    normalize(act, &Mact, w_.out_scale.data(), w_.out_offset.data(), p_.epsilon, b, Mb);
    const Position& self = position(i * N + j);
    out.assign(static_cast<size_t>(D), 0.0);
    magnitude.assign(static_cast<size_t>(D), 0.0);
    for (int64_t d = 0; d < D; ++d) {
      double o = 0.0, Mo = 0.0, q = 0.0, Mq = 0.0;
      for (int64_t h = 0; h < H; ++h) {
        o += b[h] * w_.out[h * D + d];
        Mo += std::fabs(w_.out[h * D + d]) * (std::fabs(b[h]) + Mb[h]);
      }
      for (int64_t c = 0; c < C; ++c) {
        q += self.a[c] * w_.gate_out[c * D + d];
        Mq += std::fabs(w_.gate_out[c * D + d]) * (std::fabs(self.a[c]) + self.Ma[c]);
      }
      const double s = sigmoid(q);
      out[d] = o * s;
      magnitude[d] = gated_product_magnitude(q, s, o, Mq, Mo, 0.25, unit_, n_) + std::fabs(o * s);
    }
  }

 private:
  const TriangleMultiplicationProblem& p_;
  const Tensor& x_;
  const bool* mask_;
  double unit_, n_;
  Weights w_;
  std::unordered_map<int64_t, Position> cache_;
};

}  // namespace

template <>
OracleSample ProblemOp<TriangleMultiplicationProblem>::oracle(
    const BoundArgs& args, const TensorMap& inputs, std::string_view output,
    std::span<const int64_t> index) const {
  if (output != "out") {
    throw InvalidArgument("triangle_multiplication has no output '" + std::string(output) + "'");
  }
  const TriangleMultiplicationProblem p = TriangleMultiplicationProblem::from(args);
  const ErrorModel model = error_model(args);
  const double n = model.accumulation_length;
  const double nu = n * model.accumulation_roundoff;
  const double unit = nu / (1.0 - nu) + model.operand_roundoff;
  // The output's subnormal spacing as an absolute floor, in magnitude units.
  const double floor_term = subnormal_floor(p.x_dtype) / unit;
  Oracle oracle(p, inputs, unit, n);
  OracleSample sample;
  sample.index.assign(index.begin(), index.end());
  sample.value.resize(index.size());
  sample.magnitude.resize(index.size());
  int64_t cached = -1;
  std::vector<double> out, magnitude;
  for (size_t s = 0; s < index.size(); ++s) {
    const int64_t pair = index[s] / p.D, d = index[s] % p.D;
    if (pair != cached) {
      oracle.pair(pair / p.N, pair % p.N, out, magnitude);
      cached = pair;
    }
    sample.value[s] = out[d];
    sample.magnitude[s] = 1.01 * magnitude[d] + floor_term;
  }
  return sample;
}

}  // namespace tokamax
