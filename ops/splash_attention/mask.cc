// splash_attention's masks: canonical forms, .npy masks, and every row's runs of visible keys.
//
// Dimensions: as mask.h (T, t; r a row, j a key).
#include "ops/splash_attention/mask.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <sstream>

#include "ops/framework/errors.h"

namespace tokamax {
namespace {

using nlohmann::json;
using Runs = std::vector<std::pair<int64_t, int64_t>>;

[[noreturn]] void fail(const std::string& field, const std::string& path,
                       const std::string& message) {
  throw InvalidArgument("splash_attention: " + field + path + ": " + message, field);
}

int64_t read_int(const json& v, const std::string& field, const std::string& path, int64_t min) {
  if (!v.is_number_integer() || v.get<int64_t>() < min) {
    fail(field, path, "must be an integer >= " + std::to_string(min) + ", got " + v.dump());
  }
  return v.get<int64_t>();
}

// A .npy file's boolean matrix (dtype |b1 or |u1, C order, shape (T, t)) as rows of bytes.
std::vector<uint8_t> read_npy_mask(const std::string& file, int64_t T, int64_t t,
                                   const std::string& field, const std::string& path) {
  std::ifstream in(file, std::ios::binary);
  if (!in) fail(field, path, "cannot open the .npy file '" + file + "'");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) {
    fail(field, path, "'" + file + "' is not a .npy file");
  }
  const int major = static_cast<unsigned char>(bytes[6]);
  const size_t len_bytes = major == 1 ? 2 : 4;
  size_t header_len = 0;
  for (size_t i = 0; i < len_bytes; ++i) {
    header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
  }
  const size_t data_at = 8 + len_bytes + header_len;
  if (data_at > bytes.size()) fail(field, path, "'" + file + "' has a truncated header");
  const std::string header = bytes.substr(8 + len_bytes, header_len);
  const bool bool_like =
      header.find("'|b1'") != std::string::npos || header.find("'|u1'") != std::string::npos;
  if (!bool_like) fail(field, path, "'" + file + "' must hold dtype bool or uint8: " + header);
  if (header.find("'fortran_order': False") == std::string::npos) {
    fail(field, path, "'" + file + "' must be in C order");
  }
  const std::string shape = "(" + std::to_string(T) + ", " + std::to_string(t) + ")";
  if (header.find("'shape': " + shape) == std::string::npos) {
    fail(field, path, "'" + file + "' must have shape " + shape + " (q and kv lengths): " + header);
  }
  if (bytes.size() - data_at != static_cast<size_t>(T * t)) {
    fail(field, path,
         "'" + file + "' holds " + std::to_string(bytes.size() - data_at) +
             " data bytes, expected " + std::to_string(T * t));
  }
  return std::vector<uint8_t>(bytes.begin() + static_cast<std::ptrdiff_t>(data_at), bytes.end());
}

json canonical(const json& mask, int64_t T, int64_t t, const std::string& field,
               const std::string& path) {
  if (mask.is_null() || (mask.is_string() && mask.get<std::string>() == "full")) {
    return {{"full_mask", json::object()}};
  }
  if (mask.is_string() && mask.get<std::string>() == "causal") {
    return {{"causal_mask", {{"offset", 0}}}};
  }
  if (!mask.is_object() || mask.size() != 1) {
    fail(field, path,
         "must be one mask object (full_mask, causal_mask, local_mask, chunked_causal_mask, "
         "numpy_mask, logical_and, logical_or), got " +
             mask.dump());
  }
  const std::string kind = mask.begin().key();
  const json& body = mask.begin().value();
  const std::string at = path + "." + kind;
  auto check_keys = [&](std::initializer_list<const char*> allowed) {
    if (!body.is_object()) fail(field, at, "must be an object, got " + body.dump());
    for (const auto& item : body.items()) {
      bool known = false;
      for (const char* name : allowed) known = known || item.key() == name;
      if (!known) fail(field, at, "has no field '" + item.key() + "'");
    }
  };
  auto offset = [&]() -> int64_t {
    if (!body.contains("offset") || body.at("offset").is_null()) return 0;
    return read_int(body.at("offset"), field, at + ".offset", std::numeric_limits<int64_t>::min());
  };
  if (kind == "full_mask") {
    check_keys({});
    return {{"full_mask", json::object()}};
  }
  if (kind == "causal_mask") {
    check_keys({"offset"});
    return {{"causal_mask", {{"offset", offset()}}}};
  }
  if (kind == "local_mask") {
    check_keys({"window_size", "offset"});
    const json& w = body.contains("window_size") ? body.at("window_size") : json();
    if (!w.is_array() || w.size() != 2) {
      fail(field, at + ".window_size",
           "must be [left, right] (ints >= 0 or null), got " + w.dump());
    }
    json sides = json::array();
    for (int i = 0; i < 2; ++i) {
      sides.push_back(w[i].is_null() ? json()
                                     : json(read_int(w[i], field, at + ".window_size", 0)));
    }
    return {{"local_mask", {{"window_size", sides}, {"offset", offset()}}}};
  }
  if (kind == "chunked_causal_mask") {
    check_keys({"chunk_size"});
    if (!body.contains("chunk_size")) fail(field, at, "needs chunk_size");
    return {{"chunked_causal_mask",
             {{"chunk_size", read_int(body.at("chunk_size"), field, at + ".chunk_size", 1)}}}};
  }
  if (kind == "numpy_mask") {
    check_keys({"rows", "file"});
    if (body.contains("file") == body.contains("rows")) {
      fail(field, at, "needs exactly one of rows (one '0'/'1' string per row) and file (a .npy)");
    }
    if (body.contains("file")) {
      if (!body.at("file").is_string()) fail(field, at + ".file", "must be a path string");
      read_npy_mask(body.at("file").get<std::string>(), T, t, field, at + ".file");
      return {{"numpy_mask", {{"file", body.at("file")}}}};
    }
    const json& rows = body.at("rows");
    if (!rows.is_array() || static_cast<int64_t>(rows.size()) != T) {
      fail(field, at + ".rows", "must list T = " + std::to_string(T) + " row strings");
    }
    for (size_t r = 0; r < rows.size(); ++r) {
      const std::string where = at + ".rows[" + std::to_string(r) + "]";
      if (!rows[r].is_string()) fail(field, where, "must be a string of '0' and '1'");
      const std::string row = rows[r].get<std::string>();
      if (static_cast<int64_t>(row.size()) != t ||
          row.find_first_not_of("01") != std::string::npos) {
        fail(field, where,
             "must be t = " + std::to_string(t) + " characters '0' or '1', got '" + row + "'");
      }
    }
    return {{"numpy_mask", {{"rows", rows}}}};
  }
  if (kind == "logical_and" || kind == "logical_or") {
    if (!body.is_array() || body.size() < 2) {
      fail(field, at, "must list two or more masks, got " + body.dump());
    }
    json parts = json::array();
    for (size_t i = 0; i < body.size(); ++i) {
      parts.push_back(canonical(body[i], T, t, field, at + "[" + std::to_string(i) + "]"));
    }
    return {{kind, parts}};
  }
  fail(field, path, "unknown mask class '" + kind + "'");
}

// The runs of keys j < t for which visible(j) holds.
template <typename Visible>
Runs runs_where(int64_t t, Visible&& visible) {
  Runs out;
  for (int64_t j = 0; j < t;) {
    if (!visible(j)) {
      ++j;
      continue;
    }
    const int64_t lo = j;
    while (j < t && visible(j)) ++j;
    out.emplace_back(lo, j);
  }
  return out;
}

Runs intersect(const Runs& a, const Runs& b) {
  Runs out;
  for (size_t i = 0, k = 0; i < a.size() && k < b.size();) {
    const int64_t lo = std::max(a[i].first, b[k].first), hi = std::min(a[i].second, b[k].second);
    if (lo < hi) out.emplace_back(lo, hi);
    (a[i].second < b[k].second) ? ++i : ++k;
  }
  return out;
}

Runs unite(const Runs& a, const Runs& b) {
  Runs all(a);
  all.insert(all.end(), b.begin(), b.end());
  std::sort(all.begin(), all.end());
  Runs out;
  for (const auto& run : all) {
    if (!out.empty() && run.first <= out.back().second) {
      out.back().second = std::max(out.back().second, run.second);
    } else {
      out.push_back(run);
    }
  }
  return out;
}

// One node of the mask's tree, ready to give any row's runs.
struct Node {
  std::string kind;
  int64_t offset = 0, left = -1, right = -1, chunk = 1;
  std::vector<Runs> rows;  // numpy_mask
  std::vector<Node> parts;

  Node(const json& mask, int64_t T, int64_t t) {
    kind = mask.begin().key();
    const json& body = mask.begin().value();
    if (kind == "logical_and" || kind == "logical_or") {
      for (const json& part : body) parts.emplace_back(part, T, t);
      return;
    }
    if (body.contains("offset")) offset = body.at("offset").get<int64_t>();
    if (kind == "local_mask") {
      const json& w = body.at("window_size");
      if (!w[0].is_null()) left = w[0].get<int64_t>();
      if (!w[1].is_null()) right = w[1].get<int64_t>();
    }
    if (kind == "chunked_causal_mask") chunk = body.at("chunk_size").get<int64_t>();
    if (kind == "numpy_mask" && body.contains("rows")) {
      for (const json& row : body.at("rows")) {
        const std::string text = row.get<std::string>();
        rows.push_back(runs_where(t, [&](int64_t j) { return text[j] == '1'; }));
      }
    } else if (kind == "numpy_mask") {
      const std::vector<uint8_t> bytes =
          read_npy_mask(body.at("file").get<std::string>(), T, t, "mask", "");
      for (int64_t r = 0; r < T; ++r) {
        rows.push_back(runs_where(t, [&](int64_t j) { return bytes[r * t + j] != 0; }));
      }
    }
  }

  Runs runs(int64_t r, int64_t t) const {
    auto interval = [&](int64_t lo, int64_t hi) {
      lo = std::max<int64_t>(lo, 0);
      hi = std::min(hi, t);
      return lo < hi ? Runs{{lo, hi}} : Runs{};
    };
    if (kind == "full_mask") return interval(0, t);
    if (kind == "causal_mask") return interval(0, r + offset + 1);
    if (kind == "local_mask") {
      return interval(left < 0 ? 0 : r + offset - left, right < 0 ? t : r + offset + right + 1);
    }
    if (kind == "chunked_causal_mask") return interval(r / chunk * chunk, r + 1);
    if (kind == "numpy_mask") return rows[r];
    Runs out = parts[0].runs(r, t);
    for (size_t i = 1; i < parts.size(); ++i) {
      out = kind == "logical_and" ? intersect(out, parts[i].runs(r, t))
                                  : unite(out, parts[i].runs(r, t));
    }
    return out;
  }
};

}  // namespace

json canonical_splash_mask(const json& mask, int64_t T, int64_t t, const std::string& field) {
  return canonical(mask, T, t, field, "");
}

SplashMask::SplashMask(const json& mask, int64_t T, int64_t t, const int32_t* q_segment_ids,
                       const int32_t* kv_segment_ids)
    : T_(T) {
  const Node root(mask, T, t);
  // Each segment id's runs of keys, for the rows of that segment.
  std::map<int32_t, Runs> segment_runs;
  if (q_segment_ids) {
    for (int64_t j = 0; j < t; ++j) {
      Runs& runs = segment_runs[kv_segment_ids[j]];
      if (!runs.empty() && runs.back().second == j) {
        runs.back().second = j + 1;
      } else {
        runs.emplace_back(j, j + 1);
      }
    }
  }
  start_.assign(static_cast<size_t>(T + 1), 0);
  for (int64_t r = 0; r < T; ++r) {
    Runs row = root.runs(r, t);
    if (q_segment_ids) {
      const auto it = segment_runs.find(q_segment_ids[r]);
      row = it == segment_runs.end() ? Runs{} : intersect(row, it->second);
    }
    runs_.insert(runs_.end(), row.begin(), row.end());
    start_[r + 1] = static_cast<int64_t>(runs_.size());
  }
}

bool SplashMask::visible(int64_t r, int64_t j) const {
  for (const auto& [lo, hi] : runs(r)) {
    if (j < lo) return false;
    if (j < hi) return true;
  }
  return false;
}

int64_t SplashMask::count(int64_t r) const {
  int64_t n = 0;
  for (const auto& [lo, hi] : runs(r)) n += hi - lo;
  return n;
}

SplashMask SplashMask::of(const nlohmann::json& canonical, int64_t T, int64_t t,
                          const TensorMap& inputs) {
  const auto q = inputs.find("q_segment_ids"), kv = inputs.find("kv_segment_ids");
  const bool segments = q != inputs.end() && kv != inputs.end();
  return SplashMask(canonical, T, t, segments ? q->second.data<int32_t>() : nullptr,
                    segments ? kv->second.data<int32_t>() : nullptr);
}

std::pair<int64_t, int64_t> SplashMask::key_range(int64_t r) const {
  const auto row = runs(r);
  if (row.empty()) return {0, 0};
  return {row.front().first, row.back().second};
}

KeyBlock SplashMask::block(int64_t r0, int64_t rows, int64_t j0, int64_t n) const {
  bool any = false, scattered = false;
  for (int64_t r = r0; r < r0 + rows; ++r) {
    const auto row = runs(r);
    if (row.empty()) continue;
    // The row's hull clipped to the block, and how much of it its runs cover.
    const int64_t lo = std::max(j0, row.front().first);
    const int64_t hi = std::min(j0 + n, row.back().second);
    if (lo >= hi) continue;
    int64_t covered = 0;
    auto it = std::upper_bound(row.begin(), row.end(), lo,
                               [](int64_t x, const auto& run) { return x < run.second; });
    for (; it != row.end() && it->first < hi; ++it) {
      covered += std::min(hi, it->second) - std::max(lo, it->first);
    }
    any = any || covered > 0;
    scattered = scattered || covered != hi - lo;
  }
  return !any ? KeyBlock::kEmpty : scattered ? KeyBlock::kScattered : KeyBlock::kInterval;
}

void SplashMask::mask_row(int64_t r, int64_t j0, int64_t c_lo, int64_t c_hi, float* s) const {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  int64_t next = j0 + c_lo;  // the first key not yet decided
  const int64_t end = j0 + c_hi;
  for (const auto& [lo, hi] : runs(r)) {
    if (hi <= next) continue;
    if (lo >= end) break;
    for (int64_t j = next; j < std::min(lo, end); ++j) s[j - j0] = kNegInf;
    next = std::max(next, hi);
    if (next >= end) return;
  }
  for (int64_t j = next; j < end; ++j) s[j - j0] = kNegInf;
}

}  // namespace tokamax
