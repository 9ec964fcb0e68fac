// The kiln-onnx command-line tool, run as a user runs it (its path comes from
// meson in KILN_ONNX_TOOL): what it prints and its exit status for models
// and data folders that work and for those that do not.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "catch.hpp"
#include "kiln/onnx/import.h"
#include "kiln/onnx/test_data.h"

namespace fs = std::filesystem;

namespace {

struct ToolResult {
  int status = -1;   // the exit status; -1 when it did not exit normally
  std::string out;   // stdout and stderr together
};

// kiln-onnx with `args` (after the shell words `before`, if any); status
// -2 when the tool or the source root is unknown (not run by meson test).
ToolResult tool(const std::string& args, const std::string& before = {}) {
  const char* exe = std::getenv("KILN_ONNX_TOOL");
  if (!exe) return {-2, ""};
  ToolResult r;
  FILE* p = popen((before + "'" + std::string(exe) + "' " + args + " 2>&1").c_str(), "r");
  REQUIRE(p);
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string models() {
  const char* root = std::getenv("KILN_SOURCE_ROOT");
  return std::string(root ? root : ".") + "/test/onnx/models";
}

bool have_tool() {
  if (std::getenv("KILN_ONNX_TOOL") && std::getenv("KILN_SOURCE_ROOT")) return true;
  WARN("KILN_ONNX_TOOL / KILN_SOURCE_ROOT not set (meson test sets them): skipped");
  return false;
}

}  // namespace

TEST_CASE("kiln-onnx run feeds a data folder, compares with its expected outputs and writes them",
          "[onnx][tool]") {
  if (!have_tool()) return;
  const fs::path out = fs::temp_directory_path() / "kiln_onnx_tool_test_out";
  fs::remove_all(out);
  auto r = tool("run " + models() + "/lenet/model.onnx --data " + models() +
                "/lenet/test_data_set_0 --out " + out.string());
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("output logits: f32 [8x10]") && Catch::Contains("matches"));
  // --out holds the outputs in the same layout: they compare equal to the expected ones.
  const kiln::Tensor written = kiln::onnx::read_tensor_proto((out / "output_0.pb").string());
  const kiln::Tensor want =
      kiln::onnx::read_tensor_proto(models() + "/lenet/test_data_set_0/output_0.pb");
  CHECK(kiln::onnx::compare_tensors(written, want, 1e-4, 1e-4).matches);
  fs::remove_all(out);
}

TEST_CASE("kiln-onnx run names the data file, the graph input and what it takes when a tensor "
          "does not fit",
          "[onnx][tool]") {
  if (!have_tool()) return;
  const std::string lenet = models() + "/lenet/model.onnx --data " + models() + "/lenet/bad_data/";
  auto dtype = tool("run " + lenet + "wrong_dtype");
  CHECK(dtype.status == 1);
  CHECK_THAT(dtype.out, Catch::Contains("wrong_dtype/input_0.pb' holds i64 [1x1x28x28]") &&
                            Catch::Contains("graph input 'image' takes float [batch, 1, 28, 28]"));
  auto shape = tool("run " + lenet + "wrong_shape");
  CHECK(shape.status == 1);
  CHECK_THAT(shape.out, Catch::Contains("holds f32 [1x1x5x5]"));
  auto missing = tool("run " + lenet + "no_such_folder");
  CHECK(missing.status == 1);
  CHECK_THAT(missing.out, Catch::Contains("data folder") && Catch::Contains("does not exist"));
}

TEST_CASE("kiln-onnx run exits 1 and says MISMATCH when an output differs from the expected one",
          "[onnx][tool]") {
  if (!have_tool()) return;
  auto r = tool("run " + models() + "/lenet/model.onnx --data " + models() + "/lenet/bad_data/wrong_output");
  CHECK(r.status == 1);
  CHECK_THAT(r.out, Catch::Contains("MISMATCH (10 elements") && Catch::Contains("max abs error"));
}

TEST_CASE("kiln-onnx run compares within the --rtol and --atol given, and names a tolerance that is no "
          "number >= 0",
          "[onnx][tool]") {
  if (!have_tool()) return;
  const std::string run = "run " + models() + "/lenet/model.onnx --data " + models() + "/lenet/bad_data/wrong_output";
  auto wide = tool(run + " --atol 1 --rtol 0");
  CHECK(wide.status == 0);
  CHECK_THAT(wide.out, Catch::Contains("comparing within rtol 0, atol 1") && Catch::Contains("matches"));
  auto tight = tool(run + " --atol 0.1");  // the largest error is 0.135
  CHECK(tight.status == 1);
  CHECK_THAT(tight.out, Catch::Contains("MISMATCH"));
  auto negative = tool(run + " --atol -1");
  CHECK(negative.status == 1);
  CHECK_THAT(negative.out, Catch::Contains("--atol '-1' is not a number >= 0"));
  auto text = tool(run + " --rtol abc");
  CHECK(text.status == 1);
  CHECK_THAT(text.out, Catch::Contains("--rtol 'abc' is not a number >= 0"));
  auto empty = tool(run + " --atol ''");
  CHECK(empty.status == 1);
  CHECK_THAT(empty.out, Catch::Contains("--atol '' is not a number >= 0"));
}

TEST_CASE("kiln-onnx info lists every part of a model kiln cannot import and exits 1",
          "[onnx][tool]") {
  if (!have_tool()) return;
  auto ok = tool("info " + models() + "/gpt/model.onnx");
  CHECK(ok.status == 0);
  CHECK_THAT(ok.out, Catch::Contains("input ids: int64 [batch, 64]") &&
                         Catch::Contains("kiln imports every node"));
  const std::string cast = "/usr/share/libonnx-testdata/data/node/test_cast_FLOAT_to_STRING/model.onnx";
  if (fs::exists(cast)) {
    auto bad = tool("info " + cast);
    CHECK(bad.status == 1);
    CHECK_THAT(bad.out, Catch::Contains("kiln cannot import (1)") && Catch::Contains("Cast to element type string"));
  }
}

TEST_CASE("kiln-onnx reads its model once, so info, run and bench take one from a pipe",
          "[onnx][tool]") {
  if (!have_tool()) return;
  const std::string piped = "cat '" + models() + "/lenet/model.onnx' | timeout 120 ";
  auto info = tool("info /dev/stdin", piped);
  INFO(info.out);
  CHECK(info.status == 0);
  CHECK_THAT(info.out, Catch::Contains("kiln imports every node"));
  auto run = tool("run /dev/stdin --data " + models() + "/lenet/test_data_set_0", piped);
  INFO(run.out);
  CHECK(run.status == 0);
  CHECK_THAT(run.out, Catch::Contains("matches"));
  auto bench = tool("bench /dev/stdin --dim batch=1 --iters 2", piped);
  INFO(bench.out);
  CHECK(bench.status == 0);
  CHECK_THAT(bench.out, Catch::Contains("latency ms: p50"));
}

TEST_CASE("kiln-onnx bench reports latency percentiles and needs every symbolic dim",
          "[onnx][tool]") {
  if (!have_tool()) return;
  auto r = tool("bench " + models() + "/gpt/model.onnx --dim batch=2 --int-max 96 --iters 3 --name g");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("latency ms: p50") && Catch::Contains("BENCH g ") &&
                        Catch::Contains("samples/s (batch 2)"));
  auto missing = tool("bench " + models() + "/gpt/model.onnx --iters 3");
  CHECK(missing.status == 1);
  CHECK_THAT(missing.out, Catch::Contains("symbolic dim 'batch'") && Catch::Contains("--dim batch=N"));
  auto usage = tool("bench");
  CHECK(usage.status == 2);
  CHECK_THAT(usage.out, Catch::Contains("usage: kiln-onnx"));
}

TEST_CASE("kiln-onnx bench --precision bf16 runs a CNN's convolutions in bf16, says so, and names a precision "
          "it does not know",
          "[onnx][tool]") {
  if (!have_tool()) return;
  const std::string lenet = "bench " + models() + "/lenet/model.onnx --dim batch=2 --iters 3";
  auto bf16 = tool(lenet + " --precision bf16");
  INFO(bf16.out);
  CHECK(bf16.status == 0);
  CHECK_THAT(bf16.out, Catch::Contains("precision bf16 (") && Catch::Contains("ops in it)"));
  auto f32 = tool(lenet);
  CHECK(f32.status == 0);
  CHECK_THAT(f32.out, Catch::Contains("precision f32\n"));
  auto bad = tool(lenet + " --precision f8");
  CHECK(bad.status == 1);
  CHECK_THAT(bad.out, Catch::Contains("--precision 'f8'") && Catch::Contains("f32 or bf16"));
}

TEST_CASE("kiln-onnx bench runs the thread plan it is given, says which plan it kept, and "
          "names a plan it does not know",
          "[onnx][tool]") {
  if (!have_tool()) return;
  const std::string gpt = "bench " + models() + "/gpt/model.onnx --dim batch=2 --int-max 96 --iters 3";
  auto blas = tool(gpt + " --threads 2 --thread-plan blas");
  INFO(blas.out);
  CHECK(blas.status == 0);
  CHECK_THAT(blas.out, Catch::Contains("threads 2, thread plan blas"));
  auto one = tool(gpt + " --thread-plan sequential");
  CHECK(one.status == 0);
  CHECK_THAT(one.out, Catch::Contains("threads 1, thread plan sequential"));
  auto bad = tool(gpt + " --thread-plan fastest");
  CHECK(bad.status == 1);
  CHECK_THAT(bad.out, Catch::Contains("--thread-plan 'fastest'") &&
                          Catch::Contains("auto, sequential, graph, blas"));
}
