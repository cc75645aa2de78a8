// Tensor specs ("bf16[4096,7168]") and owning tensors in host or device memory.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backends/memory.h"
#include "ops/framework/dtype.h"

namespace tokamax {

// The most dimensions a tensor spec may have (ops use at most 4-5).
inline constexpr size_t kMaxRank = 16;

struct TensorSpec {
  DType dtype = DType::kF32;
  std::vector<int64_t> dims;

  int64_t num_elements() const;
  // The byte count, checked: InvalidArgument when it overflows or passes kMaxTensorBytes
  // (ops/framework/checked_math.h). Op::bind checks every tensor with it.
  int64_t checked_size_bytes() const;
  size_t size_bytes() const { return static_cast<size_t>(num_elements()) * dtype_size(dtype); }
  int rank() const { return static_cast<int>(dims.size()); }
  // "bf16[4096,7168]"; a scalar is "f32[]".
  std::string to_string() const;
  bool operator==(const TensorSpec&) const = default;
};

// Parses "dtype[d0,d1,...]" (spaces allowed around numbers). Throws InvalidArgument on a bad
// dtype, a missing bracket, a non-integer or negative extent.
TensorSpec parse_tensor_spec(std::string_view text);

// A dense row-major tensor in some memory (backends/memory.h): host memory unless a device's
// memory is given. Copies share the buffer. Element access (data, get, set) needs memory the host
// can read; raw() is the address in the tensor's own memory space (a device pointer there).
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(TensorSpec spec, const Memory& memory = host_memory());  // zero-filled

  const TensorSpec& spec() const { return spec_; }
  DType dtype() const { return spec_.dtype; }
  const std::vector<int64_t>& dims() const { return spec_.dims; }
  int64_t num_elements() const { return spec_.num_elements(); }
  size_t size_bytes() const { return spec_.size_bytes(); }
  const Memory& memory() const { return *memory_; }

  void* raw() { return data_.get(); }
  const void* raw() const { return data_.get(); }
  // Typed access; throws InvalidArgument if T does not match the dtype or the memory is not the
  // host's.
  template <typename T>
  T* data() {
    check_type(DTypeOf<T>::value);
    return static_cast<T*>(raw());
  }
  template <typename T>
  const T* data() const {
    check_type(DTypeOf<T>::value);
    return static_cast<const T*>(raw());
  }
  // Element i converted to double (any dtype).
  double get(int64_t i) const;
  // Element i set from double with the dtype's rounding.
  void set(int64_t i, double value);
  void fill_zero();
  // A tensor of `spec` over this one's buffer from byte `offset` (no copy: it shares, and keeps
  // alive, the buffer; a kernel's view of one part of an operand). Throws InvalidArgument when
  // it does not fit inside this tensor.
  Tensor view(TensorSpec spec, size_t offset) const;
  // A copy in `memory`: a new buffer, even in the same memory.
  Tensor copy(const Memory& memory) const;
  // This tensor in `memory`: itself when it is already there, else copy(memory).
  Tensor to(const Memory& memory) const;

 private:
  void check_type(DType requested) const;
  void check_host(const char* what) const;
  TensorSpec spec_;
  const Memory* memory_ = &host_memory();
  bool host_ = true;  // memory_->host_accessible(), read once: get() and set() check it per element
  std::shared_ptr<void> data_;
};

// Named tensors: inputs or outputs of one op call.
using TensorMap = std::map<std::string, Tensor, std::less<>>;

// The tensor named `name`, or nullptr when the map has none (an optional input left out).
const Tensor* find_tensor(const TensorMap& tensors, std::string_view name);

// Every tensor of `tensors` in `memory` (Tensor::to).
TensorMap to_memory(const TensorMap& tensors, const Memory& memory);

}  // namespace tokamax
