// Tensor spec parsing/formatting and aligned host tensors.
#include "ops/framework/tensor.h"

#include <cctype>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <new>

#include "backends/cpu/host_memory.h"
#include "ops/framework/errors.h"

namespace tokamax {

int64_t TensorSpec::num_elements() const {
  int64_t count = 1;
  for (int64_t d : dims) count *= d;
  return count;
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
  std::string quoted(1, '\'');
  quoted.append(text).push_back('\'');
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
      throw InvalidArgument("malformed dimension '" + std::string(item) + "' in tensor spec " +
                            quoted + " (expected a non-negative integer)");
    }
    if (extent < 0) {
      throw InvalidArgument("negative dimension " + std::to_string(extent) + " in tensor spec " +
                            quoted);
    }
    spec.dims.push_back(extent);
    if (comma == std::string_view::npos) break;
    dims = dims.substr(comma + 1);
  }
  return spec;
}

void HostTensor::FreeDeleter::operator()(void* p) const { cpu::free_host(p); }

HostTensor::HostTensor(TensorSpec spec) : spec_(std::move(spec)) {
  // A cache line of slack past the end (kernels may load a whole vector there); large tensors on
  // huge pages (backends/cpu/host_memory.h).
  const size_t bytes = spec_.size_bytes() + cpu::kHostAlignment;
  void* memory = cpu::allocate_host(bytes);
  std::memset(memory, 0, bytes);
  data_ = std::shared_ptr<void>(memory, FreeDeleter{});
}

void HostTensor::check_type(DType requested) const {
  if (requested != spec_.dtype) {
    throw InvalidArgument("tensor " + spec_.to_string() + " accessed as " +
                          std::string(dtype_name(requested)));
  }
}

double HostTensor::get(int64_t i) const {
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
  }
  return 0.0;
}

void HostTensor::set(int64_t i, double value) {
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
  }
}

void HostTensor::fill_zero() {
  if (data_) std::memset(raw(), 0, spec_.size_bytes());
}

}  // namespace tokamax
