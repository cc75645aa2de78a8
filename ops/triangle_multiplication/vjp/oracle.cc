// triangle_multiplication_vjp: the float64 oracle, the whole backward with every element's error
// magnitude (units of the f32 roundoff u, by the rules of base_numerics.cc), and its cache.
//
// Dimensions: as base.h; R positions of one chunk, K a contraction's depth.
//
// Layouts: the planes v (then dv) [2H][P] and act (then dact) [H][P] channel-major, so that each
// channel's triangle product reads N x N matrices; the gate logits q (then dq) [P, D]; per
// chunk of positions, row-major [R, *] matrices. The arithmetic with magnitudes (contractions,
// norms, sigmoid) is oracle_rules.h's.
#include "ops/triangle_multiplication/vjp/oracle.h"

#include <algorithm>
#include <cmath>
#include <mutex>

#include "ops/framework/errors.h"
#include "ops/framework/numerics.h"
#include "ops/framework/vjp.h"
#include "ops/triangle_multiplication/vjp/oracle_rules.h"

namespace tokamax {
namespace {

constexpr int64_t kChunk = 2048;  // positions per chunk of the per-position stages

using namespace triangle_vjp_oracle;

class Backward {
 public:
  Backward(const TriangleMultiplicationProblem& p, const TensorMap& inputs, double x_rounding)
      : p_(p), inputs_(inputs), kx_(x_rounding), mask_(inputs.at("mask").data<bool>()) {
    const int64_t C = p.C, H = p.H, D = p.D, W = 4 * H + D;
    win_ = Tracked(C, W, true);  // [gate_in | projection_in | gate_out], as rows.h
    const std::vector<double> gate = values_of(inputs.at("gate_in_weights"));
    const std::vector<double> proj = values_of(inputs.at("projection_in_weights"));
    const std::vector<double> gate_out = values_of(inputs.at("gate_out_weights"));
    for (int64_t c = 0; c < C; ++c) {
      std::copy_n(gate.begin() + c * 2 * H, 2 * H, win_.v.begin() + c * W);
      std::copy_n(proj.begin() + c * 2 * H, 2 * H, win_.v.begin() + c * W + 2 * H);
      std::copy_n(gate_out.begin() + c * D, D, win_.v.begin() + c * W + 4 * H);
    }
    win_t_ = transposed(win_);
    wo_ = Tracked(H, D, true);
    wo_.v = values_of(inputs.at("projection_out_weights"));
    wo_t_ = transposed(wo_);
    in_scale_ = values_of(inputs.at("layernorm_in_scale"));
    in_offset_ = values_of(inputs.at("layernorm_in_offset"));
    out_scale_ = values_of(inputs.at("layernorm_out_scale"));
    out_offset_ = values_of(inputs.at("layernorm_out_offset"));
  }

  TriangleVjpGradients run() {
    const int64_t C = p_.C, H = p_.H, D = p_.D, P = p_.positions(), W = 4 * H + D;
    planes_ = Tracked(2 * H, P);
    gates_ = Tracked(P, D);
    for (int64_t q0 = 0; q0 < P; q0 += kChunk) project(q0, std::min(kChunk, P - q0));
    act_ = Tracked(H, P);
    for (int64_t h = 0; h < H; ++h) triangle(h);
    Sums dwo(static_cast<size_t>(H * D)), dout_scale(H), dout_offset(H);
    for (int64_t q0 = 0; q0 < P; q0 += kChunk) {
      output_side(q0, std::min(kChunk, P - q0), dwo, dout_scale, dout_offset);
    }
    for (int64_t h = 0; h < H; ++h) triangle_backward(h);
    Sums dwin(static_cast<size_t>(C * W)), din_scale(C), din_offset(C);
    TriangleVjpGradients grads;
    std::vector<double>& dx = grads.value["dx"];
    std::vector<double>& edx = grads.magnitude["dx"];
    dx.resize(static_cast<size_t>(P * C));
    edx.resize(static_cast<size_t>(P * C));
    for (int64_t q0 = 0; q0 < P; q0 += kChunk) {
      input_side(q0, std::min(kChunk, P - q0), dwin, din_scale, din_offset, dx, edx);
    }
    // The weight gradients: sums over the P positions (and one more rounding per term).
    const double n = static_cast<double>(P + 1);
    auto put = [&](const char* name, const Sums& s, int64_t rows, int64_t cols, int64_t ld,
                   int64_t first) {
      std::vector<double>& v = grads.value[vjp_name(name)];
      std::vector<double>& m = grads.magnitude[vjp_name(name)];
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          const size_t i = static_cast<size_t>(r * ld + first + c);
          v.push_back(s.value[i]);
          m.push_back(s.magnitude(i, n));
        }
      }
    };
    put("gate_in_weights", dwin, C, 2 * H, W, 0);
    put("projection_in_weights", dwin, C, 2 * H, W, 2 * H);
    put("gate_out_weights", dwin, C, D, W, 4 * H);
    put("projection_out_weights", dwo, H, D, D, 0);
    put("layernorm_in_scale", din_scale, 1, C, C, 0);
    put("layernorm_in_offset", din_offset, 1, C, C, 0);
    put("layernorm_out_scale", dout_scale, 1, H, H, 0);
    put("layernorm_out_offset", dout_offset, 1, H, H, 0);
    return grads;
  }

 private:
  // a = layer_norm_in(x) for positions [q0, q0 + R), its norm rows, and y = a W_in [R, W].
  Tracked normalized_input(int64_t q0, int64_t R, std::vector<NormRow>& rows, Tracked& y) const {
    const int64_t C = p_.C;
    Tracked a(R, C);
    const Tensor& x = inputs_.at("x");
    std::vector<double> xr(static_cast<size_t>(C)), zero(static_cast<size_t>(C), 0.0);
    rows.resize(static_cast<size_t>(R));
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t c = 0; c < C; ++c) xr[c] = x.get((q0 + r) * C + c);
      rows[r] = norm_forward(xr.data(), zero.data(), C, p_.epsilon);
      norm_output(rows[r], in_scale_, in_offset_, a.v.data() + r * C, a.e.data() + r * C);
    }
    y = product(a, win_t_);
    return a;
  }

  // Pass 1: the planes v and the gate logits q of a chunk.
  void project(int64_t q0, int64_t R) {
    const int64_t H = p_.H, D = p_.D, P = p_.positions(), W = 4 * H + D;
    std::vector<NormRow> rows;
    Tracked y;
    normalized_input(q0, R, rows, y);
    for (int64_t r = 0; r < R; ++r) {
      const int64_t q = q0 + r;
      for (int64_t t = 0; t < 2 * H; ++t) {
        if (!mask_[q]) continue;  // v = 0 exactly
        const double pr = y.v[r * W + 2 * H + t], epr = y.e[r * W + 2 * H + t];
        const Gate s = gate_of(y.v[r * W + t], y.e[r * W + t]);
        const double v = s.s * pr;
        planes_.v[t * P + q] = v;
        planes_.e[t * P + q] = std::fabs(pr) * s.es + s.s * epr + (1.0 + kx_) * std::fabs(v);
      }
      std::copy_n(y.v.begin() + r * W + 4 * H, D, gates_.v.begin() + q * D);
      std::copy_n(y.e.begin() + r * W + 4 * H, D, gates_.e.begin() + q * D);
    }
  }

  // Pass 2: act of channel h.
  void triangle(int64_t h) {
    const int64_t N = p_.N, H = p_.H;
    const Tracked L = plane(planes_, h, N), R = plane(planes_, H + h, N);
    const Tracked act = p_.outgoing ? product(L, R) : product(transposed(R), transposed(L));
    std::copy(act.v.begin(), act.v.end(), act_.v.begin() + h * N * N);
    std::copy(act.e.begin(), act.e.end(), act_.e.begin() + h * N * N);
  }

  // Pass 3: the output side of a chunk; dq over q, dact over act.
  void output_side(int64_t q0, int64_t R, Sums& dwo, Sums& dscale, Sums& doffset) {
    const int64_t H = p_.H, D = p_.D, P = p_.positions();
    const Tensor& dout = inputs_.at("dout");
    Tracked b(R, H);
    std::vector<NormRow> rows(static_cast<size_t>(R));
    std::vector<double> row(static_cast<size_t>(H)), erow(static_cast<size_t>(H));
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t h = 0; h < H; ++h) {
        row[h] = act_.v[h * P + q0 + r];
        erow[h] = act_.e[h * P + q0 + r];
      }
      rows[r] = norm_forward(row.data(), erow.data(), H, p_.epsilon);
      norm_output(rows[r], out_scale_, out_offset_, b.v.data() + r * H, b.e.data() + r * H);
    }
    const Tracked o = product(b, wo_t_);
    Tracked d_o(R, D);
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t d = 0; d < D; ++d) {
        const int64_t i = r * D + d, q = (q0 + r) * D + d;
        const double dy = dout.get(q);
        const Gate s = gate_of(gates_.v[q], gates_.e[q]);
        d_o.v[i] = dy * s.s;
        d_o.e[i] = std::fabs(dy) * s.es + std::fabs(d_o.v[i]);
        const double dq = dy * o.v[i] * s.ds;
        gates_.e[q] =
            std::fabs(dy) * (s.ds * o.e[i] + std::fabs(o.v[i]) * s.eds) + 3.0 * std::fabs(dq);
        gates_.v[q] = dq;
      }
    }
    const Tracked db = product(d_o, wo_);
    contract(transposed(b), transposed(d_o), dwo);
    std::vector<double> dact(static_cast<size_t>(H)), edact(static_cast<size_t>(H));
    for (int64_t r = 0; r < R; ++r) {
      norm_backward(rows[r], out_scale_, db.v.data() + r * H, db.e.data() + r * H, dact.data(),
                    edact.data(), dscale, doffset);
      for (int64_t h = 0; h < H; ++h) {
        act_.v[h * P + q0 + r] = dact[h];
        act_.e[h * P + q0 + r] = edact[h];
      }
    }
  }

  // Pass 4: dv of channel h over its planes.
  void triangle_backward(int64_t h) {
    const int64_t N = p_.N, H = p_.H;
    const Tracked L = plane(planes_, h, N), R = plane(planes_, H + h, N);
    const Tracked dact = plane(act_, h, N);
    const Tracked dact_t = transposed(dact);
    Tracked dl, dr;
    if (p_.outgoing) {  // dL = dact R, dR = dact^T L
      dl = product(dact, transposed(R));
      dr = product(dact_t, transposed(L));
    } else {  // dL = R dact, dR = L dact^T
      dl = product(R, dact_t);
      dr = product(L, dact);
    }
    for (const auto& [t, d] : {std::pair{h, &dl}, std::pair{H + h, &dr}}) {
      for (int64_t i = 0; i < N * N; ++i) {
        planes_.v[t * N * N + i] = d->v[i];
        planes_.e[t * N * N + i] = d->e[i] + kx_ * std::fabs(d->v[i]);
      }
    }
  }

  // Pass 5: the input side of a chunk.
  void input_side(int64_t q0, int64_t R, Sums& dwin, Sums& dscale, Sums& doffset,
                  std::vector<double>& dx, std::vector<double>& edx) {
    const int64_t C = p_.C, H = p_.H, D = p_.D, P = p_.positions(), W = 4 * H + D;
    std::vector<NormRow> rows;
    Tracked y;
    const Tracked a = normalized_input(q0, R, rows, y);
    Tracked z(R, W);
    for (int64_t r = 0; r < R; ++r) {
      const int64_t q = q0 + r;
      for (int64_t t = 0; mask_[q] && t < 2 * H; ++t) {
        const double pr = y.v[r * W + 2 * H + t], epr = y.e[r * W + 2 * H + t];
        const Gate s = gate_of(y.v[r * W + t], y.e[r * W + t]);
        const double dv = planes_.v[t * P + q], edv = planes_.e[t * P + q];
        const double dg = dv * pr * s.ds, dpr = dv * s.s;
        z.v[r * W + t] = dg;
        z.e[r * W + t] = std::fabs(pr * s.ds) * edv + std::fabs(dv * s.ds) * epr +
                         std::fabs(dv * pr) * s.eds + 3.0 * std::fabs(dg);
        z.v[r * W + 2 * H + t] = dpr;
        z.e[r * W + 2 * H + t] = s.s * edv + std::fabs(dv) * s.es + std::fabs(dpr);
      }
      std::copy_n(gates_.v.begin() + q * D, D, z.v.begin() + r * W + 4 * H);
      std::copy_n(gates_.e.begin() + q * D, D, z.e.begin() + r * W + 4 * H);
    }
    const Tracked da = product(z, win_);
    contract(transposed(a), transposed(z), dwin);
    for (int64_t r = 0; r < R; ++r) {
      norm_backward(rows[r], in_scale_, da.v.data() + r * C, da.e.data() + r * C,
                    dx.data() + (q0 + r) * C, edx.data() + (q0 + r) * C, dscale, doffset);
    }
  }

  const TriangleMultiplicationProblem& p_;
  const TensorMap& inputs_;
  double kx_;
  const bool* mask_;
  Tracked win_, win_t_, wo_, wo_t_;
  std::vector<double> in_scale_, in_offset_, out_scale_, out_offset_;
  Tracked planes_, gates_, act_;
};

// FNV-1a over the inputs' bytes: the cache's check that it holds these inputs' gradients.
uint64_t content_hash(const TensorMap& inputs) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& [name, t] : inputs) {
    for (char ch : name) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
    const auto* bytes = static_cast<const unsigned char*>(t.raw());
    for (size_t i = 0; i < t.size_bytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  }
  return h;
}

}  // namespace

std::shared_ptr<const TriangleVjpGradients> triangle_vjp_gradients(
    const TriangleMultiplicationProblem& p, const TensorMap& inputs, double x_rounding) {
  return std::make_shared<const TriangleVjpGradients>(Backward(p, inputs, x_rounding).run());
}

std::shared_ptr<const TriangleVjpGradients> cached_triangle_vjp_gradients(
    const BoundArgs& args, const TriangleMultiplicationProblem& p, const TensorMap& inputs,
    double x_rounding) {
  static std::mutex mutex;
  static std::string cached_key;
  static std::shared_ptr<const TriangleVjpGradients> cached;
  const std::string key =
      args.key() + "#" + std::to_string(content_hash(inputs)) + "#" + std::to_string(x_rounding);
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (cached && cached_key == key) return cached;
  }
  std::shared_ptr<const TriangleVjpGradients> grads = triangle_vjp_gradients(p, inputs, x_rounding);
  std::lock_guard<std::mutex> lock(mutex);
  cached_key = key;
  cached = grads;
  return grads;
}

template <>
OracleSample ProblemOp<TriangleVjpProblem>::oracle(const BoundArgs& args, const TensorMap& inputs,
                                                   std::string_view output,
                                                   std::span<const int64_t> index) const {
  const TriangleMultiplicationProblem p = TriangleMultiplicationProblem::from(args);
  const std::vector<TensorDecl> decls = outputs(args);
  const auto decl = std::find_if(decls.begin(), decls.end(),
                                 [&](const TensorDecl& d) { return d.name == output; });
  if (decl == decls.end()) {
    throw InvalidArgument("triangle_multiplication_vjp has no output '" + std::string(output) +
                          "'");
  }
  const std::shared_ptr<const TriangleVjpGradients> grads =
      cached_triangle_vjp_gradients(args, p, inputs, triangle_vjp_x_rounding(p));
  const std::vector<double>& value = grads->value.at(std::string(output));
  const std::vector<double>& magnitude = grads->magnitude.at(std::string(output));
  const ErrorModel model = error_model(args);
  // The output's subnormal spacing as an absolute floor, in magnitude units.
  const double floor_term = subnormal_floor(decl->spec.dtype) / term_gamma(model);
  OracleSample sample;
  sample.index.assign(index.begin(), index.end());
  for (int64_t i : index) {
    sample.value.push_back(value.at(static_cast<size_t>(i)));
    // 5% for the second-order terms the first-order rules leave out.
    sample.magnitude.push_back(1.05 * magnitude.at(static_cast<size_t>(i)) + floor_term);
  }
  return sample;
}

}  // namespace tokamax
