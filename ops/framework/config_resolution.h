// Config resolution: explicit > user cache > shipped cache > heuristics.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "ops/framework/autotune_cache.h"
#include "ops/framework/bound_args.h"
#include "ops/framework/op.h"

namespace tokamax {

enum class ConfigSource { kExplicit, kUserCache, kShippedCache, kHeuristics };
std::string_view config_source_name(ConfigSource source);  // "explicit", "cache", "shipped", ...

struct ResolvedConfig {
  Kernel kernel;  // kernel.config: the config in canonical JSON
  ConfigSource source = ConfigSource::kHeuristics;
  std::string note;  // why a cache entry was passed over, if one was
};

struct ConfigContext {
  std::optional<nlohmann::json> explicit_config;
  const AutotuneCache* user_cache = nullptr;
  const AutotuneCache* shipped_cache = nullptr;
};

// The first source that has a config valid for these args. A cached config that no longer
// parses or fits (stale after a change of the Config struct) is passed over, with a note. An
// invalid explicit config throws InvalidArgument.
// `prepared` is `impl` prepared for `args` on `device`; each candidate config is parsed once.
ResolvedConfig resolve_config(const Implementation& impl, const Implementation::Prepared& prepared,
                              const BoundArgs& args, const Device& device,
                              const ConfigContext& context);

}  // namespace tokamax
