// Tests for config resolution order: explicit > user cache > shipped cache > heuristics.
#include "ops/framework/config_resolution.h"

#include <catch2/catch.hpp>

#include "backends/cpu/cpu_device.h"
#include "tests/ops/framework/fake_impls.h"

using namespace tokamax;
using namespace tokamax::testing;

TEST_CASE("config resolution prefers explicit, then user cache, shipped cache, heuristics",
          "[config_resolution]") {
  const FakeRaggedDot fake("fake");
  const BoundArgs args = small_ragged_dot_args();
  const Device& device = cpu::host_device();
  const CacheKey key{device.id(), "ragged_dot", args.key(), "fake"};
  AutotuneCache user, shipped;
  CacheEntry user_entry;
  user_entry.config = {{"mode", 0}, {"delay_us", 11}};
  user.put(key, user_entry);
  CacheEntry shipped_entry;
  shipped_entry.config = {{"mode", 0}, {"delay_us", 22}};
  shipped.put(key, shipped_entry);

  ConfigContext context;
  CHECK(resolve_config(fake, *fake.prepare(args, device), args, device, context).source ==
        ConfigSource::kHeuristics);
  context.shipped_cache = &shipped;
  CHECK(resolve_config(fake, *fake.prepare(args, device), args, device, context)
            .kernel.config["delay_us"] == 22);
  CHECK(resolve_config(fake, *fake.prepare(args, device), args, device, context).source ==
        ConfigSource::kShippedCache);
  context.user_cache = &user;
  CHECK(resolve_config(fake, *fake.prepare(args, device), args, device, context)
            .kernel.config["delay_us"] == 11);
  CHECK(resolve_config(fake, *fake.prepare(args, device), args, device, context).source ==
        ConfigSource::kUserCache);
  context.explicit_config = nlohmann::json{{"delay_us", 33}};
  const ResolvedConfig explicit_config =
      resolve_config(fake, *fake.prepare(args, device), args, device, context);
  CHECK(explicit_config.source == ConfigSource::kExplicit);
  CHECK(explicit_config.kernel.config == nlohmann::json({{"mode", 0}, {"delay_us", 33}}));
  CHECK(config_source_name(ConfigSource::kUserCache) == "cache");
}

TEST_CASE("a stale cache entry is passed over with a note and a bad explicit config is an error",
          "[config_resolution]") {
  const FakeRaggedDot fake("fake");
  const BoundArgs args = small_ragged_dot_args();
  const Device& device = cpu::host_device();
  AutotuneCache user;
  CacheEntry stale;
  stale.config = {{"tile_q", 4}};  // a field this config does not have (any more)
  user.put({device.id(), "ragged_dot", args.key(), "fake"}, stale);
  ConfigContext context;
  context.user_cache = &user;
  const ResolvedConfig resolved =
      resolve_config(fake, *fake.prepare(args, device), args, device, context);
  CHECK(resolved.source == ConfigSource::kHeuristics);
  CHECK(resolved.note.find("tile_q") != std::string::npos);

  context.explicit_config = nlohmann::json{{"mode", 2}};  // valid JSON, rejected by check_config
  CHECK_THROWS_AS(resolve_config(fake, *fake.prepare(args, device), args, device, context),
                  InvalidArgument);
  context.explicit_config = nlohmann::json{{"mode", "fast"}};
  CHECK_THROWS_WITH(resolve_config(fake, *fake.prepare(args, device), args, device, context),
                    Catch::Contains("mode") && Catch::Contains("wrong type"));
}
