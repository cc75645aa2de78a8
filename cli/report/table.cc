// Plain-text table printing.
#include "cli/report/table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace tokamax::cli {

void Table::print_row(std::ostream& out, const std::vector<size_t>& width,
                      const std::vector<std::string>& row) const {
  std::string line;
  for (size_t c = 0; c < header_.size(); ++c) {
    const std::string cell = c < row.size() ? row[c] : "";
    const std::string pad(width[c] > cell.size() ? width[c] - cell.size() : 0, ' ');
    const bool right = std::find(right_.begin(), right_.end(), c) != right_.end();
    line += right ? pad + cell : cell + pad;
    if (c + 1 < header_.size()) line += "  ";
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  out << line << "\n";
}

void Table::print_header(std::ostream& out, const std::vector<size_t>& width) const {
  print_row(out, width, header_);
  std::vector<std::string> rule;
  for (size_t w : width) rule.push_back(std::string(w, '-'));
  print_row(out, width, rule);
}

void Table::stream_to(std::ostream& out, const std::vector<size_t>& width_hints) {
  stream_ = &out;
  stream_width_.assign(header_.size(), 0);
  for (size_t c = 0; c < header_.size(); ++c) {
    stream_width_[c] = std::max(header_[c].size(), c < width_hints.size() ? width_hints[c] : 0);
  }
  print_header(out, stream_width_);
  for (const auto& row : rows_) print_row(out, stream_width_, row);
  out.flush();
}

void Table::add_row(std::vector<std::string> row) {
  if (stream_ != nullptr) {
    print_row(*stream_, stream_width_, row);
    stream_->flush();
  }
  rows_.push_back(std::move(row));
}

void Table::print(std::ostream& out) const {
  if (stream_ != nullptr) return;  // already printed, row by row
  std::vector<size_t> width(header_.size(), 0);
  for (size_t c = 0; c < header_.size(); ++c) width[c] = header_[c].size();
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size() && c < width.size(); ++c) {
      width[c] = std::max(width[c], row[c].size());
    }
  }
  print_header(out, width);
  for (const auto& row : rows_) print_row(out, width, row);
}

std::string format_number(double value, int precision) {
  if (std::isnan(value)) return "-";
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", precision, value);
  return buffer;
}

std::string format_scientific(double value, int precision) {
  if (std::isnan(value)) return "-";
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*e", precision, value);
  return buffer;
}

std::string format_duration(double seconds) {
  if (std::isnan(seconds)) return "-";
  char buffer[64];
  if (seconds >= 1.0) {
    std::snprintf(buffer, sizeof(buffer), "%.3f s", seconds);
  } else if (seconds >= 1e-3) {
    std::snprintf(buffer, sizeof(buffer), "%.3f ms", seconds * 1e3);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%.2f us", seconds * 1e6);
  }
  return buffer;
}

}  // namespace tokamax::cli
