// Recording of high-level API calls: with TOKAMAX_RECORD=FILE, one JSON line per dispatch.
//
// Each line: {"op", "args" (canonical BoundArgs args), "key" (BoundArgs::key()),
// "implementation" (the one that ran), "config_source", "config", "timestamp", "device_id"}.
// `tokamax tune --from FILE` reads these files back (cli/tune_sources.h).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "ops/framework/bound_args.h"
#include "ops/framework/config_resolution.h"

namespace tokamax {

// The environment variable naming the record file.
inline constexpr const char* kRecordEnv = "TOKAMAX_RECORD";

// The JSON object recorded for one call.
nlohmann::json call_record(const BoundArgs& args, std::string_view implementation,
                           const ResolvedConfig& config, const std::string& device_id);

// Appends `line` plus a newline to `path` with a single write() on an O_APPEND descriptor, under
// a process-wide mutex, so lines of concurrent threads and processes never interleave. Returns
// false (with the reason in `error`) when the file cannot be opened or the write is short.
bool append_record_line(const std::string& path, const std::string& line, std::string& error);

// Appends the call's record to $TOKAMAX_RECORD when it is set and non-empty. Never throws: the
// first failure of the process is reported once on stderr, later ones silently dropped.
void record_call(const BoundArgs& args, std::string_view implementation,
                 const ResolvedConfig& config, const std::string& device_id) noexcept;

}  // namespace tokamax
