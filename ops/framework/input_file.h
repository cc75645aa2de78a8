// Reading a file someone else wrote (a catalog, a cache, a record, a bench run): one place that
// refuses what is not a readable regular file of a sane size, before any of it is parsed.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>

namespace tokamax {

// The largest input files each loader reads. A parser needs several times a file's size in
// memory; past these, a file is refused unread (the message says the size and the limit).
inline constexpr uint64_t kMaxCatalogBytes = 16ull << 20;  // YAML catalogs
inline constexpr uint64_t kMaxJsonInputBytes = 256ull << 20;  // caches, records, bench runs

// The whole file. Throws InputError naming the file (and what it is: missing, a directory, a
// device, larger than `max_bytes`, unreadable). `what` names the kind of file in the message
// ("catalog", "autotuning cache").
std::string read_input_file(const std::string& path, uint64_t max_bytes, const std::string& what);

// The deepest nesting of arrays and objects a JSON input may have. The code that reads a
// document walks it recursively (dump, compare, copy); our own files nest 6 levels at most.
inline constexpr int kMaxJsonDepth = 64;

// 1-based line and column (in UTF-8 code points) of a byte offset of `text`.
std::pair<int, int> text_position(std::string_view text, size_t offset);

// Refuses JSON text nested deeper than kMaxJsonDepth, before it is parsed: InputError at the
// line and column of the first bracket past the limit. `first_line` numbers the text's first
// line (a line of a JSON-lines file).
void check_json_depth(std::string_view text, const std::string& source, int first_line = 1);

// check_json_depth, then the parse: a syntax error is an InputError at its line and column,
// with nlohmann's reason ("syntax error while parsing value - invalid literal; last read: 'x'").
nlohmann::json parse_json_input(std::string_view text, const std::string& source,
                                int first_line = 1);

}  // namespace tokamax
