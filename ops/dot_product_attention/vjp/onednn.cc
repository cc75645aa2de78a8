// dot_product_attention_vjp: the oneDNN composite baseline ("onednn"): per (batch, q head) the
// matmul + softmax backward lowering a framework without a fused attention kernel runs, every
// [T, t] intermediate materialised:
//   S = scale q k^T (+ causal -inf)   P = softmax(S)   dv += P^T dout   dP = dout v^T
//   dS = softmax_backward(P, dP)      dq = scale dS k   dk += scale dS^T q
//
// Dimensions.
//   B      flattened batch;  T, t  query and key/value positions
//   H, h   query and key/value heads, g = H / h
//   D, d   q/k and v head dimensions
//
// Every matmul runs in f32: bf16 inputs are widened once (O(T D), as a framework would keep f32
// copies for the backward), because oneDNN's bf16 matmul would also need dS in bf16, a rounding
// of the gradient that neither the cpu kernel nor the op's error model makes. dk and dv are
// summed over the g q heads of a kv head by the matmuls' sum post-op into f32 accumulators.
// Threads are oneDNN's (OpenMP), so the config is empty.
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "backends/cpu/onednn_engine.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/common/onednn_primitive.h"
#include "ops/dot_product_attention/vjp/base.h"
#include "ops/framework/errors.h"
#include "ops/framework/op.h"

namespace tokamax {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

// T, t, D, d, H, h, scale, causal.
using CompositeKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float, bool>;
constexpr size_t kMaxCached = 64;

struct Composite {
  dnnl::matmul logits;                 // S [T, t] = scale q_h [T, D] k_i^T (+ causal mask)
  dnnl::softmax_v2_forward softmax;    // P [T, t] over t
  dnnl::matmul dv;                     // dv_i [t, d] += P^T [t, T] dout_h [T, d]
  dnnl::matmul dp;                     // dP [T, t] = dout_h [T, d] v_i^T [d, t]
  dnnl::softmax_v2_backward dsoftmax;  // dS [T, t] = P (dP - rowsum(P dP))
  dnnl::matmul dq;                     // dq_h [T, D] = scale dS [T, t] k_i [t, D]
  dnnl::matmul dk;                     // dk_i [t, D] += scale dS^T [t, T] q_h [T, D]
  std::vector<float> causal_mask;      // [T, t]: 0 where key j <= row r, else -inf
};

dnnl::memory::desc strided(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  return dnnl::memory::desc({rows, cols}, dt::f32, {row_stride, col_stride});
}

// The tensor as f32: itself for f32, a widened copy otherwise.
const float* as_f32(const Tensor& x, std::vector<float>& copy) {
  if (x.dtype() == DType::kF32) return x.data<float>();
  // bf16 only (check() admits f32 and bf16): a typed loop, not Tensor::get per element, so the
  // widening costs the baseline what a framework's convert op would.
  copy.resize(static_cast<size_t>(x.num_elements()));
  const bf16* data = x.data<bf16>();
  for (int64_t e = 0; e < x.num_elements(); ++e) copy[e] = bf16_to_float(data[e]);
  return copy.data();
}

class OneDnnDotProductAttentionVjp final : public OneDnnImplementation<AttentionVjpProblem> {
 public:
  nlohmann::json describe() const override {
    nlohmann::json description = cpu::onednn_describe();
    description["composite"] =
        "matmul + softmax_v2 + 3 matmuls + softmax_v2_backward + matmul per (batch, head), f32";
    return description;
  }

  void check(const AttentionVjpProblem& vp, const Device&) const override {
    const AttentionProblem& p = vp.fwd;
    if (p.dtype != DType::kF32 && p.dtype != DType::kBF16) {
      throw NotImplemented("onednn: " + std::string(dtype_name(p.dtype)) +
                           " inputs; the composite wires f32 and bf16 (widened to f32)");
    }
    // As the forward's composite: scale, causal, softmax and nothing else.
    if (p.bias) throw NotImplemented("onednn: bias is not wired into the composite");
    if (p.mask) throw NotImplemented("onednn: a bool mask is not wired into the composite");
    if (p.has_ranges()) {
      throw NotImplemented(
          "onednn: Mask ranges and token indices are not wired into the composite");
    }
    if (p.logits_soft_cap > 0.0) {
      throw NotImplemented("onednn: logits_soft_cap has no oneDNN post-op in the composite");
    }
    if (p.has_local_window()) throw NotImplemented("onednn: local_window is not wired");
    if (p.has_causal_band()) {
      throw NotImplemented("onednn: a causal mask with an offset or a window is not wired");
    }
    if (!p.q_seq_lengths.empty() || !p.kv_seq_lengths.empty()) {
      throw NotImplemented(
          "onednn: sequence lengths would give fully masked rows, which oneDNN's softmax turns "
          "into NaN rather than zeros");
    }
    if (p.T == 0 || p.t == 0 || p.D == 0 || p.d == 0) {
      throw NotImplemented("onednn: empty extents (T, t, D or d = 0)");
    }
    const std::string why = cpu::onednn_matmul_unavailable(dt::f32, dt::f32);
    if (!why.empty()) throw NotImplemented("onednn: f32 matmul: " + why);
  }

  void run(const AttentionVjpProblem& vp, const EmptyConfig&, const Device& device,
           const TensorMap& inputs, TensorMap& outputs) const override {
    check(vp, device);
    const AttentionProblem& p = vp.fwd;
    const std::shared_ptr<const Composite> composite_ptr = composite(p);
    const Composite& c = *composite_ptr;
    const int64_t T = p.T, t = p.t, D = p.D, d = p.d, H = p.H, h = p.h;
    std::vector<float> q_copy, k_copy, v_copy, dout_copy;
    float* q = const_cast<float*>(as_f32(inputs.at("q"), q_copy));
    float* k = const_cast<float*>(as_f32(inputs.at("k"), k_copy));
    float* v = const_cast<float*>(as_f32(inputs.at("v"), v_copy));
    float* dout = const_cast<float*>(as_f32(inputs.at("dout"), dout_copy));
    Tensor& dq_out = outputs.at("dq");
    Tensor& dk_out = outputs.at("dk");
    Tensor& dv_out = outputs.at("dv");
    // f32 gradients: dq written per head, dk and dv summed into (zeroed) accumulators.
    std::vector<float> dq(static_cast<size_t>(dq_out.num_elements()));
    std::vector<float> dk(static_cast<size_t>(dk_out.num_elements()), 0.0f);
    std::vector<float> dv(static_cast<size_t>(dv_out.num_elements()), 0.0f);
    // S / P, dP and dS [T, t] f32, reused across calls (a 2048 x 2048 head is 16 MiB each).
    thread_local std::vector<float> p_buffer, dp_buffer, ds_buffer;
    for (std::vector<float>* buffer : {&p_buffer, &dp_buffer, &ds_buffer}) {
      if (buffer->size() < static_cast<size_t>(T * t)) buffer->resize(static_cast<size_t>(T * t));
    }
    const dnnl::engine& engine = cpu::onednn_engine();
    dnnl::stream stream(engine);
    const dnnl::memory::desc square({T, t}, dt::f32, tag::ab);
    dnnl::memory p_mem(square, engine, p_buffer.data());
    dnnl::memory dp_mem(square, engine, dp_buffer.data());
    dnnl::memory ds_mem(square, engine, ds_buffer.data());
    dnnl::memory pt_mem(strided(t, T, 1, t), engine, p_buffer.data());
    dnnl::memory dst_mem(strided(t, T, 1, t), engine, ds_buffer.data());
    dnnl::memory mask_mem;
    if (p.is_causal) {
      mask_mem = dnnl::memory(square, engine, const_cast<float*>(c.causal_mask.data()));
    }
    for (int64_t b = 0; b < p.B; ++b) {
      for (int64_t hq = 0; hq < H; ++hq) {
        const int64_t i = hq / p.groups();
        const int64_t q_at = (b * T * H + hq) * D, dout_at = (b * T * H + hq) * d;
        const int64_t k_at = (b * t * h + i) * D, v_at = (b * t * h + i) * d;
        dnnl::memory q_mem(strided(T, D, H * D, 1), engine, q + q_at);
        dnnl::memory kt_mem(strided(D, t, 1, h * D), engine, k + k_at);
        dnnl::memory k_mem(strided(t, D, h * D, 1), engine, k + k_at);
        dnnl::memory vt_mem(strided(d, t, 1, h * d), engine, v + v_at);
        dnnl::memory dout_mem(strided(T, d, H * d, 1), engine, dout + dout_at);
        dnnl::memory dq_mem(strided(T, D, H * D, 1), engine, dq.data() + q_at);
        dnnl::memory dk_mem(strided(t, D, h * D, 1), engine, dk.data() + k_at);
        dnnl::memory dv_mem(strided(t, d, h * d, 1), engine, dv.data() + v_at);
        std::unordered_map<int, dnnl::memory> logits_args = {
            {DNNL_ARG_SRC, q_mem}, {DNNL_ARG_WEIGHTS, kt_mem}, {DNNL_ARG_DST, p_mem}};
        if (p.is_causal) logits_args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1] = mask_mem;
        c.logits.execute(stream, logits_args);
        c.softmax.execute(stream, {{DNNL_ARG_SRC, p_mem}, {DNNL_ARG_DST, p_mem}});
        c.dv.execute(
            stream, {{DNNL_ARG_SRC, pt_mem}, {DNNL_ARG_WEIGHTS, dout_mem}, {DNNL_ARG_DST, dv_mem}});
        c.dp.execute(
            stream, {{DNNL_ARG_SRC, dout_mem}, {DNNL_ARG_WEIGHTS, vt_mem}, {DNNL_ARG_DST, dp_mem}});
        c.dsoftmax.execute(
            stream,
            {{DNNL_ARG_DST, p_mem}, {DNNL_ARG_DIFF_DST, dp_mem}, {DNNL_ARG_DIFF_SRC, ds_mem}});
        c.dq.execute(stream,
                     {{DNNL_ARG_SRC, ds_mem}, {DNNL_ARG_WEIGHTS, k_mem}, {DNNL_ARG_DST, dq_mem}});
        c.dk.execute(stream,
                     {{DNNL_ARG_SRC, dst_mem}, {DNNL_ARG_WEIGHTS, q_mem}, {DNNL_ARG_DST, dk_mem}});
      }
    }
    stream.wait();
    store_rows(dq.data(), dq_out.num_elements(), 1, dq_out.num_elements(), p.dtype, dq_out.raw(),
               dq_out.num_elements());
    store_rows(dk.data(), dk_out.num_elements(), 1, dk_out.num_elements(), p.dtype, dk_out.raw(),
               dk_out.num_elements());
    store_rows(dv.data(), dv_out.num_elements(), 1, dv_out.num_elements(), p.dtype, dv_out.raw(),
               dv_out.num_elements());
  }

 private:
  std::shared_ptr<const Composite> composite(const AttentionProblem& p) const {
    const CompositeKey key{p.T,        p.t, p.D, p.d, p.H, p.h, static_cast<float>(p.logits_scale),
                           p.is_causal};
    return cache_.get(key, [&] { return make_composite(p); });
  }

  static std::shared_ptr<const Composite> make_composite(const AttentionProblem& p) {
    const int64_t T = p.T, t = p.t, D = p.D, d = p.d, H = p.H, h = p.h;
    const float scale = static_cast<float>(p.logits_scale);
    const dnnl::engine& engine = cpu::onednn_engine();
    const dnnl::memory::desc square({T, t}, dt::f32, tag::ab);
    auto c = std::make_shared<Composite>();
    create_onednn("primitive for this attention backward", [&] {
      dnnl::primitive_attr logits_attr;
      logits_attr.set_output_scales(0, {scale});
      if (p.is_causal) {
        dnnl::post_ops ops;
        ops.append_binary(dnnl::algorithm::binary_add, square);
        logits_attr.set_post_ops(ops);
        c->causal_mask.assign(static_cast<size_t>(T * t), 0.0f);
        for (int64_t r = 0; r < T; ++r) {
          for (int64_t j = r + 1; j < t; ++j) {
            c->causal_mask[r * t + j] = -std::numeric_limits<float>::infinity();
          }
        }
      }
      c->logits = dnnl::matmul(dnnl::matmul::primitive_desc(
          dnnl::matmul::desc(strided(T, D, H * D, 1), strided(D, t, 1, h * D), square), logits_attr,
          engine));
      const dnnl::softmax_v2_forward::primitive_desc softmax_pd(
          dnnl::softmax_v2_forward::desc(dnnl::prop_kind::forward_training,
                                         dnnl::algorithm::softmax_accurate, square, square, 1),
          engine);
      c->softmax = dnnl::softmax_v2_forward(softmax_pd);
      c->dsoftmax = dnnl::softmax_v2_backward(dnnl::softmax_v2_backward::primitive_desc(
          dnnl::softmax_v2_backward::desc(dnnl::algorithm::softmax_accurate, square, square, square,
                                          1),
          engine, softmax_pd));
      // Accumulating products: dst = scale * (a b) + dst.
      auto accumulate = [](float output_scale) {
        dnnl::primitive_attr attr;
        if (output_scale != 1.0f) attr.set_output_scales(0, {output_scale});
        dnnl::post_ops ops;
        ops.append_sum(1.0f);
        attr.set_post_ops(ops);
        return attr;
      };
      c->dv = dnnl::matmul(dnnl::matmul::primitive_desc(
          dnnl::matmul::desc(strided(t, T, 1, t), strided(T, d, H * d, 1), strided(t, d, h * d, 1)),
          accumulate(1.0f), engine));
      c->dp = dnnl::matmul(dnnl::matmul::primitive_desc(
          dnnl::matmul::desc(strided(T, d, H * d, 1), strided(d, t, 1, h * d), square), engine));
      dnnl::primitive_attr dq_attr;
      dq_attr.set_output_scales(0, {scale});
      c->dq = dnnl::matmul(dnnl::matmul::primitive_desc(
          dnnl::matmul::desc(square, strided(t, D, h * D, 1), strided(T, D, H * D, 1)), dq_attr,
          engine));
      c->dk = dnnl::matmul(dnnl::matmul::primitive_desc(
          dnnl::matmul::desc(strided(t, T, 1, t), strided(T, D, H * D, 1), strided(t, D, h * D, 1)),
          accumulate(scale), engine));
    });
    return c;
  }

  mutable cpu::OneDnnPrimitiveCache<CompositeKey, std::shared_ptr<const Composite>> cache_{
      kMaxCached};
};

}  // namespace

const Implementation& dot_product_attention_vjp_onednn_implementation() {
  static const OneDnnDotProductAttentionVjp impl;
  return impl;
}

}  // namespace tokamax
