// Plain-text tables for the terminal: left-aligned text, right-aligned numbers.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace tokamax::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  // Columns whose index is in `right` are right-aligned (numbers).
  void set_right_aligned(std::vector<size_t> right) { right_ = std::move(right); }
  // Streaming: prints the header now, each column `width_hints[c]` wide at least (what its
  // rows are expected to need), and from then on every add_row at once (flushed), so that a
  // run that is stopped keeps the rows it printed. A cell wider than its column shifts the rest
  // of its row; print() then prints nothing more.
  void stream_to(std::ostream& out, const std::vector<size_t>& width_hints);
  void add_row(std::vector<std::string> row);
  bool empty() const { return rows_.empty(); }
  void print(std::ostream& out) const;

 private:
  void print_row(std::ostream& out, const std::vector<size_t>& width,
                 const std::vector<std::string>& row) const;
  void print_header(std::ostream& out, const std::vector<size_t>& width) const;

  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
  std::vector<size_t> right_;
  std::ostream* stream_ = nullptr;
  std::vector<size_t> stream_width_;
};

// Fixed-point / scientific formatting for the tables.
std::string format_number(double value, int precision = 2);
std::string format_scientific(double value, int precision = 2);
// 1.234 ms, 56.7 us, ...
std::string format_duration(double seconds);

}  // namespace tokamax::cli
