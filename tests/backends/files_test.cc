// Files other processes read: the temporaries of writers that died are removed, live ones kept.
#include "backends/files.h"

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "tests/test_util.h"

using namespace tokamax;
using namespace tokamax::testing;

TEST_CASE("remove_stale_temp_files removes only the temporaries of dead writers", "[cache]") {
  ScratchDir dir;
  const std::string path = dir.file("cache.json");
  write_file_atomically(path, "{}\n");
  // A pid that is certainly dead: a child that has exited and been reaped.
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) _exit(0);
  REQUIRE(waitpid(child, nullptr, 0) == child);
  const std::string dead = path + ".tmp." + std::to_string(child) + ".0";
  const std::string live = path + ".tmp." + std::to_string(getpid()) + ".7";
  const std::string other_file = dir.file("other.json.tmp." + std::to_string(child) + ".0");
  const std::string not_ours = path + ".tmp.notapid";
  for (const std::string& file : {dead, live, other_file, not_ours}) write_file(file, "partial");

  CHECK(remove_stale_temp_files(path) == 1);
  CHECK(!std::filesystem::exists(dead));
  CHECK(std::filesystem::exists(live));        // its writer may still rename it
  CHECK(std::filesystem::exists(other_file));  // another file's
  CHECK(std::filesystem::exists(not_ours));    // not a name write_file_atomically makes
  CHECK(read_file(path) == "{}\n");
  CHECK(remove_stale_temp_files(path) == 0);
}
