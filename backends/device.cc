// DeviceInfo's JSON form and id sanitizing.
#include "backends/device.h"

#include <cctype>

namespace tokamax {

nlohmann::json DeviceInfo::to_json() const {
  nlohmann::json out = properties;
  out["id"] = id;
  out["kind"] = kind;
  out["vendor"] = vendor;
  out["model"] = model;
  out["arch"] = arch;
  return out;
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
