// Device description helpers: feature lookup, one-line description, JSON, id sanitizing.
#include "backends/device.h"

#include <algorithm>
#include <cctype>

namespace tokamax {

bool DeviceInfo::has(const std::string& feature) const {
  return std::find(isa.begin(), isa.end(), feature) != isa.end();
}

std::string DeviceInfo::description() const {
  std::string text = model.empty() ? vendor : model;
  text += " (" + arch + ", " + std::to_string(cores) + " cores";
  if (!isa.empty()) {
    text += ", ";
    for (size_t i = 0; i < isa.size(); ++i) text += (i ? " " : "") + isa[i];
  }
  return text + ")";
}

nlohmann::json DeviceInfo::to_json() const {
  return {{"id", id},
          {"kind", kind},
          {"vendor", vendor},
          {"model", model},
          {"arch", arch},
          {"isa", isa},
          {"cores", cores},
          {"l1d_bytes", l1d_bytes},
          {"l2_bytes", l2_bytes},
          {"l3_bytes", l3_bytes},
          {"simd_bytes", simd_bytes}};
}

std::string sanitize_id(const std::string& text) {
  std::string id;
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '_') {
      id += static_cast<char>(std::tolower(u));
    } else if (!id.empty() && id.back() != '-') {
      id += '-';
    }
  }
  while (!id.empty() && id.back() == '-') id.pop_back();
  return id;
}

}  // namespace tokamax
