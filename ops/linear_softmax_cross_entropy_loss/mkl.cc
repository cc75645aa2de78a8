// linear_softmax_cross_entropy_loss: the oneMKL composite baseline ("mkl"): a gemm into the
// materialised f32 logits [B, V] (cblas_sgemm or cblas_gemm_bf16bf16f32), then per row the
// logsumexp over V (our vectorised max and exp-sum, as a framework's reduction would) minus the
// label's logit, and the reduction. Like the onednn composite, its peak memory is the B * V * 4
// bytes of logits on top of the inputs.
//
// Dimensions.
//   B      rows of x (tokens), one label each
//   H      hidden size: the contraction extent of the logits x @ w
//   V      vocabulary size
#include <climits>
#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "backends/cpu/mkl_loader.h"
#include "backends/cpu/openblas_loader.h"
#include "backends/cpu/thread_pool.h"
#include "ops/common/cpu_checks.h"
#include "ops/common/cpu_softmax.h"
#include "ops/framework/errors.h"
#include "ops/framework/op.h"
#include "ops/linear_softmax_cross_entropy_loss/base.h"

namespace tokamax {
namespace {

class MklLinearSoftmaxCrossEntropy final
    : public TypedImplementation<LinearSoftmaxCrossEntropyProblem> {
 public:
  std::string_view name() const override { return "mkl"; }
  bool is_vendor() const override { return true; }
  nlohmann::json describe() const override {
    nlohmann::json description = cpu::mkl_describe();
    description["composite"] = "gemm -> f32 logits [B,V] -> logsumexp - label logit, reduce";
    return description;
  }

  Support supported_on(const Device& device) const override {
    return mkl_support(Implementation::supported_on(device));
  }

  void check(const LinearSoftmaxCrossEntropyProblem& p, const Device&) const override {
    require_mkl();
    if (!p.precision_plan().identity()) {
      throw NotImplemented("mkl: precision=" + std::string(precision_name(p.precision)) +
                           "; the composite multiplies the operands as given");
    }
    const std::string x(dtype_name(p.x_dtype)), w(dtype_name(p.w_dtype));
    if (p.x_dtype != p.w_dtype) {
      throw NotImplemented("mkl: x is " + x + " but w is " + w +
                           "; a BLAS gemm takes one input type");
    }
    if (p.x_dtype != DType::kF32 && p.x_dtype != DType::kBF16) {
      throw NotImplemented("mkl: " + x + " inputs; the composite wires f32 and bf16 only");
    }
    if (p.return_residuals) {
      throw NotImplemented("mkl: return_residuals (the composite reports the loss only)");
    }
    if (p.B == 0 || p.H == 0) {
      throw NotImplemented("mkl: B=" + std::to_string(p.B) + ", H=" + std::to_string(p.H) +
                           "; no gemm to time");
    }
    if (p.B > INT_MAX || p.H > INT_MAX || p.V > INT_MAX) {
      throw NotImplemented("mkl: extents exceed the 32-bit BLAS integer");
    }
  }

  void run(const LinearSoftmaxCrossEntropyProblem& p, const EmptyConfig&, const Device& device,
           const TensorMap& inputs, TensorMap& outputs) const override {
    check(p, device);
    const Tensor& labels = inputs.at("labels");
    check_lsce_labels(p, labels);
    const cpu::Mkl& mkl = require_mkl();
    const int B = static_cast<int>(p.B), H = static_cast<int>(p.H), V = static_cast<int>(p.V);
    // One call at a time: the logits buffer is shared (kept between calls, as a framework's
    // allocator would, so that the benchmark does not time page faults).
    std::lock_guard<std::mutex> lock(mutex_);
    const size_t logits_elements = static_cast<size_t>(p.B * p.V);
    if (logits_capacity_ < logits_elements) {
      logits_ = Tensor();  // free the old buffer before the larger one is allocated
      logits_ = Tensor(TensorSpec{DType::kF32, {p.B * p.V}});
      logits_capacity_ = logits_elements;
    }
    float* logits = static_cast<float*>(logits_.raw());
    {
      const auto threads = cpu::mkl_threads(mkl, cpu::cpu_info(device).cores);
      if (p.x_dtype == DType::kBF16) {
        mkl.cblas_gemm_bf16bf16f32(
            cpu::kCblasRowMajor, cpu::kCblasNoTrans, cpu::kCblasNoTrans, B, V, H, 1.0f,
            reinterpret_cast<const uint16_t*>(inputs.at("x").data<bf16>()), H,
            reinterpret_cast<const uint16_t*>(inputs.at("w").data<bf16>()), V, 0.0f, logits, V);
      } else {
        mkl.cblas_sgemm(cpu::kCblasRowMajor, cpu::kCblasNoTrans, cpu::kCblasNoTrans, B, V, H, 1.0f,
                        inputs.at("x").data<float>(), H, inputs.at("w").data<float>(), V, 0.0f,
                        logits, V);
      }
    }
    // Per row: lse - logit[label], the label's logit read before the exp pass overwrites it.
    const int32_t* label = labels.data<int32_t>();
    std::vector<double> loss(static_cast<size_t>(B));
    cpu::parallel_for(B, 0, [&](int64_t i, int) {
      float* row = logits + i * p.V;
      const bool counts = lsce_label_counts(label[i], p.V);
      const float picked = counts ? row[label[i]] : 0.0f;
      const float max = cpu_row_max(row, p.V);
      const float sum = cpu_exp_shift_sum(row, p.V, max);
      loss[i] =
          counts ? static_cast<double>(max) + std::log(static_cast<double>(sum)) - picked : 0.0;
    });
    write_lsce_loss(p, loss.data(), outputs.at("loss").data<float>());
  }

 private:
  mutable std::mutex mutex_;  // one call at a time: the logits buffer is shared
  mutable Tensor logits_;     // [B, V] f32, the materialised logits (grown, never shrunk)
  mutable size_t logits_capacity_ = 0;
};

}  // namespace

const Implementation& linear_softmax_cross_entropy_loss_mkl_implementation() {
  static const MklLinearSoftmaxCrossEntropy impl;
  return impl;
}

}  // namespace tokamax
