// linear_softmax_cross_entropy_loss_vjp: the oneDNN composite baseline ("onednn"), what a
// framework without a fused kernel runs for the loss's backward: a matmul into the materialised
// f32 logits [B, V], logsoftmax forward in place, logsoftmax backward of the gathered one-hot
// cotangent (-c_b at each label: dz = c (p - onehot)), then dx = dz w^T and dw = x^T dz as two
// matmuls. Its peak memory is the logits plus dz, 2 * B * V * 4 bytes (and dz's bf16 copy for
// bf16 inputs) on top of the inputs and outputs.
//
// Dimensions.
//   B      rows of x (tokens), one label each
//   H      hidden size: the contraction extent of the logits x @ w
//   V      vocabulary size
//
// bf16 inputs: the gradient matmuls take dz rounded to bf16 (oneDNN 2.x's matmul has one
// src/weights type, and converting w [H, V] to f32 would add a copy as large as the vocabulary
// projection); the error model allows that rounding where x and w are both 16-bit
// (base_numerics.cc, item 3). Threads are oneDNN's (OpenMP), so the config is empty.
#include <cstring>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cpu/onednn_engine.h"
#include "ops/common/onednn_primitive.h"
#include "ops/framework/errors.h"
#include "ops/framework/op.h"
#include "ops/linear_softmax_cross_entropy_loss/onednn_common.h"
#include "ops/linear_softmax_cross_entropy_loss/vjp/base.h"

namespace tokamax {
namespace {

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

using Key = std::tuple<int64_t, int64_t, int64_t, dt>;  // B, H, V, input type
constexpr size_t kMaxCachedShapes = 256;

struct Primitives {
  dnnl::matmul logits;                  // x [B, H] @ w [H, V] -> f32 [B, V]
  dnnl::logsoftmax_forward logsoftmax;  // in place over V
  dnnl::logsoftmax_backward backward;   // diff_dst one-hot -> dz f32 [B, V], in place
  dnnl::reorder to_input_type;          // dz f32 -> the inputs' type (bf16 only)
  dnnl::matmul dx;                      // dz [B, V] @ w^T [V, H] -> [B, H]
  dnnl::matmul dw;                      // x^T [H, B] @ dz [B, V] -> [H, V]
};

// [rows, cols] with element (r, c) at r * row_stride + c * col_stride.
dnnl::memory::desc strided(int64_t rows, int64_t cols, dt type, int64_t row_stride,
                           int64_t col_stride) {
  return dnnl::memory::desc(dims{rows, cols}, type, dims{row_stride, col_stride});
}

class OneDnnLinearSoftmaxCrossEntropyVjp final
    : public OneDnnImplementation<LinearSoftmaxCrossEntropyVjpProblem> {
 public:
  nlohmann::json describe() const override {
    nlohmann::json description = cpu::onednn_describe();
    description["composite"] =
        "matmul -> f32 logits [B,V] -> logsoftmax fwd -> logsoftmax bwd of the one-hot -> dz "
        "[B,V] -> matmul dz w^T, matmul x^T dz";
    return description;
  }

  void check(const LinearSoftmaxCrossEntropyVjpProblem& vp, const Device&) const override {
    const LinearSoftmaxCrossEntropyProblem& p = vp.fwd;
    check_lsce_onednn_args(p);
    const dt in = lsce_onednn_type(p.x_dtype);
    for (const dt out : {dt::f32, in}) {
      const std::string why = cpu::onednn_matmul_unavailable(in, out);
      if (!why.empty())
        throw NotImplemented("onednn: " + std::string(dtype_name(p.x_dtype)) + " matmul: " + why);
    }
  }

  void run(const LinearSoftmaxCrossEntropyVjpProblem& vp, const EmptyConfig&, const Device& device,
           const TensorMap& inputs, TensorMap& outputs) const override {
    check(vp, device);
    const LinearSoftmaxCrossEntropyProblem& p = vp.fwd;
    const Tensor& labels = inputs.at("labels");
    const std::vector<double> c = lsce_vjp_row_weights(vp, labels, inputs.at("dloss"));
    const int64_t B = p.B, H = p.H, V = p.V;
    const dt in = lsce_onednn_type(p.x_dtype);
    const Primitives prims = primitives({B, H, V, in});
    // One call at a time: the [B, V] buffers are shared (kept between calls, as a framework's
    // allocator would, so that the benchmark does not time page faults).
    std::lock_guard<std::mutex> lock(mutex_);
    const size_t logits_elements = static_cast<size_t>(B * V);
    if (capacity_ < logits_elements) {
      logits_ = Tensor();  // free the old buffers before the larger ones are allocated
      dz_ = Tensor();
      dz_in_ = Tensor();
      logits_ = Tensor(TensorSpec{DType::kF32, {B * V}});
      dz_ = Tensor(TensorSpec{DType::kF32, {B * V}});
      capacity_ = logits_elements;
    }
    if (in == dt::bf16 && dz_in_.num_elements() < B * V) {
      dz_in_ = Tensor(TensorSpec{DType::kBF16, {B * V}});
    }
    float* logits = static_cast<float*>(logits_.raw());
    float* dz = static_cast<float*>(dz_.raw());
    // The gather's cotangent: -c_b at (b, label_b), zero elsewhere (padding rows: all zero).
    std::memset(dz, 0, logits_elements * sizeof(float));
    const int32_t* label = labels.data<int32_t>();
    for (int64_t b = 0; b < B; ++b) {
      if (c[b] != 0.0) dz[b * V + label[b]] = static_cast<float>(-c[b]);
    }
    const dnnl::engine& engine = cpu::onednn_engine();
    dnnl::stream stream(engine);
    void* x = const_cast<void*>(inputs.at("x").raw());  // only read
    void* w = const_cast<void*>(inputs.at("w").raw());
    dnnl::memory x_mem(cpu::onednn_plain_desc(B, H, in), engine, x);
    dnnl::memory w_mem(cpu::onednn_plain_desc(H, V, in), engine, w);
    dnnl::memory logits_mem(cpu::onednn_plain_desc(B, V, dt::f32), engine, logits);
    dnnl::memory dz_mem(cpu::onednn_plain_desc(B, V, dt::f32), engine, dz);
    prims.logits.execute(
        stream, {{DNNL_ARG_SRC, x_mem}, {DNNL_ARG_WEIGHTS, w_mem}, {DNNL_ARG_DST, logits_mem}});
    prims.logsoftmax.execute(stream, {{DNNL_ARG_SRC, logits_mem}, {DNNL_ARG_DST, logits_mem}});
    prims.backward.execute(
        stream,
        {{DNNL_ARG_DST, logits_mem}, {DNNL_ARG_DIFF_DST, dz_mem}, {DNNL_ARG_DIFF_SRC, dz_mem}});
    dnnl::memory grad_mem = dz_mem;
    if (in == dt::bf16) {
      grad_mem = dnnl::memory(cpu::onednn_plain_desc(B, V, in), engine, dz_in_.raw());
      prims.to_input_type.execute(stream, dz_mem, grad_mem);
    }
    dnnl::memory w_t(strided(V, H, in, 1, V), engine, w);
    dnnl::memory dx_mem(cpu::onednn_plain_desc(B, H, in), engine, outputs.at("dx").raw());
    prims.dx.execute(stream,
                     {{DNNL_ARG_SRC, grad_mem}, {DNNL_ARG_WEIGHTS, w_t}, {DNNL_ARG_DST, dx_mem}});
    dnnl::memory x_t(strided(H, B, in, 1, H), engine, x);
    dnnl::memory dw_mem(cpu::onednn_plain_desc(H, V, in), engine, outputs.at("dw").raw());
    prims.dw.execute(stream,
                     {{DNNL_ARG_SRC, x_t}, {DNNL_ARG_WEIGHTS, grad_mem}, {DNNL_ARG_DST, dw_mem}});
    stream.wait();
  }

 private:
  // The primitives of one shape, created on first use.
  Primitives primitives(const Key& key) const {
    return cache_.get(key, [&] {
      // Named copies, not structured bindings: the lambda below captures them.
      const int64_t B = std::get<0>(key), H = std::get<1>(key), V = std::get<2>(key);
      const dt in = std::get<3>(key);
      const dnnl::engine& engine = cpu::onednn_engine();
      Primitives prims;
      create_onednn(
          "primitive for B=" + std::to_string(B) + ", H=" + std::to_string(H) +
              ", V=" + std::to_string(V),
          [&] {
            const dnnl::memory::desc logits = cpu::onednn_plain_desc(B, V, dt::f32);
            prims.logits = dnnl::matmul(dnnl::matmul::primitive_desc(
                dnnl::matmul::desc(cpu::onednn_plain_desc(B, H, in),
                                   cpu::onednn_plain_desc(H, V, in), logits),
                engine));
            const dnnl::logsoftmax_forward::primitive_desc forward(
                dnnl::logsoftmax_forward::desc(dnnl::prop_kind::forward_training, logits, 1),
                engine);
            prims.logsoftmax = dnnl::logsoftmax_forward(forward);
            prims.backward = dnnl::logsoftmax_backward(dnnl::logsoftmax_backward::primitive_desc(
                dnnl::logsoftmax_backward::desc(logits, logits, 1), engine, forward));
            const dnnl::memory::desc grad = cpu::onednn_plain_desc(B, V, in);
            if (in != dt::f32) {
              prims.to_input_type =
                  dnnl::reorder(dnnl::reorder::primitive_desc(engine, logits, engine, grad));
            }
            prims.dx = dnnl::matmul(dnnl::matmul::primitive_desc(
                dnnl::matmul::desc(grad, strided(V, H, in, 1, V), cpu::onednn_plain_desc(B, H, in)),
                engine));
            prims.dw = dnnl::matmul(dnnl::matmul::primitive_desc(
                dnnl::matmul::desc(strided(H, B, in, 1, H), grad, cpu::onednn_plain_desc(H, V, in)),
                engine));
          });
      return prims;
    });
  }

  mutable cpu::OneDnnPrimitiveCache<Key, Primitives> cache_{kMaxCachedShapes};
  mutable std::mutex mutex_;  // one call at a time: the [B, V] buffers are shared
  mutable Tensor logits_;     // [B, V] f32, the materialised logits (grown, never shrunk)
  mutable Tensor dz_;         // [B, V] f32, the one-hot cotangent, then dz in place
  mutable Tensor dz_in_;      // [B, V] bf16, dz for the bf16 matmuls
  mutable size_t capacity_ = 0;
};

}  // namespace

const Implementation& linear_softmax_cross_entropy_loss_vjp_onednn_implementation() {
  static const OneDnnLinearSoftmaxCrossEntropyVjp impl;
  return impl;
}

}  // namespace tokamax
