// Input files from others: size limits, non-regular files, JSON nesting, error positions.
#include "ops/framework/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "ops/framework/errors.h"
#include "tests/test_util.h"

using namespace tokamax;
using tokamax::testing::ScratchDir;
using tokamax::testing::write_file;
using Catch::Contains;

TEST_CASE("read_input_file reads regular files and refuses everything else by name",
          "[input_file]") {
  ScratchDir dir;
  write_file(dir.file("small.txt"), "hello");
  CHECK(read_input_file(dir.file("small.txt"), 16, "catalog") == "hello");
  CHECK_THROWS_WITH(read_input_file(dir.file("missing.txt"), 16, "catalog"),
                    Contains("missing.txt: cannot read catalog: No such file"));
  CHECK_THROWS_WITH(read_input_file(dir.path().string(), 16, "catalog"),
                    Contains("is a directory"));
  // /dev/zero never ends: refused without reading it.
  CHECK_THROWS_WITH(read_input_file("/dev/zero", 16, "catalog"),
                    Contains("/dev/zero: cannot read catalog: not a regular file"));
  REQUIRE(::mkfifo(dir.file("fifo").c_str(), 0600) == 0);
  CHECK_THROWS_WITH(read_input_file(dir.file("fifo"), 16, "catalog"),
                    Contains("not a regular file"));
  CHECK_THROWS_WITH(read_input_file(dir.file("small.txt"), 4, "catalog"),
                    Contains("the file is 5 bytes, more than the 4 bytes a catalog may have"));
}

TEST_CASE("a 1 GiB file is refused at once, unread", "[input_file]") {
  ScratchDir dir;
  const std::string path = dir.file("huge.yaml");
  const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, off_t{1} << 30) == 0);  // sparse: no disk used
  ::close(fd);
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(read_input_file(path, kMaxCatalogBytes, "catalog"),
                    Contains("huge.yaml: cannot read catalog: the file is 1024 MiB, more than the "
                             "16 MiB a catalog may have"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(1));
}

TEST_CASE("JSON input: nesting past the limit and syntax errors at their line and column",
          "[input_file]") {
  const std::string ok = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  CHECK(parse_json_input(ok, "ok.json").is_array());
  // Brackets inside strings do not count.
  CHECK(parse_json_input("{\"a\": \"" + std::string(1000, '[') + "\"}", "s.json").is_object());
  const std::string deep = "{\"a\":\n  " + std::string(1 << 20, '[');
  try {
    parse_json_input(deep, "deep.json");
    FAIL("a document nested a million levels deep parsed");
  } catch (const InputError& e) {
    CHECK(e.file() == "deep.json");
    CHECK(e.line() == 2);
    CHECK(e.column() == kMaxJsonDepth + 2);  // the 64th '[' after "{" and two spaces
    CHECK_THAT(e.what(), Contains("JSON nested deeper than 64 levels"));
  }
  try {
    parse_json_input("{\n  \"a\": tru\n}", "bad.json", /*first_line=*/10);
    FAIL("invalid JSON parsed");
  } catch (const InputError& e) {
    CHECK(e.line() == 11);
    CHECK_THAT(e.what(), Contains("bad.json:11:") && Contains("invalid literal"));
  }
}
