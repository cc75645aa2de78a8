// Config resolution: explicit > user cache > shipped cache > heuristics.
#include "ops/framework/config_resolution.h"

#include "ops/framework/errors.h"

namespace tokamax {

std::string_view config_source_name(ConfigSource source) {
  switch (source) {
    case ConfigSource::kExplicit:
      return "explicit";
    case ConfigSource::kUserCache:
      return "cache";
    case ConfigSource::kShippedCache:
      return "shipped";
    case ConfigSource::kHeuristics:
      return "heuristics";
  }
  return "?";
}

ResolvedConfig resolve_config(const Implementation& impl, const Implementation::Prepared& prepared,
                              const BoundArgs& args, const Device& device,
                              const ConfigContext& context) {
  if (context.explicit_config) {
    return {prepared.kernel(*context.explicit_config), ConfigSource::kExplicit, ""};
  }
  std::string note;
  const CacheKey key{device.id(), args.op, args.key(), std::string(impl.name())};
  const std::pair<const AutotuneCache*, ConfigSource> caches[] = {
      {context.user_cache, ConfigSource::kUserCache},
      {context.shipped_cache, ConfigSource::kShippedCache}};
  for (const auto& [cache, source] : caches) {
    if (cache == nullptr) continue;
    const CacheEntry* entry = cache->find(key);
    if (entry == nullptr) continue;
    try {
      return {prepared.kernel(entry->config), source, note};
    } catch (const InvalidArgument& e) {
      note += std::string(config_source_name(source)) + " entry ignored: " + e.what() + "; ";
    }
  }
  return {prepared.heuristics_kernel(), ConfigSource::kHeuristics, note};
}

}  // namespace tokamax
