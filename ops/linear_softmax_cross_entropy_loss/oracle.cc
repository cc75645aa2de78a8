// linear_softmax_cross_entropy_loss: the float64 oracle of `loss` from each row's softmax
// statistics (oracle_logits.h); the error model is derived in base_numerics.cc.
//
// Dimensions: as base.h (B, H, V).
#include "ops/linear_softmax_cross_entropy_loss/oracle.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/framework/errors.h"
#include "ops/linear_softmax_cross_entropy_loss/base.h"
#include "ops/linear_softmax_cross_entropy_loss/oracle_logits.h"

namespace tokamax {
namespace {

constexpr double kU = 0x1p-24;  // f32 unit roundoff: the accumulation every implementation uses

double gamma_f32(double n) {
  const double nu = n * kU;
  return nu < 0.5 ? nu / (1.0 - nu) : 1.0;
}

// A row's loss and its error budget (items 1-3 of base_numerics.cc's model, absolute).
struct RowOracle {
  double loss = 0.0;
  double budget = 0.0;
};

// The relative error of each logit: H terms (P H with a precision preset, whose operand rounding
// adds to each term's), each summed in f32.
double logit_gamma(const LinearSoftmaxCrossEntropyProblem& p) {
  const PrecisionPlan plan = p.precision_plan();
  return gamma_f32(static_cast<double>(p.H * plan.passes()) + 1.0) + plan.operand_roundoff;
}

// A row's log-sum-exp budget (items 1-3 without the label logit's parts).
double lse_budget(const LinearSoftmaxCrossEntropyProblem& p, const LsceRowStats& s) {
  return logit_gamma(p) * s.m_max +
         kU * (3.0 * static_cast<double>(p.V) + 32.0 + 3.0 * std::fabs(s.lse()));
}

RowOracle row_oracle(const LinearSoftmaxCrossEntropyProblem& p, const LsceRowStats& s) {
  const double lse = s.lse();
  RowOracle row;
  row.loss = lse - s.z_label;
  row.budget = lse_budget(p, s) + logit_gamma(p) * s.m_label + kU * std::fabs(s.z_label);
  return row;
}

}  // namespace

OracleSample linear_softmax_cross_entropy_oracle(const BoundArgs& args, const TensorMap& inputs,
                                                 std::span<const int64_t> index,
                                                 OracleMethod method) {
  const LinearSoftmaxCrossEntropyProblem p = LinearSoftmaxCrossEntropyProblem::from(args);
  const Tensor& labels = inputs.find("labels")->second;
  check_lsce_labels(p, labels);
  const int32_t* label = labels.data<int32_t>();
  OracleSample sample;
  sample.index.assign(index.begin(), index.end());
  sample.value.assign(index.size(), 0.0);
  sample.magnitude.assign(index.size(), 0.0);
  // The rows whose label counts (padding has exactly zero loss): the sampled ones, or all of
  // them for a reduction.
  std::vector<int64_t> rows;
  std::vector<size_t> sample_of_row;
  if (p.reduction == LsceReduction::kNone) {
    for (size_t s = 0; s < index.size(); ++s) {
      if (!lsce_label_counts(label[index[s]], p.V)) continue;
      rows.push_back(index[s]);
      sample_of_row.push_back(s);
    }
  } else {
    for (int64_t i = 0; i < p.B; ++i) {
      if (lsce_label_counts(label[i], p.V)) rows.push_back(i);
    }
  }
  const std::vector<LsceRowStats> stats = lsce_row_stats(p, inputs, rows, method);
  if (p.reduction == LsceReduction::kNone) {
    for (size_t r = 0; r < rows.size(); ++r) {
      const RowOracle row = row_oracle(p, stats[r]);
      sample.value[sample_of_row[r]] = row.loss;
      sample.magnitude[sample_of_row[r]] = row.budget / kU;
    }
    return sample;
  }
  // A scalar: every row contributes (item 4 of the error model), in row order.
  double total = 0.0, budget = 0.0, abs_total = 0.0;
  for (size_t r = 0; r < rows.size(); ++r) {
    const RowOracle row = row_oracle(p, stats[r]);
    total += row.loss;
    abs_total += std::fabs(row.loss);
    budget += row.budget;
  }
  budget += gamma_f32(static_cast<double>(p.B)) * abs_total;
  double value = total;
  if (p.reduction == LsceReduction::kMean) {
    const double B = static_cast<double>(std::max<int64_t>(p.B, 1));
    value = total / B;
    budget = budget / B + kU * std::fabs(value);
  }
  for (size_t s = 0; s < index.size(); ++s) {
    sample.value[s] = value;
    sample.magnitude[s] = budget / kU;
  }
  return sample;
}

OracleSample linear_softmax_cross_entropy_lse_oracle(const BoundArgs& args, const TensorMap& inputs,
                                                     std::span<const int64_t> index,
                                                     OracleMethod method) {
  const LinearSoftmaxCrossEntropyProblem p = LinearSoftmaxCrossEntropyProblem::from(args);
  check_lsce_labels(p, inputs.find("labels")->second);
  const std::vector<LsceRowStats> stats = lsce_row_stats(p, inputs, index, method);
  OracleSample sample;
  sample.index.assign(index.begin(), index.end());
  for (const LsceRowStats& s : stats) {
    sample.value.push_back(s.lse());
    sample.magnitude.push_back(lse_budget(p, s) / kU);
  }
  return sample;
}

template <>
OracleSample ProblemOp<LinearSoftmaxCrossEntropyProblem>::oracle(
    const BoundArgs& args, const TensorMap& inputs, std::string_view output,
    std::span<const int64_t> index) const {
  if (output == "lse" && LinearSoftmaxCrossEntropyProblem::from(args).return_residuals) {
    return linear_softmax_cross_entropy_lse_oracle(args, inputs, index, OracleMethod::kBlocked);
  }
  if (output != "loss") {
    throw InvalidArgument("linear_softmax_cross_entropy_loss has no output '" +
                          std::string(output) + "'");
  }
  return linear_softmax_cross_entropy_oracle(args, inputs, index, OracleMethod::kBlocked);
}

}  // namespace tokamax
