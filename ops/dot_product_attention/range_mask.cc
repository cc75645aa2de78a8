// dot_product_attention: upstream's Mask ranges and token indices: binding, seeded inputs, and
// the key mask the kernels, the reference and the oracle read.
//
// Dimensions: as range_mask.h; L the last (sequence) extent of one of the tensors.
#include "ops/dot_product_attention/range_mask.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <string>

#include "ops/framework/errors.h"
#include "ops/framework/random.h"

namespace tokamax {
namespace {

using nlohmann::json;

constexpr const char* kPrefix = "dot_product_attention: ";

// Per row (k_start, k_end, q_indices: [*B, H, T]) or per key (the others: [*B, H, t]).
bool per_row(const std::string& name) {
  return name == "k_start" || name == "k_end" || name == "q_indices";
}

// A per-row [.., T] tensor read as [.., T, 1] of [*B, H, T, t]; a per-key [.., t] as [.., 1, t].
TensorSpec as_full(const TensorSpec& spec, bool row) {
  TensorSpec full = spec;
  full.dims.insert(row ? full.dims.end() : full.dims.end() - 1, 1);
  return full;
}

// The ranges and indices of a problem, as the kernels ask for them.
class AttentionRangeMask final : public FlashKeyMask {
 public:
  AttentionRangeMask(const AttentionProblem& p, const TensorMap& inputs) : p_(p) {
    const std::optional<TensorSpec>* specs[] = {&p.q_start, &p.q_end,     &p.k_start,
                                                &p.k_end,   &p.q_indices, &p.k_indices};
    for (int n = 0; n < 6; ++n) {
      if (!*specs[n]) continue;
      const std::string name = kAttentionRangeNames[n];
      Field& f = fields_[n];
      f.present = true;
      const Tensor& x = inputs.at(name);
      f.values.assign(x.data<int32_t>(), x.data<int32_t>() + x.num_elements());
      f.at = p.broadcast(as_full(**specs[n], per_row(name)));
      alike_ = alike_ && f.at.stride_h == 0;
    }
    // Only row ranges on positions: each row's keys are one interval per head.
    rows_only_ = !fields_[kQStart].present && !fields_[kQEnd].present &&
                 !fields_[kQIndices].present && !fields_[kKIndices].present;
  }

  std::pair<int64_t, int64_t> key_range(int64_t b, int64_t r) const override {
    if (fields_[kKIndices].present) return {0, p_.t};
    int64_t lo = p_.t, hi = 0;
    for (int64_t hq = 0; hq < (alike_ ? 1 : p_.H); ++hq) {
      const auto [l, h] = row_keys(b, hq, r);
      if (l < h) lo = std::min(lo, l), hi = std::max(hi, h);
    }
    return {lo, std::max(lo, hi)};
  }

  KeyBlock block(int64_t b, int64_t r0, int64_t rows, int64_t j0, int64_t n) const override {
    if (rows_only_) {
      bool any = false;
      for (int64_t hq = 0; hq < (alike_ ? 1 : p_.H) && !any; ++hq) {
        for (int64_t r = r0; r < r0 + rows && !any; ++r) {
          const auto [lo, hi] = row_keys(b, hq, r);
          any = std::max(lo, j0) < std::min(hi, j0 + n);
        }
      }
      if (!any) return KeyBlock::kEmpty;
      return alike_ ? KeyBlock::kInterval : KeyBlock::kScattered;
    }
    for (int64_t hq = 0; hq < (alike_ ? 1 : p_.H); ++hq) {
      for (int64_t r = r0; r < r0 + rows; ++r) {
        for (int64_t j = j0; j < j0 + n; ++j) {
          if (visible(b, hq, r, j)) return KeyBlock::kScattered;
        }
      }
    }
    return KeyBlock::kEmpty;
  }

  void mask_row(int64_t b, int64_t hq, int64_t r, int64_t j0, int64_t c_lo, int64_t c_hi,
                float* s) const override {
    for (int64_t c = c_lo; c < c_hi; ++c) {
      if (!visible(b, hq, r, j0 + c)) s[c] = -std::numeric_limits<float>::infinity();
    }
  }

  bool alike_for_heads() const override { return alike_; }

 private:
  enum { kQStart, kQEnd, kKStart, kKEnd, kQIndices, kKIndices };
  struct Field {
    bool present = false;
    std::vector<int32_t> values;
    AttentionBroadcast at;
  };

  int64_t value(int n, int64_t b, int64_t hq, int64_t r, int64_t j) const {
    return fields_[n].values[fields_[n].at.offset(b, hq, r, j)];
  }
  // Row r's key range from k_start / k_end alone (keys on positions).
  std::pair<int64_t, int64_t> row_keys(int64_t b, int64_t hq, int64_t r) const {
    const int64_t lo = fields_[kKStart].present ? value(kKStart, b, hq, r, 0) : 0;
    const int64_t hi = fields_[kKEnd].present ? value(kKEnd, b, hq, r, 0) : p_.t;
    return {std::clamp<int64_t>(lo, 0, p_.t), std::clamp<int64_t>(hi, 0, p_.t)};
  }

  bool visible(int64_t b, int64_t hq, int64_t r, int64_t j) const {
    const int64_t qi = fields_[kQIndices].present ? value(kQIndices, b, hq, r, 0) : r;
    const int64_t kj = fields_[kKIndices].present ? value(kKIndices, b, hq, 0, j) : j;
    if (p_.causal_in_key_mask) {
      if (qi < kj - p_.causal_offset) return false;
      if (p_.causal_window >= 0 && qi >= kj - p_.causal_offset + p_.causal_window) return false;
    }
    if (fields_[kQStart].present && qi < value(kQStart, b, hq, 0, j)) return false;
    if (fields_[kQEnd].present && qi >= value(kQEnd, b, hq, 0, j)) return false;
    if (fields_[kKStart].present && kj < value(kKStart, b, hq, r, 0)) return false;
    if (fields_[kKEnd].present && kj >= value(kKEnd, b, hq, r, 0)) return false;
    return true;
  }

  AttentionProblem p_;
  Field fields_[6];
  bool alike_ = true;
  bool rows_only_ = true;
};

}  // namespace

bool is_attention_range_name(std::string_view name) {
  return std::find(std::begin(kAttentionRangeNames), std::end(kAttentionRangeNames), name) !=
         std::end(kAttentionRangeNames);
}

void bind_attention_ranges(const json& args, const json* mask, const std::vector<int64_t>& batch,
                           int64_t H, int64_t T, int64_t t, json& out) {
  for (const char* name : kAttentionRangeNames) {
    const bool top = args.contains(name) && !args.at(name).is_null();
    const bool inside = mask && mask->contains(name) && !mask->at(name).is_null();
    if (top && inside) {
      throw InvalidArgument(
          std::string(kPrefix) + name + ": give it once, as an argument or " + "in the mask object",
          name);
    }
    if (!top && !inside) continue;
    const json holder = {{name, top ? args.at(name) : mask->at(name)}};
    const bool row = per_row(name);
    const char* shape = row ? "[*B, H, T]" : "[*B, H, t]";
    const TensorSpec spec = read_tensor_arg(
        kPrefix, holder, name,
        {.shape = shape, .example = "i32[2,1,4096]", .min_rank = 1, .float_only = false});
    std::vector<int64_t> full = batch;
    full.insert(full.end(), {H, row ? T : t});
    const std::string full_text = TensorSpec{DType::kI32, full}.to_string();
    bool ok = spec.dtype == DType::kI32 && spec.rank() <= static_cast<int>(full.size());
    for (int i = 0; ok && i < spec.rank(); ++i) {
      const int64_t want = full[full.size() - spec.dims.size() + i];
      ok = spec.dims[i] == 1 || spec.dims[i] == want;
    }
    if (!ok) {
      throw InvalidArgument(std::string(kPrefix) + name + " must be i32 broadcastable to " + shape +
                                " = " + full_text + ", got " + spec.to_string(),
                            name);
    }
    out[name] = spec.to_string();
  }
}

void make_attention_range_inputs(const AttentionProblem& p, uint64_t seed, TensorMap& inputs) {
  const std::optional<TensorSpec>* specs[] = {&p.q_start, &p.q_end,     &p.k_start,
                                              &p.k_end,   &p.q_indices, &p.k_indices};
  for (int n = 0; n < 6; ++n) {
    if (!*specs[n]) continue;
    const std::string name = kAttentionRangeNames[n];
    Tensor x(**specs[n]);
    const int64_t L = x.spec().dims.back(), full = per_row(name) ? p.T : p.t;
    const bool is_index = name.ends_with("indices"), is_start = name.ends_with("start");
    // Starts and ends of one kind share their stream, so they describe the same documents.
    const uint64_t stream = stream_id(is_index ? name : name.substr(0, 1) + "_range");
    for (int64_t slice = 0; slice < x.num_elements() / std::max<int64_t>(L, 1); ++slice) {
      int32_t* row = x.data<int32_t>() + slice * L;
      auto u = [&](int64_t k) { return uniform01(seed, stream, slice * 4 * (full + 1) + k); };
      if (is_index) {
        int64_t at = static_cast<int64_t>(3.0 * u(0));
        for (int64_t e = 0; e < L; ++e) {
          if (e > 0) at += std::min<int64_t>(2, static_cast<int64_t>(2.5 * u(e)));
          row[e] = static_cast<int32_t>(at);
        }
      } else if (L == 1) {  // one bound for the whole sequence: cut a quarter off its end
        row[0] = static_cast<int32_t>(is_start ? full / 4.0 * u(0) : full - full / 4.0 * u(0));
      } else {  // packed documents of 1 to 16 tokens
        for (int64_t at = 0, k = 1; at < L; ++k) {
          const int64_t len = 1 + static_cast<int64_t>(16.0 * u(k));
          for (int64_t e = at; e < std::min(L, at + len); ++e) {
            row[e] = static_cast<int32_t>(is_start ? at : at + len);
          }
          at += len;
        }
      }
    }
    inputs.emplace(name, std::move(x));
  }
}

AttentionProblem with_range_mask(const AttentionProblem& p, const TensorMap& inputs) {
  if (!p.has_ranges()) return p;
  AttentionProblem out = p;
  out.key_mask = std::make_shared<AttentionRangeMask>(p, inputs);
  return out;
}

}  // namespace tokamax
