// Program files: save_program_file writes atomically (a failed save leaves
// the old file, and no temporary, behind) and every file error names the file.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

#include "catch.hpp"
#include "io/io_test_util.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/io/json.h"
#include "random_program.h"

using namespace kiln;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;
using kiln_io_test::read_all;
using kiln_io_test::TempDir;

namespace {

Program unsavable_program() {  // a non-UTF-8 string cannot go into JSON
  Program p;
  Builder b(p);
  b.create<ConstantOp>(StrAttribute::get("\xc3"), Type(BoolType::get()));
  return p;
}

}  // namespace

TEST_CASE("a program saved to a file loads back equal", "[io][json]") {
  TempDir dir;
  std::string path = (dir.path / "model.json").string();
  Program p = test::random_program(11);
  save_program_file(p, path);
  Program q = load_program_file(path);
  CHECK(q.to_string() == p.to_string());
  CHECK(content_hash(q) == content_hash(p));
  CHECK(dir.entries() == std::vector<std::string>{"model.json"});  // no temporary left
  // The file is readable JSON that load_program_json takes as is.
  CHECK(load_program_json(read_all(path)).to_string() == p.to_string());
}

TEST_CASE("saving over an existing file replaces it", "[io][json]") {
  TempDir dir;
  std::string path = (dir.path / "model.json").string();
  save_program_file(test::random_program(1), path);
  Program p2 = test::random_program(2);
  save_program_file(p2, path);
  CHECK(load_program_file(path).to_string() == p2.to_string());
  CHECK(dir.entries() == std::vector<std::string>{"model.json"});
}

TEST_CASE("a save that fails leaves the old file intact and no temporary behind",
          "[io][json]") {
  TempDir dir;
  std::string path = (dir.path / "model.json").string();
  Program p = test::random_program(5);
  save_program_file(p, path);
  std::string before = read_all(path);
  CHECK_THROWS_AS(save_program_file(unsavable_program(), path), Error);
  CHECK(read_all(path) == before);
  CHECK(dir.entries() == std::vector<std::string>{"model.json"});
}

TEST_CASE("saving into a missing directory is an error naming the path and creates nothing",
          "[io][json]") {
  TempDir dir;
  std::string path = (dir.path / "no_such_dir" / "model.json").string();
  try {
    save_program_file(test::random_program(1), path);
    FAIL("saved into a missing directory");
  } catch (const Error& e) {
    CHECK_THAT(e.message(), Contains(path));
  }
  CHECK(!fs::exists(dir.path / "no_such_dir"));
  CHECK(dir.entries().empty());
}

TEST_CASE("saving onto a directory fails and leaves the directory as it was", "[io][json]") {
  TempDir dir;
  fs::create_directories(dir.path / "taken");
  std::string path = (dir.path / "taken").string();
  try {
    save_program_file(test::random_program(1), path);
    FAIL("saved onto a directory");
  } catch (const Error& e) {
    CHECK_THAT(e.message(), Contains(path));
  }
  CHECK(fs::is_directory(dir.path / "taken"));
  CHECK(fs::is_empty(dir.path / "taken"));
  CHECK(dir.entries() == std::vector<std::string>{"taken"});
}

TEST_CASE("loading a missing file is a NotFound error naming the file", "[io][json]") {
  TempDir dir;
  std::string path = (dir.path / "missing.json").string();
  try {
    (void)load_program_file(path);
    FAIL("loaded a missing file");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::NotFound);
    CHECK_THAT(e.message(), Contains(path));
  }
}

TEST_CASE("a bad program file is an error naming the file and what is wrong", "[io][json]") {
  TempDir dir;
  std::string path = (dir.path / "bad.json").string();
  std::ofstream(path) << R"({"format":"kiln.program","version":7,"parameters":[],"body":{}})";
  try {
    (void)load_program_file(path);
    FAIL("loaded a bad file");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Unimplemented);
    CHECK_THAT(e.message(), Contains(path));
    CHECK_THAT(e.message(), Contains("version 7"));
  }
  std::ofstream(path, std::ios::trunc) << R"({"format":"kiln.pro)";
  CHECK_THROWS_WITH(load_program_file(path), Contains(path) && Contains("malformed"));
}

TEST_CASE("loading a directory as a program file is an error naming it", "[io][json]") {
  TempDir dir;
  try {
    (void)load_program_file(dir.path.string());
    FAIL("loaded a directory");
  } catch (const Error& e) {
    CHECK_THAT(e.message(), Contains(dir.path.string()));
  }
}
