// dot_product_attention: the oneDNN composite baseline ("onednn"): per (batch, head) a matmul
// S = scale * q k^T into f32 [T, t] (causal as an additive -inf binary post-op), the softmax
// primitive over t, and a matmul P v: what a framework without a fused kernel runs.
//
// Dimensions.
//   B      flattened batch;  T, t  query and key/value positions
//   H, h   query and key/value heads, g = H / h
//   D, d   q/k and v head dimensions
//
// Threads are left to oneDNN's runtime (OpenMP in Debian's build), so the config is empty.
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "backends/cpu/onednn_engine.h"
#include "ops/common/onednn_primitive.h"
#include "ops/dot_product_attention/base.h"
#include "ops/framework/errors.h"
#include "ops/framework/op.h"

namespace tokamax {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

// T, t, D, d, H, h, dtype, scale, causal.
using CompositeKey =
    std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, dt, float, bool>;
constexpr size_t kMaxCached = 64;

struct Composite {
  dnnl::matmul logits;  // S [T, t] f32 = scale * q_h [T, D] @ k_i^T [D, t] (+ causal mask)
  dnnl::softmax_v2_forward softmax;  // P [T, t] (f32, or bf16 for bf16 inputs) over t
  dnnl::matmul values;               // out_h [T, d] = P @ v_i [t, d]
  std::vector<float> causal_mask;    // [T, t]: 0 where key j <= row r, else -inf
};

dnnl::memory::desc strided(int64_t rows, int64_t cols, dt type, int64_t row_stride,
                           int64_t col_stride) {
  return dnnl::memory::desc({rows, cols}, type, {row_stride, col_stride});
}

class OneDnnDotProductAttention final : public OneDnnImplementation<AttentionProblem> {
 public:
  nlohmann::json describe() const override {
    nlohmann::json description = cpu::onednn_describe();
    description["composite"] = "matmul + softmax_v2 + matmul per (batch, head)";
    return description;
  }

  void check(const AttentionProblem& p, const Device&) const override {
    if (p.dtype != DType::kF32 && p.dtype != DType::kBF16) {
      throw NotImplemented("onednn: " + std::string(dtype_name(p.dtype)) +
                           " inputs; the composite wires f32 and bf16 matmuls only");
    }
    // The composite is the plain framework lowering: scale, causal, softmax. Everything else
    // would need extra elementwise passes that no framework baseline fuses either.
    if (p.bias) throw NotImplemented("onednn: bias is not wired into the composite");
    if (p.mask) throw NotImplemented("onednn: a bool mask is not wired into the composite");
    if (p.bf16_logits) throw NotImplemented("onednn: bf16 logits are not wired into the composite");
    if (p.has_ranges()) {
      throw NotImplemented(
          "onednn: Mask ranges and token indices are not wired into the composite");
    }
    if (p.logits_soft_cap > 0.0) {
      throw NotImplemented(
          "onednn: logits_soft_cap (tanh between matmul and softmax) has no "
          "oneDNN post-op in the composite");
    }
    if (p.has_local_window()) throw NotImplemented("onednn: local_window is not wired");
    if (!p.normalize_output) throw NotImplemented("onednn: normalize_output false is not wired");
    if (p.dropout_mask) throw NotImplemented("onednn: dropout is not wired");
    if (p.has_causal_band()) {
      throw NotImplemented("onednn: a causal mask with an offset or a window is not wired");
    }
    if (p.return_residuals) {
      throw NotImplemented(
          "onednn: return_residuals (the softmax primitive does not expose its row statistics)");
    }
    if (!p.q_seq_lengths.empty() || !p.kv_seq_lengths.empty()) {
      throw NotImplemented(
          "onednn: sequence lengths would give fully masked rows, which "
          "oneDNN's softmax turns into NaN rather than zeros");
    }
    if (p.T == 0 || p.t == 0 || p.D == 0 || p.d == 0) {
      throw NotImplemented("onednn: empty extents (T, t, D or d = 0)");
    }
    // Ask the library rather than guess from the ISA (bf16 needs avx512_core in oneDNN 2.x), so
    // that a CPU without the kernels is declined here rather than failing in run(): the logits
    // matmul is in->f32, the P v matmul in->in.
    const dt in = p.dtype == DType::kBF16 ? dt::bf16 : dt::f32;
    const std::string in_name(dtype_name(p.dtype));
    for (const dt out : {dt::f32, in}) {
      const std::string why = cpu::onednn_matmul_unavailable(in, out);
      if (!why.empty()) {
        throw NotImplemented("onednn: " + in_name + "->" + (out == dt::f32 ? "f32" : in_name) +
                             " matmul: " + why);
      }
    }
  }

  void run(const AttentionProblem& p, const EmptyConfig&, const Device& device,
           const TensorMap& inputs, TensorMap& outputs) const override {
    check(p, device);
    const std::shared_ptr<const Composite> composite_ptr = composite(p);
    const Composite& c = *composite_ptr;
    const dt x_type = p.dtype == DType::kBF16 ? dt::bf16 : dt::f32;
    const int64_t x_size = static_cast<int64_t>(dtype_size(p.dtype));
    const int64_t T = p.T, t = p.t, D = p.D, d = p.d, H = p.H, h = p.h;
    char* q = static_cast<char*>(const_cast<void*>(inputs.at("q").raw()));
    char* k = static_cast<char*>(const_cast<void*>(inputs.at("k").raw()));
    char* v = static_cast<char*>(const_cast<void*>(inputs.at("v").raw()));
    char* out = static_cast<char*>(outputs.at("out").raw());
    // S and P, reused across calls (a 2048 x 2048 head is 16 MiB of f32).
    thread_local std::vector<float> s_buffer;
    thread_local std::vector<float> p_buffer;  // bf16 P uses half of it
    if (s_buffer.size() < static_cast<size_t>(T * t)) s_buffer.resize(static_cast<size_t>(T * t));
    if (p_buffer.size() < static_cast<size_t>(T * t)) p_buffer.resize(static_cast<size_t>(T * t));
    const dnnl::engine& engine = cpu::onednn_engine();
    dnnl::stream stream(engine);
    dnnl::memory s_mem(dnnl::memory::desc({T, t}, dt::f32, tag::ab), engine, s_buffer.data());
    dnnl::memory p_mem(dnnl::memory::desc({T, t}, x_type, tag::ab), engine,
                       x_type == dt::f32 ? static_cast<void*>(s_buffer.data()) : p_buffer.data());
    dnnl::memory mask_mem;
    if (p.is_causal) {
      mask_mem = dnnl::memory(dnnl::memory::desc({T, t}, dt::f32, tag::ab), engine,
                              const_cast<float*>(c.causal_mask.data()));
    }
    for (int64_t b = 0; b < p.B; ++b) {
      for (int64_t hq = 0; hq < H; ++hq) {
        const int64_t i = hq / p.groups();
        dnnl::memory q_mem(strided(T, D, x_type, H * D, 1), engine,
                           q + ((b * T) * H + hq) * D * x_size);
        dnnl::memory kt_mem(strided(D, t, x_type, 1, h * D), engine,
                            k + ((b * t) * h + i) * D * x_size);
        dnnl::memory v_mem(strided(t, d, x_type, h * d, 1), engine,
                           v + ((b * t) * h + i) * d * x_size);
        dnnl::memory out_mem(strided(T, d, x_type, H * d, 1), engine,
                             out + ((b * T) * H + hq) * d * x_size);
        std::unordered_map<int, dnnl::memory> logits_args = {
            {DNNL_ARG_SRC, q_mem}, {DNNL_ARG_WEIGHTS, kt_mem}, {DNNL_ARG_DST, s_mem}};
        if (p.is_causal) {
          logits_args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1] = mask_mem;
        }
        c.logits.execute(stream, logits_args);
        c.softmax.execute(stream, {{DNNL_ARG_SRC, s_mem}, {DNNL_ARG_DST, p_mem}});
        c.values.execute(
            stream, {{DNNL_ARG_SRC, p_mem}, {DNNL_ARG_WEIGHTS, v_mem}, {DNNL_ARG_DST, out_mem}});
      }
    }
    stream.wait();
  }

 private:
  // The composite of one shape, created on first use.
  std::shared_ptr<const Composite> composite(const AttentionProblem& p) const {
    const dt x_type = p.dtype == DType::kBF16 ? dt::bf16 : dt::f32;
    const CompositeKey key{
        p.T, p.t, p.D, p.d, p.H, p.h, x_type, static_cast<float>(p.logits_scale), p.is_causal};
    return cache_.get(key, [&] { return make_composite(p, x_type); });
  }

  static std::shared_ptr<const Composite> make_composite(const AttentionProblem& p, dt x_type) {
    const int64_t T = p.T, t = p.t, D = p.D, d = p.d, H = p.H, h = p.h;
    const dnnl::engine& engine = cpu::onednn_engine();
    auto c = std::make_shared<Composite>();
    create_onednn("primitive for this attention", [&] {
      dnnl::primitive_attr attr;
      attr.set_output_scales(0, {static_cast<float>(p.logits_scale)});
      if (p.is_causal) {
        dnnl::post_ops ops;
        ops.append_binary(dnnl::algorithm::binary_add,
                          dnnl::memory::desc({T, t}, dt::f32, tag::ab));
        attr.set_post_ops(ops);
        // Top-left aligned: key j visible from row r iff j <= r.
        c->causal_mask.assign(static_cast<size_t>(T * t), 0.0f);
        for (int64_t r = 0; r < T; ++r) {
          for (int64_t j = r + 1; j < t; ++j) {
            c->causal_mask[r * t + j] = -std::numeric_limits<float>::infinity();
          }
        }
      }
      const dnnl::matmul::desc logits(strided(T, D, x_type, H * D, 1),
                                      strided(D, t, x_type, 1, h * D),
                                      dnnl::memory::desc({T, t}, dt::f32, tag::ab));
      c->logits = dnnl::matmul(dnnl::matmul::primitive_desc(logits, attr, engine));
      const dnnl::softmax_v2_forward::desc softmax(dnnl::prop_kind::forward_inference,
                                                   dnnl::algorithm::softmax_accurate,
                                                   dnnl::memory::desc({T, t}, dt::f32, tag::ab),
                                                   dnnl::memory::desc({T, t}, x_type, tag::ab), 1);
      c->softmax =
          dnnl::softmax_v2_forward(dnnl::softmax_v2_forward::primitive_desc(softmax, engine));
      const dnnl::matmul::desc values(dnnl::memory::desc({T, t}, x_type, tag::ab),
                                      strided(t, d, x_type, h * d, 1),
                                      strided(T, d, x_type, H * d, 1));
      c->values = dnnl::matmul(dnnl::matmul::primitive_desc(values, engine));
    });
    return c;
  }

  mutable cpu::OneDnnPrimitiveCache<CompositeKey, std::shared_ptr<const Composite>> cache_{
      kMaxCached};
};

}  // namespace

const Implementation& dot_product_attention_onednn_implementation() {
  static const OneDnnDotProductAttention impl;
  return impl;
}

}  // namespace tokamax
