// The kiln-opt command-line tool, run as a user runs it (its path comes from
// meson in KILN_OPT_TOOL): a program read as text or JSON, a pipeline run
// over it, the result printed; and its errors and exit statuses.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "catch.hpp"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/io/json.h"
#include "kiln/ir/builder.h"
#include "kiln/ir/parser.h"

namespace fs = std::filesystem;
using namespace kiln;

namespace {

struct ToolResult {
  int status = -1;  // the exit status; -1 when it did not exit normally
  std::string out;  // standard output
  std::string err;  // standard error
};

bool have_tool() {
  if (std::getenv("KILN_OPT_TOOL")) return true;
  WARN("KILN_OPT_TOOL not set (meson test sets it): skipped");
  return false;
}

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / "kiln_opt_tool_test";
  fs::create_directories(dir);
  return dir / name;
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// kiln-opt with `args`, standard output and error captured apart.
ToolResult opt(const std::string& args) {
  const fs::path err = scratch("stderr.txt");
  ToolResult r;
  const std::string cmd =
      "'" + std::string(std::getenv("KILN_OPT_TOOL")) + "' " + args + " 2>'" + err.string() + "'";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.err = slurp(err);
  return r;
}

// x → exp (unused) ; y = x + x ; z = x + x (a duplicate) ; fetch y * z.
Program sample_program() {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{4}).result();
  b.create<ExpOp>(x);
  Value y = b.create<AddOp>(x, x).result();
  Value z = b.create<AddOp>(x, x).result();
  b.create<FetchOp>(b.create<MulOp>(y, z).result(), "out");
  return p;
}

fs::path write(const std::string& name, const std::string& text) {
  const fs::path path = scratch(name);
  std::ofstream(path) << text;
  return path;
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("kiln-opt without passes prints a text program back exactly", "[passes][tool]") {
  if (!have_tool()) return;
  const std::string text = sample_program().to_string();
  auto r = opt("'" + write("plain.kir", text).string() + "'");
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out == text);
}

TEST_CASE("kiln-opt runs a pipeline: dce drops the unused exp and cse merges the duplicate add",
          "[passes][tool]") {
  if (!have_tool()) return;
  const fs::path in = write("sample.kir", sample_program().to_string());
  auto r = opt("'" + in.string() + "' --passes dce,cse");
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(count(r.out, "kiln.exp") == 0);
  CHECK(count(r.out, "kiln.add") == 1);
  CHECK(count(r.out, "kiln.mul") == 1);
  Program back = parse_program(r.out, "kiln-opt output");  // the output is a program again
  CHECK(back.block().size() == 4);                        // data, add, mul, fetch
}

TEST_CASE("kiln-opt reads JSON from standard input and writes JSON that loads back", "[passes][tool]") {
  if (!have_tool()) return;
  Program p = sample_program();
  const fs::path in = write("sample.json", save_program_json(p));
  const fs::path out = scratch("out.json");
  fs::remove(out);
  auto r = opt("--emit json -o '" + out.string() + "' < '" + in.string() + "'");
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.empty());
  Program back = load_program_json(slurp(out));
  CHECK(back.to_string() == p.to_string());
}

TEST_CASE("kiln-opt's default pipeline is the executor's", "[passes][tool]") {
  if (!have_tool()) return;
  const fs::path in = write("default.kir", sample_program().to_string());
  auto r = opt("'" + in.string() + "' --passes default --timing");
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(count(r.out, "kiln.exp") == 0);
  for (const char* pass : {"dce", "cse", "fold", "simplify", "fuse"})
    CHECK_THAT(r.err, Catch::Contains(pass));  // each in the timing table
}

TEST_CASE("kiln-opt prints the IR around a chosen pass to standard error", "[passes][tool]") {
  if (!have_tool()) return;
  const fs::path in = write("around.kir", sample_program().to_string());
  auto r = opt("'" + in.string() + "' --passes dce,cse --print-ir-before cse --print-ir-after cse");
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.err, Catch::Contains("IR before 'cse'"));
  CHECK_THAT(r.err, Catch::Contains("IR after 'cse'"));
  CHECK_THAT(r.err, !Catch::Contains("IR before 'dce'"));
}

TEST_CASE("kiln-opt lists the registered passes", "[passes][tool]") {
  if (!have_tool()) return;
  auto r = opt("--list-passes");
  REQUIRE(r.status == 0);
  for (const char* pass : {"dce", "cse", "fold", "simplify", "fuse"})
    CHECK_THAT(r.out, Catch::Contains(std::string(pass) + "  "));
}

TEST_CASE("kiln-opt names the line and column of a text program that does not parse", "[passes][tool]") {
  if (!have_tool()) return;
  const fs::path in = write("broken.kir", "program {\n  %0 = kiln.nosuchop() : () -> f32[4]\n}\n");
  auto r = opt("'" + in.string() + "'");
  CHECK(r.status == 1);
  CHECK(r.out.empty());
  CHECK_THAT(r.err, Catch::Contains(in.string() + ":2:"));
  CHECK_THAT(r.err, Catch::Contains("kiln.nosuchop"));
}

TEST_CASE("kiln-opt rejects an unknown pass, a missing file and a bad command line", "[passes][tool]") {
  if (!have_tool()) return;
  const fs::path in = write("ok.kir", sample_program().to_string());
  auto unknown = opt("'" + in.string() + "' --passes dce,nosuchpass");
  CHECK(unknown.status == 1);
  CHECK_THAT(unknown.err, Catch::Contains("nosuchpass"));

  auto missing = opt("'" + scratch("does_not_exist.kir").string() + "'");
  CHECK(missing.status == 1);
  CHECK_THAT(missing.err, Catch::Contains("does_not_exist.kir"));

  auto flag = opt("--frobnicate");
  CHECK(flag.status == 2);
  CHECK_THAT(flag.err, Catch::Contains("--frobnicate"));
  auto emit = opt("--emit yaml");
  CHECK(emit.status == 2);
  CHECK_THAT(emit.err, Catch::Contains("yaml"));
  auto two = opt("a.kir b.kir");
  CHECK(two.status == 2);
}

TEST_CASE("kiln-opt --memory-plan prints the arena a static-shape program's temporaries need, before any run",
          "[passes][tool]") {
  if (!have_tool()) return;
  // x[8192] -> exp -> exp -> exp -> sum: three 32 KiB temporaries, two of
  // them live at once, and the sum's 4 bytes (a 64-byte piece, beside the
  // last exp in the bytes the first one left).
  auto chain = [](std::int64_t n) {
    Program p;
    Builder b(p);
    Value v = b.create<DataOp>("x", std::vector<std::int64_t>{n}).result();
    for (int i = 0; i < 3; ++i) v = b.create<ExpOp>(v).result();
    b.create<SumOp>(v, std::vector<std::int64_t>{}, false);
    return p;
  };
  auto r = opt("'" + write("static.kir", chain(8192).to_string()).string() + "' --memory-plan");
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.err, Catch::Contains("memory plan: 4 temporaries in an arena of 65536 bytes (65536 in program "
                                    "order); unshared 98368 bytes, live-set minimum 65536 bytes"));
  CHECK_THAT(r.out, Catch::Contains("kiln.exp"));  // the program is still printed
  auto d = opt("'" + write("dynamic.kir", chain(-1).to_string()).string() + "' --memory-plan");
  REQUIRE(d.status == 0);
  CHECK_THAT(d.err, Catch::Contains("memory plan: none before a run"));
}
