// Tensor spec parsing/formatting and tensors in host or device memory.
#include "ops/framework/tensor.h"

#include <cctype>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <new>

#include "ops/framework/checked_math.h"
#include "ops/framework/errors.h"

namespace tokamax {

int64_t TensorSpec::num_elements() const {
  int64_t count = 1;
  for (int64_t d : dims) count *= d;
  return count;
}

int64_t TensorSpec::checked_size_bytes() const {
  const std::string what = "the size of " + to_string();
  int64_t count = 1;
  for (int64_t d : dims) count = checked_mul(count, d, what);
  const int64_t bytes = checked_mul(count, static_cast<int64_t>(dtype_size(dtype)), what);
  if (bytes > kMaxTensorBytes) {
    throw InvalidArgument(what + " is " + std::to_string(bytes) + " bytes, more than the 2^62 a " +
                          "tensor may have");
  }
  return bytes;
}

std::string TensorSpec::to_string() const {
  std::string text(dtype_name(dtype));
  text += "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) text += ",";
    text += std::to_string(dims[i]);
  }
  return text + "]";
}

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

TensorSpec parse_tensor_spec(std::string_view text) {
  // Quoted in messages, cut short: a spec may come from a hostile file.
  constexpr size_t kQuoted = 80;
  std::string quoted(1, '\'');
  quoted.append(text.substr(0, kQuoted)).append(text.size() > kQuoted ? "...'" : "'");
  const std::string_view body = trim(text);
  const size_t open = body.find('[');
  if (open == std::string_view::npos || body.back() != ']') {
    throw InvalidArgument("malformed tensor spec " + quoted + " (expected dtype[d0,d1,...])");
  }
  TensorSpec spec;
  spec.dtype = parse_dtype(trim(body.substr(0, open)));
  std::string_view dims = trim(body.substr(open + 1, body.size() - open - 2));
  if (dims.empty()) return spec;  // scalar
  while (true) {
    const size_t comma = dims.find(',');
    const std::string_view item = trim(dims.substr(0, comma));
    int64_t extent = -1;
    const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), extent);
    if (item.empty() || error != std::errc() || end != item.data() + item.size()) {
      throw InvalidArgument("malformed dimension '" + std::string(item.substr(0, 40)) +
                            "' in tensor spec " + quoted + " (expected a non-negative integer)");
    }
    if (extent < 0) {
      throw InvalidArgument("negative dimension " + std::to_string(extent) + " in tensor spec " +
                            quoted);
    }
    spec.dims.push_back(extent);
    if (spec.dims.size() > kMaxRank) {
      throw InvalidArgument("tensor spec " + quoted + " has more than " + std::to_string(kMaxRank) +
                            " dimensions");
    }
    if (comma == std::string_view::npos) break;
    dims = dims.substr(comma + 1);
  }
  (void)spec.checked_size_bytes();
  return spec;
}

// A cache line of slack past the end: CPU kernels may load a whole vector there. Large host
// tensors land on huge pages (backends/cpu/host_memory.h).
constexpr size_t kSlackBytes = 64;

Tensor::Tensor(TensorSpec spec, const Memory& memory)
    : spec_(std::move(spec)), memory_(&memory), host_(memory.host_accessible()) {
  const size_t bytes = spec_.size_bytes() + kSlackBytes;
  void* data = memory.allocate(bytes);
  memory.zero(data, bytes);
  data_ = std::shared_ptr<void>(data, [memory = &memory](void* p) { memory->free(p); });
}

void Tensor::check_type(DType requested) const {
  check_host("typed access");
  if (requested != spec_.dtype) {
    throw InvalidArgument("tensor " + spec_.to_string() + " accessed as " +
                          std::string(dtype_name(requested)));
  }
}

void Tensor::check_host(const char* what) const {
  if (!host_) {
    throw InvalidArgument(std::string(what) + " of tensor " + spec_.to_string() + " in " +
                          std::string(memory_->name()) + " memory, which the host cannot read");
  }
}

Tensor Tensor::view(TensorSpec spec, size_t offset) const {
  if (offset > size_bytes() || spec.size_bytes() > size_bytes() - offset) {
    throw InvalidArgument("a view " + spec.to_string() + " at byte " + std::to_string(offset) +
                          " does not fit in tensor " + spec_.to_string());
  }
  Tensor out;
  out.spec_ = std::move(spec);
  out.memory_ = memory_;
  out.host_ = host_;
  out.data_ = std::shared_ptr<void>(data_, static_cast<char*>(data_.get()) + offset);
  return out;
}

Tensor Tensor::copy(const Memory& memory) const {
  Tensor out(spec_, memory);
  const size_t bytes = size_bytes();
  if (host_) {
    memory.copy_from_host(out.raw(), raw(), bytes);
  } else if (memory.host_accessible()) {
    memory_->copy_to_host(out.raw(), raw(), bytes);
  } else {
    // Between two device memories: through the host.
    const Tensor host = copy(host_memory());
    memory.copy_from_host(out.raw(), host.raw(), bytes);
  }
  return out;
}

Tensor Tensor::to(const Memory& memory) const { return &memory == memory_ ? *this : copy(memory); }

const Tensor* find_tensor(const TensorMap& tensors, std::string_view name) {
  auto it = tensors.find(name);
  return it == tensors.end() ? nullptr : &it->second;
}

TensorMap to_memory(const TensorMap& tensors, const Memory& memory) {
  TensorMap out;
  for (const auto& [name, tensor] : tensors) out.emplace(name, tensor.to(memory));
  return out;
}

double Tensor::get(int64_t i) const {
  check_host("get");
  switch (spec_.dtype) {
    case DType::kF64:
      return static_cast<const double*>(raw())[i];
    case DType::kF32:
      return static_cast<const float*>(raw())[i];
    case DType::kBF16:
      return bf16_to_float(static_cast<const bf16*>(raw())[i]);
    case DType::kF16:
      return f16_to_float(static_cast<const f16*>(raw())[i]);
    case DType::kI32:
      return static_cast<const int32_t*>(raw())[i];
    case DType::kBool:
      return static_cast<const uint8_t*>(raw())[i] != 0 ? 1.0 : 0.0;
    case DType::kI8:
      return static_cast<const int8_t*>(raw())[i];
    case DType::kF8E4M3:
      return f8e4m3_to_float(static_cast<const f8e4m3*>(raw())[i]);
  }
  return 0.0;
}

void Tensor::set(int64_t i, double value) {
  check_host("set");
  switch (spec_.dtype) {
    case DType::kF64:
      static_cast<double*>(raw())[i] = value;
      break;
    case DType::kF32:
      static_cast<float*>(raw())[i] = static_cast<float>(value);
      break;
    case DType::kBF16:
      static_cast<bf16*>(raw())[i] = double_to_bf16(value);
      break;
    case DType::kF16:
      static_cast<f16*>(raw())[i] = double_to_f16(value);
      break;
    case DType::kI32:
      static_cast<int32_t*>(raw())[i] = static_cast<int32_t>(value);
      break;
    case DType::kBool:
      static_cast<uint8_t*>(raw())[i] = value != 0.0 ? 1 : 0;
      break;
    case DType::kI8:
      static_cast<int8_t*>(raw())[i] = double_to_i8(value);
      break;
    case DType::kF8E4M3:
      static_cast<f8e4m3*>(raw())[i] = double_to_f8e4m3(value);
      break;
  }
}

void Tensor::fill_zero() {
  if (data_) memory_->zero(raw(), spec_.size_bytes());
}

}  // namespace tokamax
