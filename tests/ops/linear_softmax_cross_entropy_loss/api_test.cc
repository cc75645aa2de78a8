// Tests for tokamax::linear_softmax_cross_entropy_loss: implementations agree, labels and shapes
// are checked by name.
#include "ops/linear_softmax_cross_entropy_loss/api.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <utility>

#include "ops/framework/errors.h"

using namespace tokamax;

namespace {

LinearSoftmaxCrossEntropyOptions with(const std::string& impl, LsceReduction reduction) {
  LinearSoftmaxCrossEntropyOptions options;
  options.implementation = impl;
  options.reduction = reduction;
  return options;
}

Tensor labels_of(std::vector<int32_t> values) {
  Tensor t(TensorSpec{DType::kI32, {static_cast<int64_t>(values.size())}});
  for (size_t i = 0; i < values.size(); ++i) t.data<int32_t>()[i] = values[i];
  return t;
}

}  // namespace

TEST_CASE("lsce api: every implementation gives the hand-computed loss", "[lsce][api]") {
  // logits = x @ w = [[1, 0, 0], [0, 2, 0]].
  Tensor x(TensorSpec{DType::kF32, {2, 2}});
  Tensor w(TensorSpec{DType::kF32, {2, 3}});
  const float xv[] = {1, 0, 0, 2}, wv[] = {1, 0, 0, 0, 1, 0};
  for (int i = 0; i < 4; ++i) x.data<float>()[i] = xv[i];
  for (int i = 0; i < 6; ++i) w.data<float>()[i] = wv[i];
  const Tensor labels = labels_of({0, 2});
  const double row0 = std::log(std::exp(1.0) + 2.0) - 1.0;
  const double row1 = std::log(std::exp(2.0) + 2.0);
  // Relative tolerance by implementation: ours are exact to a few f32 roundings; oneDNN's
  // logsoftmax uses a faster exp (measured 1.2e-6 relative here).
  const std::pair<const char*, double> impls[] = {
      {"auto", 1e-6}, {"cpu", 1e-6}, {"reference", 1e-6}, {"onednn", 1e-5}};
  for (const auto& [impl, tol] : impls) {
    INFO(impl);
    const Tensor none =
        linear_softmax_cross_entropy_loss(x, labels, w, with(impl, LsceReduction::kNone));
    REQUIRE(none.spec().to_string() == "f32[2]");
    CHECK(none.get(0) == Approx(row0).epsilon(tol));
    CHECK(none.get(1) == Approx(row1).epsilon(tol));
    const Tensor sum =
        linear_softmax_cross_entropy_loss(x, labels, w, with(impl, LsceReduction::kSum));
    REQUIRE(sum.spec().to_string() == "f32[]");
    CHECK(sum.get(0) == Approx(row0 + row1).epsilon(tol));
    const Tensor mean =
        linear_softmax_cross_entropy_loss(x, labels, w, with(impl, LsceReduction::kMean));
    CHECK(mean.get(0) == Approx((row0 + row1) / 2).epsilon(tol));
  }
}

TEST_CASE("lsce api: a label outside 0..V-1 is padding with zero loss, the mean over B",
          "[lsce][api]") {
  // logits = x @ w = [[1, 0, 0], [0, 2, 0], [3, 0, 1]]; rows 1 (label -1) and 2 (label V = 3)
  // are padding.
  Tensor x(TensorSpec{DType::kF32, {3, 2}});
  Tensor w(TensorSpec{DType::kF32, {2, 3}});
  const float xv[] = {1, 0, 0, 2, 3, 1}, wv[] = {1, 0, 0, 0, 1, 1};
  for (int i = 0; i < 6; ++i) x.data<float>()[i] = xv[i];
  for (int i = 0; i < 6; ++i) w.data<float>()[i] = wv[i];
  const double row0 = std::log(std::exp(1.0) + 2.0) - 1.0;
  for (const char* impl : {"auto", "cpu", "reference", "onednn"}) {
    INFO(impl);
    const Tensor labels = labels_of({0, -1, 3});
    const Tensor none =
        linear_softmax_cross_entropy_loss(x, labels, w, with(impl, LsceReduction::kNone));
    CHECK(none.get(0) == Approx(row0).epsilon(1e-5));
    CHECK(none.get(1) == 0.0);
    CHECK(none.get(2) == 0.0);
    const Tensor sum =
        linear_softmax_cross_entropy_loss(x, labels, w, with(impl, LsceReduction::kSum));
    CHECK(sum.get(0) == Approx(row0).epsilon(1e-5));
    const Tensor mean =
        linear_softmax_cross_entropy_loss(x, labels, w, with(impl, LsceReduction::kMean));
    CHECK(mean.get(0) == Approx(row0 / 3).epsilon(1e-5));
  }
}

TEST_CASE("lsce api: with residuals, every row's log-sum-exp, padding rows too",
          "[lsce][api]") {
  // logits = [[1, 0, 0], [0, 2, 0]]; row 1 is padding (label -1): zero loss, but its lse is
  // still the residual the VJP takes.
  Tensor x(TensorSpec{DType::kF32, {2, 2}});
  Tensor w(TensorSpec{DType::kF32, {2, 3}});
  const float xv[] = {1, 0, 0, 2}, wv[] = {1, 0, 0, 0, 1, 0};
  for (int i = 0; i < 4; ++i) x.data<float>()[i] = xv[i];
  for (int i = 0; i < 6; ++i) w.data<float>()[i] = wv[i];
  const Tensor labels = labels_of({0, -1});
  const double lse0 = std::log(std::exp(1.0) + 2.0), lse1 = std::log(std::exp(2.0) + 2.0);
  for (const char* impl : {"auto", "cpu", "reference"}) {
    INFO(impl);
    const LinearSoftmaxCrossEntropyWithResiduals r =
        linear_softmax_cross_entropy_loss_with_residuals(x, labels, w,
                                                         with(impl, LsceReduction::kNone));
    REQUIRE(r.lse.spec().to_string() == "f32[2]");
    CHECK(r.lse.get(0) == Approx(lse0).epsilon(1e-6));
    CHECK(r.lse.get(1) == Approx(lse1).epsilon(1e-6));
    CHECK(r.loss.get(0) == Approx(lse0 - 1.0).epsilon(1e-6));
    CHECK(r.loss.get(1) == 0.0);
  }
  // oneDNN's in-place logsoftmax keeps no row statistics: it declines, with that reason.
  CHECK_THROWS_WITH(linear_softmax_cross_entropy_loss_with_residuals(
                        x, labels, w, with("onednn", LsceReduction::kSum)),
                    Catch::Contains("return_residuals"));
}

TEST_CASE("lsce api validates arguments by name", "[lsce][api]") {
  const Tensor x(TensorSpec{DType::kBF16, {3, 4}});
  const Tensor w(TensorSpec{DType::kBF16, {4, 10}});
  CHECK_THROWS_WITH(linear_softmax_cross_entropy_loss(x, labels_of({1, 2}), w),
                    Catch::Contains("labels must be i32[3]"));
  CHECK_THROWS_WITH(linear_softmax_cross_entropy_loss(x, labels_of({1, 2, 3}),
                                                      Tensor(TensorSpec{DType::kBF16, {5, 10}})),
                    Catch::Contains("H=4"));
  CHECK_THROWS_WITH(linear_softmax_cross_entropy_loss(x, labels_of({1, 2, 3}), w,
                                                      with("gpu", LsceReduction::kSum)),
                    Catch::Contains("unknown implementation 'gpu'"));
}
