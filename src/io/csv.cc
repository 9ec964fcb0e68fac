// CSV of numbers into an f32 tensor.
#include "kiln/io/csv.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <system_error>
#include <vector>

#include "kiln/io/file.h"
#include "kiln/support/error.h"

namespace kiln {

namespace {

std::string_view trim(std::string_view s, char delimiter) {
  auto blank = [&](char c) { return (c == ' ' || c == '\t') && c != delimiter; };
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  return s;
}

// One field as a float; kiln::Error naming where it is when it is not one.
float parse_field(std::string_view field, std::string_view name, std::size_t line, std::size_t column) {
  auto fail = [&](const auto&... why) {
    throw_error(ErrorKind::InvalidArgument, "CSV file '", name, "', line ", line, ", column ", column,
                ": ", why...);
  };
  if (field.empty()) fail("empty field (expected a number)");
  std::string_view digits = field;
  if (digits.front() == '+') digits.remove_prefix(1);  // from_chars takes no '+'
  double v = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec == std::errc::result_out_of_range || (std::isfinite(v) && std::fabs(v) > std::numeric_limits<float>::max()))
    fail("'", field, "' is out of the range of f32");
  if (ec != std::errc() || end != digits.data() + digits.size() || digits.empty())
    fail("'", field, "' is not a number");
  return static_cast<float>(v);
}

}  // namespace

Tensor parse_csv_f32(std::string_view text, std::string_view name, const CsvOptions& options) {
  std::vector<float> values;
  std::int64_t rows = 0;
  std::size_t cols = 0, first_row_line = 0;
  std::size_t line_no = 0;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line_no == 1 && options.header) continue;
    if (trim(line, options.delimiter).empty()) continue;

    std::size_t fields = 0;
    for (;;) {
      const std::size_t cut = line.find(options.delimiter);
      ++fields;
      values.push_back(parse_field(trim(line.substr(0, cut), options.delimiter), name, line_no, fields));
      if (cut == std::string_view::npos) break;
      line.remove_prefix(cut + 1);
    }
    if (rows == 0) {
      cols = fields;
      first_row_line = line_no;
    } else if (fields != cols) {
      throw_error(ErrorKind::InvalidArgument, "CSV file '", name, "', line ", line_no, ": ", fields,
                  " fields (expected ", cols, ", as on line ", first_row_line, ")");
    }
    ++rows;
  }
  if (rows == 0)
    throw_error(ErrorKind::InvalidArgument, "CSV file '", name, "' has no rows",
                options.header ? " after its header line" : "");
  return Tensor::from_vector({rows, static_cast<std::int64_t>(cols)}, values);
}

Tensor read_csv_f32(const std::string& path, const CsvOptions& options) {
  const std::string text = read_whole_file(path, "CSV file");
  return parse_csv_f32(text, path, options);
}

}  // namespace kiln
