// Files embedded in the binary at build time: the ArgSpec catalogs and the shipped caches.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tokamax {

struct EmbeddedFile {
  std::string_view path;  // relative to the source root, e.g. "specs/ragged_dot.yaml"
  std::string_view content;
};

// Embedded files whose path starts with `prefix`, sorted by path.
std::vector<EmbeddedFile> embedded_files(std::string_view prefix);

}  // namespace tokamax
