// Cases for `tokamax tune --from FILE`: recorded calls (TOKAMAX_RECORD JSON lines) or a previous
// `verify --json` / `bench --json` document, deduplicated by (op, canonical args).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "cli/toolkit/catalog/arg_spec.h"

namespace tokamax {

// Accepted inputs:
//   - JSON lines, one object per line with "op" and "args" (what TOKAMAX_RECORD writes; blank
//     lines are skipped);
//   - a `verify --json` document: cases[].op / cases[].args (and cases[].spec as the name);
//   - a `bench --json` document: tokamax.cases[].op / .args (and .spec).
// Args are bound again by their op, so the cases are validated and canonical. Each case is named
// after its spec when the file has one, otherwise after its tensors plus a short hash of its key
// ("f32[64,32] f32[4,32,48] #1a2b3c"), which is the same on every machine.
// Throws InputError naming the file and line (or the JSON path) of the first bad entry; a file
// without a single case is an error too.
std::vector<ArgSpec> parse_tune_source(std::string_view text, const std::string& source_name);
// Reads the files in order and keeps the first case of each (op, args key).
std::vector<ArgSpec> load_tune_sources(const std::vector<std::string>& paths);
// Keeps the first case of each (op, args key), in order.
std::vector<ArgSpec> dedup_cases(const std::vector<ArgSpec>& cases);

}  // namespace tokamax
