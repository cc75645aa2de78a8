// Tensor specs ("bf16[4096,7168]") and owning host tensors.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ops/framework/dtype.h"

namespace tokamax {

struct TensorSpec {
  DType dtype = DType::kF32;
  std::vector<int64_t> dims;

  int64_t num_elements() const;
  size_t size_bytes() const { return static_cast<size_t>(num_elements()) * dtype_size(dtype); }
  int rank() const { return static_cast<int>(dims.size()); }
  // "bf16[4096,7168]"; a scalar is "f32[]".
  std::string to_string() const;
  bool operator==(const TensorSpec&) const = default;
};

// Parses "dtype[d0,d1,...]" (spaces allowed around numbers). Throws InvalidArgument on a bad
// dtype, a missing bracket, a non-integer or negative extent.
TensorSpec parse_tensor_spec(std::string_view text);

// A dense row-major tensor in host memory, 64-byte aligned so SIMD kernels can use aligned loads.
class HostTensor {
 public:
  HostTensor() = default;
  explicit HostTensor(TensorSpec spec);  // zero-filled

  const TensorSpec& spec() const { return spec_; }
  DType dtype() const { return spec_.dtype; }
  const std::vector<int64_t>& dims() const { return spec_.dims; }
  int64_t num_elements() const { return spec_.num_elements(); }
  size_t size_bytes() const { return spec_.size_bytes(); }

  void* raw() { return data_.get(); }
  const void* raw() const { return data_.get(); }
  // Typed access; throws InvalidArgument if T does not match the dtype.
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

 private:
  struct FreeDeleter {
    void operator()(void* p) const;
  };
  void check_type(DType requested) const;
  TensorSpec spec_;
  std::shared_ptr<void> data_;
};

// Named tensors: inputs or outputs of one op call.
using TensorMap = std::map<std::string, HostTensor, std::less<>>;

}  // namespace tokamax
