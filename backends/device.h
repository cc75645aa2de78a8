// Device description: what a config is tuned for, with a stable, filesystem-safe id.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tokamax {

struct DeviceInfo {
  std::string kind;              // "cpu" (later "cuda")
  std::string vendor;            // "GenuineIntel", "AuthenticAMD", ...
  std::string model;             // marketing name as reported by the OS
  std::string arch;              // "x86_64", "aarch64"
  std::vector<std::string> isa;  // "avx2", "fma", "f16c", "avx512f", "avx512_bf16", "neon", ...
  int cores = 1;                 // usable hardware threads (affinity mask)
  int64_t l1d_bytes = 0;         // per core
  int64_t l2_bytes = 0;          // per core
  int64_t l3_bytes = 0;          // total
  int simd_bytes = 16;           // widest vector register the ISA offers
  // Stable id: lowercase [a-z0-9_-], from vendor, family/model, widest ISA and core count; used as
  // the folder name of the shipped cache (results/autotuning/<id>/).
  std::string id;

  bool has(const std::string& feature) const;
  std::string description() const;  // one line for tables and records
  nlohmann::json to_json() const;
};

// Keeps [a-z0-9_-]; other characters become '-', runs collapse, ends are trimmed.
std::string sanitize_id(const std::string& text);

}  // namespace tokamax
