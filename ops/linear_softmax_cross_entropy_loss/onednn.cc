// linear_softmax_cross_entropy_loss: the oneDNN composite baseline ("onednn"): a matmul into the
// materialised f32 logits [B, V], an in-place logsoftmax over V, then a gather of the label
// column and the reduction. This is what a framework without a fused kernel runs; its peak
// memory is the B * V * 4 bytes of logits on top of the inputs.
//
// Dimensions.
//   B      rows of x (tokens), one label each
//   H      hidden size: the contraction extent of the logits x @ w
//   V      vocabulary size
//
// Threads are left to oneDNN's runtime (OpenMP in Debian's build), so the config is empty.
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cpu/onednn_engine.h"
#include "ops/common/onednn_primitive.h"
#include "ops/framework/errors.h"
#include "ops/framework/op.h"
#include "ops/linear_softmax_cross_entropy_loss/base.h"
#include "ops/linear_softmax_cross_entropy_loss/onednn_common.h"

namespace tokamax {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

using Key = std::tuple<int64_t, int64_t, int64_t, dt>;  // B, H, V, input type
constexpr size_t kMaxCachedShapes = 256;

struct Primitives {
  dnnl::matmul matmul;
  dnnl::logsoftmax_forward logsoftmax;
};

class OneDnnLinearSoftmaxCrossEntropy final
    : public OneDnnImplementation<LinearSoftmaxCrossEntropyProblem> {
 public:
  nlohmann::json describe() const override {
    nlohmann::json description = cpu::onednn_describe();
    description["composite"] = "matmul -> f32 logits [B,V] -> logsoftmax -> gather, reduce";
    return description;
  }

  void check(const LinearSoftmaxCrossEntropyProblem& p, const Device&) const override {
    check_lsce_onednn_args(p);
    if (p.return_residuals) {
      throw NotImplemented(
          "onednn: return_residuals (the in-place logsoftmax does not keep its row statistics)");
    }
    const std::string why = cpu::onednn_matmul_unavailable(lsce_onednn_type(p.x_dtype));
    if (!why.empty())
      throw NotImplemented("onednn: " + std::string(dtype_name(p.x_dtype)) +
                           "->f32 matmul: " + why);
  }

  void run(const LinearSoftmaxCrossEntropyProblem& p, const EmptyConfig&, const Device& device,
           const TensorMap& inputs, TensorMap& outputs) const override {
    check(p, device);
    const Tensor& labels = inputs.at("labels");
    check_lsce_labels(p, labels);
    const int64_t B = p.B, H = p.H, V = p.V;
    const dt in_type = lsce_onednn_type(p.x_dtype);
    // One call at a time: the logits buffer is shared (kept between calls, as a framework's
    // allocator would, so that the benchmark does not time page faults).
    const Primitives prims = primitives({B, H, V, in_type});
    std::lock_guard<std::mutex> lock(mutex_);
    const size_t logits_elements = static_cast<size_t>(B * V);
    if (logits_capacity_ < logits_elements) {
      logits_ = Tensor();  // free the old buffer before the larger one is allocated
      logits_ = Tensor(TensorSpec{DType::kF32, {B * V}});
      logits_capacity_ = logits_elements;
    }
    float* logits = static_cast<float*>(logits_.raw());
    const dnnl::engine& engine = cpu::onednn_engine();
    dnnl::stream stream(engine);
    dnnl::memory src(cpu::onednn_plain_desc(B, H, in_type), engine,
                     const_cast<void*>(inputs.at("x").raw()));
    dnnl::memory weights(cpu::onednn_plain_desc(H, V, in_type), engine,
                         const_cast<void*>(inputs.at("w").raw()));
    dnnl::memory dst(cpu::onednn_plain_desc(B, V, dt::f32), engine, logits);
    prims.matmul.execute(stream,
                         {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}});
    // In place: src = dst = the logits.
    prims.logsoftmax.execute(stream, {{DNNL_ARG_SRC, dst}, {DNNL_ARG_DST, dst}});
    stream.wait();
    const int32_t* label = labels.data<int32_t>();
    std::vector<double> loss(static_cast<size_t>(B));
    for (int64_t i = 0; i < B; ++i) {
      loss[i] =
          lsce_label_counts(label[i], V) ? -static_cast<double>(logits[i * V + label[i]]) : 0.0;
    }
    write_lsce_loss(p, loss.data(), outputs.at("loss").data<float>());
  }

 private:
  // The primitives of one shape, created on first use.
  Primitives primitives(const Key& key) const {
    return cache_.get(key, [&] {
      // Named copies, not structured bindings: the lambda below captures them.
      const int64_t B = std::get<0>(key), H = std::get<1>(key), V = std::get<2>(key);
      const dt in_type = std::get<3>(key);
      const dnnl::engine& engine = cpu::onednn_engine();
      Primitives prims;
      create_onednn("primitive for B=" + std::to_string(B) + ", H=" + std::to_string(H) +
                        ", V=" + std::to_string(V),
                    [&] {
                      const dnnl::matmul::desc matmul(cpu::onednn_plain_desc(B, H, in_type),
                                                      cpu::onednn_plain_desc(H, V, in_type),
                                                      cpu::onednn_plain_desc(B, V, dt::f32));
                      prims.matmul = dnnl::matmul(dnnl::matmul::primitive_desc(matmul, engine));
                      const dnnl::logsoftmax_forward::desc logsoftmax(
                          dnnl::prop_kind::forward_inference, cpu::onednn_plain_desc(B, V, dt::f32),
                          1);
                      prims.logsoftmax = dnnl::logsoftmax_forward(
                          dnnl::logsoftmax_forward::primitive_desc(logsoftmax, engine));
                    });
      return prims;
    });
  }

  mutable cpu::OneDnnPrimitiveCache<Key, Primitives> cache_{kMaxCachedShapes};
  mutable std::mutex mutex_;  // one call at a time: the logits buffer is shared
  mutable Tensor logits_;     // [B, V] f32, the materialised logits (grown, never shrunk)
  mutable size_t logits_capacity_ = 0;
};

}  // namespace

const Implementation& linear_softmax_cross_entropy_loss_onednn_implementation() {
  static const OneDnnLinearSoftmaxCrossEntropy impl;
  return impl;
}

}  // namespace tokamax
