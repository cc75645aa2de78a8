// Reading input files with a size limit (input_file.h).
#include "ops/framework/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ops/framework/errors.h"

namespace tokamax {
namespace {

std::string size_text(uint64_t bytes) {
  constexpr uint64_t kMiB = 1ull << 20;
  if (bytes >= kMiB) return std::to_string(bytes / kMiB) + " MiB";
  return std::to_string(bytes) + " bytes";
}

// "[json.exception.parse_error.101] parse error at line 1, column 2: <reason>" -> "<reason>".
std::string parse_error_reason(const nlohmann::json::parse_error& error) {
  const std::string what = error.what();
  const size_t start = what.find("parse error");
  const size_t colon = start == std::string::npos ? start : what.find(": ", start);
  return colon == std::string::npos ? what : what.substr(colon + 2);
}

}  // namespace

std::pair<int, int> text_position(std::string_view text, size_t offset) {
  int line = 1;
  int column = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) {
      ++column;
    }
  }
  return {line, column};
}

void check_json_depth(std::string_view text, const std::string& source, int first_line) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) {
        const auto [line, column] = text_position(text, i);
        throw InputError(source, line + first_line - 1, column,
                         "JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
      }
    } else if (c == ']' || c == '}') {
      --depth;  // unbalanced text is the parser's error to report
    }
  }
}

nlohmann::json parse_json_input(std::string_view text, const std::string& source,
                                int first_line) {
  check_json_depth(text, source, first_line);
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    // nlohmann reports the 1-based byte index of the last character it read: where the error is.
    const auto [line, column] = text_position(text, e.byte == 0 ? 0 : e.byte - 1);
    throw InputError(source, line + first_line - 1, column, parse_error_reason(e));
  } catch (const nlohmann::json::exception& e) {
    // A number past double's range (out_of_range.406: "number overflow parsing '1e999'"): at
    // the number, found by its text.
    const std::string what = e.what();
    const size_t quote = what.find('\'');
    const size_t end = quote == std::string::npos ? quote : what.find('\'', quote + 1);
    const size_t at = end == std::string::npos ? std::string_view::npos
                                               : text.find(what.substr(quote + 1, end - quote - 1));
    const auto [line, column] = at == std::string_view::npos ? std::pair{0, 0} : text_position(text, at);
    throw InputError(source, line == 0 ? 0 : line + first_line - 1, column,
                     what.substr(what.find(']') == std::string::npos ? 0 : what.find(']') + 2));
  }
}

std::string read_input_file(const std::string& path, uint64_t max_bytes, const std::string& what) {
  const auto fail = [&](const std::string& why) -> InputError {
    return InputError(path, 0, 0, "cannot read " + what + ": " + why);
  };
  // O_NONBLOCK: opening a FIFO waits for a writer otherwise; it changes nothing for the regular
  // files read below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) throw fail(std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat info {};
  if (::fstat(fd, &info) != 0) throw fail(std::strerror(errno));
  if (S_ISDIR(info.st_mode)) throw fail("is a directory");
  // A FIFO or a character device may never end (/dev/zero); only regular files are read.
  if (!S_ISREG(info.st_mode)) throw fail("not a regular file");
  if (static_cast<uint64_t>(info.st_size) > max_bytes) {
    throw fail("the file is " + size_text(static_cast<uint64_t>(info.st_size)) + ", more than the " +
               size_text(max_bytes) + " a " + what + " may have");
  }
  std::string text;
  text.reserve(static_cast<size_t>(info.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t count = ::read(fd, buffer, sizeof(buffer));
    if (count == 0) break;
    if (count < 0) {
      if (errno == EINTR) continue;
      throw fail(std::strerror(errno));
    }
    // The file may grow while it is read.
    if (text.size() + static_cast<size_t>(count) > max_bytes) {
      throw fail("the file grew past the " + size_text(max_bytes) + " a " + what + " may have");
    }
    text.append(buffer, static_cast<size_t>(count));
  }
  return text;
}

}  // namespace tokamax
