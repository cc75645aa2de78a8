// layer_norm_vjp: the oneDNN baseline ("onednn"), a cached layer_normalization backward primitive
// per shape, fed with the statistics of a forward-training primitive.
//
// Dimensions.
//   C      the normalized extent (x's extent along axis)
//   O      product of x's extents before the axis
//   I      product of x's extents after the axis (contiguous); I = 1 for the last axis
//
// oneDNN 2.6 normalizes over the last logical dimension of a 2D..5D tensor; as the forward
// baseline (onednn.cc), the last axis is the plain 2D tensor [O, C] and another axis the strided
// 3D view [O, I, C] with strides (C*I, 1, I), which some oneDNN kernel may or may not take
// (NotImplemented says so). prop_kind::backward computes diff_src and, with use_scale /
// use_shift, diff_scale and diff_shift (f32 [C]); backward_data only diff_src. The backward
// primitive takes the forward's mean and variance as inputs: a training step would keep them
// from its forward pass, but this op's inputs are x, the parameters and dout, so run() first
// runs oneDNN's forward_training primitive (the hint the backward descriptor needs anyway), which
// writes them beside a forward output into a per-thread scratch; the timing includes that pass
// (oneDNN's own threads throughout: a statistics loop on the CPU pool would leave its spinning
// workers competing with OpenMP's on a small machine).
// There is no RMSNorm flag before oneDNN 3.x, and data is f32 or bf16 on CPU: both are
// NotImplemented. Threads are oneDNN's (OpenMP), so the config is empty.
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "backends/cpu/onednn_engine.h"
#include "backends/cpu/scratch.h"
#include "ops/common/onednn_primitive.h"
#include "ops/framework/errors.h"
#include "ops/framework/op.h"
#include "ops/layer_norm/onednn_common.h"
#include "ops/layer_norm/vjp/base.h"

namespace tokamax {
namespace {

using dt = dnnl::memory::data_type;
using flags = dnnl::normalization_flags;

// O, I, C, data type, epsilon, use_scale, use_shift.
using PrimitiveKey = std::tuple<int64_t, int64_t, int64_t, dt, float, bool, bool>;
constexpr size_t kMaxCachedPrimitives = 1024;

// Mean and variance per row, [O] or [O, I] dense f32.
dnnl::memory::desc stat_desc(int64_t O, int64_t I) {
  if (I == 1) return dnnl::memory::desc({O}, dt::f32, dnnl::memory::format_tag::a);
  return dnnl::memory::desc({O, I}, dt::f32, dnnl::memory::format_tag::ab);
}

struct Primitives {
  dnnl::layer_normalization_forward forward;  // forward_training: dst, mean, variance
  dnnl::layer_normalization_backward backward;
};

// Per-thread scratch for the forward output that the statistics pass writes and nobody reads;
// grows only (no page faults after the first call of a size).
void* forward_scratch(size_t bytes) {
  thread_local cpu::ScratchBuffer buffer;
  return buffer.get(bytes);
}

class OneDnnLayerNormVjp final : public OneDnnImplementation<LayerNormVjpProblem> {
 public:
  void check(const LayerNormVjpProblem& p, const Device&) const override {
    check_layer_norm_onednn_args(p);
    if (p.num_elements() == 0) return;
    // Creating the descriptors is what tells whether some oneDNN kernel takes this layout and
    // dtype on this CPU.
    primitive(key(p));
  }

  void run(const LayerNormVjpProblem& p, const EmptyConfig&, const Device& device,
           const TensorMap& inputs, TensorMap& outputs) const override {
    check(p, device);
    if (p.num_elements() == 0) {
      for (auto& [name, t] : outputs) t.fill_zero();
      return;
    }
    const PrimitiveKey k = key(p);
    const Primitives prims = primitive(k);
    const dnnl::engine& engine = cpu::onednn_engine();
    const dt type = std::get<3>(k);
    const Tensor& x = inputs.at("x");
    std::vector<float> mean(static_cast<size_t>(p.rows())), variance(mean.size());
    // dnnl::memory wants non-const handles; the primitive only reads its inputs.
    auto in = [](const Tensor& t) { return const_cast<void*>(t.raw()); };
    const dnnl::memory::desc data = layer_norm_onednn_data_desc(p.O, p.I, p.C, type);
    const dnnl::memory::desc stats = stat_desc(p.O, p.I);
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, dnnl::memory(data, engine, in(x))},
        {DNNL_ARG_DIFF_DST, dnnl::memory(data, engine, in(inputs.at("dout")))},
        {DNNL_ARG_DIFF_SRC, dnnl::memory(data, engine, outputs.at("dx").raw())},
        {DNNL_ARG_MEAN, dnnl::memory(stats, engine, mean.data())},
        {DNNL_ARG_VARIANCE, dnnl::memory(stats, engine, variance.data())}};
    // Parameters and their gradients in f32 (exact for f32/bf16/f16 parameters); C values.
    const dnnl::memory::desc param_desc({p.C}, dt::f32, dnnl::memory::format_tag::a);
    std::vector<float> scale, shift, dscale(static_cast<size_t>(p.C)), dshift(dscale.size());
    if (p.has_scale) {
      const Tensor& s = inputs.at("scale");
      scale.resize(static_cast<size_t>(p.C));
      for (int64_t c = 0; c < p.C; ++c) scale[c] = static_cast<float>(s.get(c) + p.scale_offset);
      args.emplace(DNNL_ARG_SCALE, dnnl::memory(param_desc, engine, scale.data()));
      args.emplace(DNNL_ARG_DIFF_SCALE, dnnl::memory(param_desc, engine, dscale.data()));
    }
    if (p.has_offset) {
      const Tensor& b = inputs.at("offset");
      shift.resize(static_cast<size_t>(p.C));
      for (int64_t c = 0; c < p.C; ++c) shift[c] = static_cast<float>(b.get(c));
      args.emplace(DNNL_ARG_SHIFT, dnnl::memory(param_desc, engine, shift.data()));
      args.emplace(DNNL_ARG_DIFF_SHIFT, dnnl::memory(param_desc, engine, dshift.data()));
    }
    dnnl::stream stream(engine);
    // The statistics: forward_training with the same parameters; its dst is scratch.
    std::unordered_map<int, dnnl::memory> fwd_args = {
        {DNNL_ARG_SRC, args.at(DNNL_ARG_SRC)},
        {DNNL_ARG_DST, dnnl::memory(data, engine, forward_scratch(x.size_bytes()))},
        {DNNL_ARG_MEAN, args.at(DNNL_ARG_MEAN)},
        {DNNL_ARG_VARIANCE, args.at(DNNL_ARG_VARIANCE)}};
    if (p.has_scale) fwd_args.emplace(DNNL_ARG_SCALE, args.at(DNNL_ARG_SCALE));
    if (p.has_offset) fwd_args.emplace(DNNL_ARG_SHIFT, args.at(DNNL_ARG_SHIFT));
    prims.forward.execute(stream, fwd_args);
    prims.backward.execute(stream, args);
    stream.wait();
    if (p.has_scale) {
      Tensor& out = outputs.at("dscale");
      for (int64_t c = 0; c < p.C; ++c) out.set(c, dscale[c]);
    }
    if (p.has_offset) {
      Tensor& out = outputs.at("doffset");
      for (int64_t c = 0; c < p.C; ++c) out.set(c, dshift[c]);
    }
  }

 private:
  static PrimitiveKey key(const LayerNormVjpProblem& p) {
    return {p.O,
            p.I,
            p.C,
            p.x_dtype == DType::kBF16 ? dt::bf16 : dt::f32,
            static_cast<float>(p.epsilon),
            p.has_scale,
            p.has_offset};
  }

  // The backward primitive of one shape (with its forward-training descriptor as the hint
  // oneDNN requires), created on first use.
  Primitives primitive(const PrimitiveKey& key) const {
    return primitives_.get(key, [&] {
      const auto& [O, I, C, type, eps, use_scale, use_shift] = key;
      flags f = flags::none;
      if (use_scale) f |= flags::use_scale;
      if (use_shift) f |= flags::use_shift;
      // Without parameters there is nothing but diff_src to compute.
      const dnnl::prop_kind kind =
          use_scale || use_shift ? dnnl::prop_kind::backward : dnnl::prop_kind::backward_data;
      const dnnl::memory::desc data = layer_norm_onednn_data_desc(O, I, C, type);
      try {
        const dnnl::layer_normalization_forward::desc fwd(dnnl::prop_kind::forward_training, data,
                                                          stat_desc(O, I), eps, f);
        const dnnl::layer_normalization_forward::primitive_desc fwd_pd(fwd, cpu::onednn_engine());
        const dnnl::layer_normalization_backward::desc bwd(kind, data, data, stat_desc(O, I), eps,
                                                           f);
        const dnnl::layer_normalization_backward::primitive_desc bwd_pd(bwd, cpu::onednn_engine(),
                                                                        fwd_pd);
        return Primitives{dnnl::layer_normalization_forward(fwd_pd),
                          dnnl::layer_normalization_backward(bwd_pd)};
      } catch (const dnnl::error& e) {
        throw NotImplemented(std::string("onednn: no layer_normalization backward for ") +
                             (type == dt::bf16 ? "bf16" : "f32") + " [O=" + std::to_string(O) +
                             ", I=" + std::to_string(I) + ", C=" + std::to_string(C) +
                             "] with the normalized axis " + (I == 1 ? "last" : "strided") + ": " +
                             e.what() + " (oneDNN's cpu isa here: " +
                             cpu::onednn_cpu_isa_name(dnnl::get_effective_cpu_isa()) + ")");
      }
    });
  }

  mutable cpu::OneDnnPrimitiveCache<PrimitiveKey, Primitives> primitives_{kMaxCachedPrimitives};
};

}  // namespace

const Implementation& layer_norm_vjp_onednn_implementation() {
  static const OneDnnLayerNormVjp impl;
  return impl;
}

}  // namespace tokamax
