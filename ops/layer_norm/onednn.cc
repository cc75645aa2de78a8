// layer_norm: the oneDNN baseline ("onednn"), a cached layer_normalization forward-inference
// primitive per shape.
//
// Dimensions.
//   C      the normalized extent (x's extent along axis)
//   O      product of x's extents before the axis
//   I      product of x's extents after the axis (contiguous); I = 1 for the last axis
//
// oneDNN 2.6 normalizes over the last logical dimension of a 2D..5D tensor, src and dst share
// one memory descriptor (so one dtype: f32 or bf16 on CPU), and scale and shift are f32 [C]
// (use_scale / use_shift). The last axis is the plain 2D tensor [O, C]. Another axis is the
// strided 3D view [O, I, C] with strides (C*I, 1, I): logically the last dimension, physically
// the middle one; oneDNN accepts it when some implementation handles that layout (its reference
// kernel does; the JIT ones want C dense) and NotImplemented says why when none does. There is no
// RMSNorm flag before oneDNN 3.x, so subtract_mean=false is NotImplemented. Threads are oneDNN's
// (OpenMP), so the config is empty.
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "backends/cpu/onednn_engine.h"
#include "ops/common/onednn_primitive.h"
#include "ops/framework/errors.h"
#include "ops/framework/op.h"
#include "ops/layer_norm/base.h"
#include "ops/layer_norm/onednn_common.h"

namespace tokamax {
namespace {

using dt = dnnl::memory::data_type;
using flags = dnnl::normalization_flags;

// O, I, C, data type, epsilon, use_scale, use_shift.
using PrimitiveKey = std::tuple<int64_t, int64_t, int64_t, dt, float, bool, bool>;
constexpr size_t kMaxCachedPrimitives = 1024;

std::vector<float> param_f32(const TensorMap& inputs, const char* name, int64_t C) {
  std::vector<float> values;
  auto it = inputs.find(name);
  if (it == inputs.end()) return values;
  values.resize(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) values[c] = static_cast<float>(it->second.get(c));
  return values;
}

class OneDnnLayerNorm final : public OneDnnImplementation<LayerNormProblem> {
 public:
  void check(const LayerNormProblem& p, const Device&) const override {
    check_layer_norm_onednn_args(p);
    if (p.num_elements() == 0) return;
    // Creating the descriptor is what tells whether some oneDNN kernel takes this layout and
    // dtype on this CPU (bf16 needs avx512_core, a strided axis the reference kernel).
    primitive(key(p));
  }

  void run(const LayerNormProblem& p, const EmptyConfig&, const Device& device,
           const TensorMap& inputs, TensorMap& outputs) const override {
    check(p, device);
    if (p.num_elements() == 0) return;
    const PrimitiveKey k = key(p);
    const dnnl::layer_normalization_forward lnorm = primitive(k);
    const dnnl::engine& engine = cpu::onednn_engine();
    const dt type = std::get<3>(k);
    // dnnl::memory wants non-const handles; the primitive only reads src, scale and shift.
    void* x_data = const_cast<void*>(inputs.at("x").raw());
    dnnl::memory src(layer_norm_onednn_data_desc(p.O, p.I, p.C, type), engine, x_data);
    dnnl::memory dst(layer_norm_onednn_data_desc(p.O, p.I, p.C, type), engine,
                     outputs.at("out").raw());
    std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}};
    // Parameters in f32 (exact for f32/bf16/f16 ones); C values, negligible next to x.
    std::vector<float> scale = param_f32(inputs, "scale", p.C);
    for (float& s : scale) s = static_cast<float>(static_cast<double>(s) + p.scale_offset);
    std::vector<float> shift = param_f32(inputs, "offset", p.C);
    const dnnl::memory::desc param_desc({p.C}, dt::f32, dnnl::memory::format_tag::a);
    if (p.has_scale) args.emplace(DNNL_ARG_SCALE, dnnl::memory(param_desc, engine, scale.data()));
    if (p.has_offset) args.emplace(DNNL_ARG_SHIFT, dnnl::memory(param_desc, engine, shift.data()));
    dnnl::stream stream(engine);
    lnorm.execute(stream, args);
    stream.wait();
  }

 private:
  static PrimitiveKey key(const LayerNormProblem& p) {
    return {p.O,
            p.I,
            p.C,
            p.x_dtype == DType::kBF16 ? dt::bf16 : dt::f32,
            static_cast<float>(p.epsilon),
            p.has_scale,
            p.has_offset};
  }

  // The primitive of one shape, created on first use.
  dnnl::layer_normalization_forward primitive(const PrimitiveKey& key) const {
    return primitives_.get(key, [&] {
      const auto& [O, I, C, type, eps, use_scale, use_shift] = key;
      flags f = flags::none;
      if (use_scale) f |= flags::use_scale;
      if (use_shift) f |= flags::use_shift;
      try {
        const dnnl::layer_normalization_forward::desc desc(
            dnnl::prop_kind::forward_inference, layer_norm_onednn_data_desc(O, I, C, type), eps, f);
        return dnnl::layer_normalization_forward(
            dnnl::layer_normalization_forward::primitive_desc(desc, cpu::onednn_engine()));
      } catch (const dnnl::error& e) {
        throw NotImplemented(std::string("onednn: no layer_normalization for ") +
                             (type == dt::bf16 ? "bf16" : "f32") + " [O=" + std::to_string(O) +
                             ", I=" + std::to_string(I) + ", C=" + std::to_string(C) +
                             "] with the normalized axis " + (I == 1 ? "last" : "strided") + ": " +
                             e.what() + " (oneDNN's cpu isa here: " +
                             cpu::onednn_cpu_isa_name(dnnl::get_effective_cpu_isa()) + ")");
      }
    });
  }

  mutable cpu::OneDnnPrimitiveCache<PrimitiveKey, dnnl::layer_normalization_forward> primitives_{
      kMaxCachedPrimitives};
};

}  // namespace

const Implementation& layer_norm_onednn_implementation() {
  static const OneDnnLayerNorm impl;
  return impl;
}

}  // namespace tokamax
