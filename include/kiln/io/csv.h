// CSV of numbers: a file of rows of comma-separated numbers read into one
// rows x cols f32 tensor — how examples load small data sets (the digits
// images, a regression table) without Python. Errors name the file, the line
// and the column.
#pragma once

#include <string>
#include <string_view>

#include "kiln/runtime/tensor.h"

namespace kiln {

struct CsvOptions {
  char delimiter = ',';
  // Skip the first line (column names).
  bool header = false;
};

// The numbers of `path` as a [rows, cols] f32 tensor on the CPU, row-major in
// file order. Fields may have spaces or tabs around them; lines may end in
// "\r\n"; blank lines are skipped. kiln::Error: (NotFound) when the file
// cannot be opened, (InvalidArgument) naming the file, line and column for a
// field that is not a number (or out of f32 range) or empty, naming the line
// for a row whose field count differs from the first row's, and when the
// file has no rows.
Tensor read_csv_f32(const std::string& path, const CsvOptions& options = {});

// The same from text in memory; `name` stands for the file in errors.
Tensor parse_csv_f32(std::string_view text, std::string_view name, const CsvOptions& options = {});

}  // namespace kiln
