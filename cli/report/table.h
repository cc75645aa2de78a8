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
  void add_row(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  bool empty() const { return rows_.empty(); }
  void print(std::ostream& out) const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
  std::vector<size_t> right_;
};

// Fixed-point / scientific formatting for the tables.
std::string format_number(double value, int precision = 2);
std::string format_scientific(double value, int precision = 2);
// 1.234 ms, 56.7 us, ...
std::string format_duration(double seconds);

}  // namespace tokamax::cli
