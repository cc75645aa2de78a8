// Error types of the library: InvalidArgument (caller error) vs NotImplemented (backend limit).
#pragma once

#include <stdexcept>
#include <string>

namespace tokamax {

// The caller's arguments are wrong for the op itself (shapes disagree, negative size, bad dtype).
// `field` names the offending argument or config field when there is one, so that a catalog
// loader can point at the exact line of a YAML file.
class InvalidArgument : public std::invalid_argument {
 public:
  explicit InvalidArgument(const std::string& message, std::string field = "")
      : std::invalid_argument(message), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

// The arguments are valid, but this implementation cannot run them (dtype, alignment, device).
// The dispatcher catches it and falls back to the next implementation.
class NotImplemented : public std::runtime_error {
 public:
  explicit NotImplemented(const std::string& message) : std::runtime_error(message) {}
};

// Bad input file (catalog, cache, config): carries the location for the `file:line:col` prefix.
class InputError : public std::runtime_error {
 public:
  InputError(std::string file, int line, int column, const std::string& message)
      : std::runtime_error(format(file, line, column, message)),
        file_(std::move(file)),
        line_(line),
        column_(column) {}
  const std::string& file() const { return file_; }
  int line() const { return line_; }
  int column() const { return column_; }

 private:
  static std::string format(const std::string& file, int line, int column,
                            const std::string& message) {
    std::string where = file;
    if (line > 0) where += ":" + std::to_string(line);
    if (column > 0) where += ":" + std::to_string(column);
    return where + ": " + message;
  }
  std::string file_;
  int line_;
  int column_;
};

// Raised when the user interrupts a long command (Ctrl-C); the CLI maps it to exit 130.
class Interrupted : public std::runtime_error {
 public:
  Interrupted() : std::runtime_error("interrupted") {}
};

}  // namespace tokamax
