// read_csv_f32 / parse_csv_f32: numbers into a rows x cols f32 tensor, and
// errors naming the file, line and column.
#include "kiln/io/csv.h"

#include <fstream>
#include <string>
#include <vector>

#include "catch.hpp"
#include "io_test_util.h"
#include "test_util.h"

using namespace kiln;
using kiln_io_test::TempDir;

namespace {

std::string write(const TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.file(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

}  // namespace

TEST_CASE("a CSV file of numbers reads as a rows x cols f32 tensor", "[io][csv]") {
  TempDir dir;
  const std::string path = write(dir, "table.csv", "0,1.5,-2\n3e2, 4 ,+5\r\n\n6,7,8\n");
  Tensor t = read_csv_f32(path);
  CHECK(t.dims() == Dims{3, 3});
  CHECK(t.dtype() == DataType::Float32);
  CHECK(t.to_vector<float>() == std::vector<float>{0, 1.5f, -2, 300, 4, 5, 6, 7, 8});
}

TEST_CASE("a CSV header line and another delimiter are options", "[io][csv]") {
  Tensor t = parse_csv_f32("a;b\n1;2\n3;4", "mem", {.delimiter = ';', .header = true});
  CHECK(t.dims() == Dims{2, 2});
  CHECK(t.to_vector<float>() == std::vector<float>{1, 2, 3, 4});
  // Tabs as the delimiter are not trimmed away.
  CHECK(parse_csv_f32("1\t2\n", "mem", {.delimiter = '\t'}).dims() == Dims{1, 2});
}

TEST_CASE("a missing CSV file is a NotFound error naming it", "[io][csv]") {
  TempDir dir;
  KILN_CHECK_ERROR(read_csv_f32(dir.file("absent.csv")), NotFound, {"CSV file", "absent.csv"});
}

TEST_CASE("a bad CSV field is an error naming the file, line and column", "[io][csv]") {
  TempDir dir;
  const std::string path = write(dir, "bad.csv", "1,2,3\n4,five,6\n");
  KILN_CHECK_ERROR(read_csv_f32(path), InvalidArgument,
                   {"CSV file '" + path + "', line 2, column 2: 'five' is not a number"});
  KILN_CHECK_ERROR(parse_csv_f32("1,2\n3,\n", "t.csv"), InvalidArgument,
                   {"'t.csv', line 2, column 2: empty field"});
  KILN_CHECK_ERROR(parse_csv_f32("1,2x\n", "t.csv"), InvalidArgument, {"line 1, column 2: '2x' is not a number"});
  KILN_CHECK_ERROR(parse_csv_f32("1e39\n", "t.csv"), InvalidArgument, {"'1e39' is out of the range of f32"});
  KILN_CHECK_ERROR(parse_csv_f32("+\n", "t.csv"), InvalidArgument, {"'+' is not a number"});
}

TEST_CASE("a CSV row with another field count is an error naming the line", "[io][csv]") {
  KILN_CHECK_ERROR(parse_csv_f32("\n1,2,3\n4,5,6\n7,8\n", "ragged.csv"), InvalidArgument,
                   {"CSV file 'ragged.csv', line 4: 2 fields (expected 3, as on line 2)"});
}

TEST_CASE("a CSV file without rows is an error", "[io][csv]") {
  KILN_CHECK_ERROR(parse_csv_f32("", "empty.csv"), InvalidArgument, {"'empty.csv' has no rows"});
  KILN_CHECK_ERROR(parse_csv_f32("x,y\n\n", "h.csv", {.header = true}), InvalidArgument,
                   {"has no rows after its header line"});
}
