// NumPy .npy (format 1.0) writer.
#include "cli/toolkit/harness/npy.h"

#include <fstream>
#include <stdexcept>

namespace tokamax {

void write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
               const void* data, size_t bytes) {
  // NumPy's tuple syntax: "()", "(5,)", "(2, 3)".
  std::string shape_text = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    shape_text += (i ? ", " : "") + std::to_string(shape[i]);
  }
  shape_text += shape.size() == 1 ? ",)" : ")";
  std::string header =
      "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape_text + ", }";
  // Magic (6) + version (2) + header length (2) + header + '\n' is padded to a multiple of 64.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary);
  if (!out) throw std::runtime_error("cannot write " + path);
  out.write("\x93NUMPY\x01\x00", 8);
  const uint16_t length = static_cast<uint16_t>(header.size());
  const char length_bytes[2] = {static_cast<char>(length & 0xFF), static_cast<char>(length >> 8)};
  out.write(length_bytes, 2);
  out << header;
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  if (!out) throw std::runtime_error("cannot write " + path);
}

void write_npy(const std::string& path, const Tensor& tensor) {
  switch (tensor.dtype()) {
    case DType::kF64:
      return write_npy(path, "<f8", tensor.dims(), tensor.raw(), tensor.size_bytes());
    case DType::kF32:
      return write_npy(path, "<f4", tensor.dims(), tensor.raw(), tensor.size_bytes());
    case DType::kF16:
      return write_npy(path, "<f2", tensor.dims(), tensor.raw(), tensor.size_bytes());
    case DType::kI32:
      return write_npy(path, "<i4", tensor.dims(), tensor.raw(), tensor.size_bytes());
    case DType::kBool:
      return write_npy(path, "|b1", tensor.dims(), tensor.raw(), tensor.size_bytes());
    case DType::kI8:
      return write_npy(path, "|i1", tensor.dims(), tensor.raw(), tensor.size_bytes());
    case DType::kF8E4M3:  // NumPy has no float8: exact float32, as bf16
    case DType::kBF16: {
      std::vector<float> widened(static_cast<size_t>(tensor.num_elements()));
      for (int64_t i = 0; i < tensor.num_elements(); ++i)
        widened[i] = static_cast<float>(tensor.get(i));
      return write_npy(path, "<f4", tensor.dims(), widened.data(), widened.size() * sizeof(float));
    }
  }
}

}  // namespace tokamax
